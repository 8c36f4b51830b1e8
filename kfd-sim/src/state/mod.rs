//! What the kernel keeps, below the drivers' code and above the hardware: the machine with its
//! registries ([`machine`]), the accounts its objects settle ([`accounts`]), each GPU
//! ([`device`]), the KFD process with its pdds and BOs ([`process`]), its queues ([`queue`]),
//! events ([`event`]) and SVM ranges ([`svm_range`]), and an open render file's GEM handles,
//! contexts and BO lists ([`render_file`]).
//!
//! A buffer object or a process holds the [`Accounts`](accounts::Accounts), not the machine, to
//! give back what it used when it goes: the machine holds them, never the other way round.

pub(crate) mod accounts;
pub(crate) mod device;
pub(crate) mod event;
pub(crate) mod machine;
pub(crate) mod process;
pub(crate) mod queue;
pub(crate) mod render_file;
pub(crate) mod svm_range;
