//! What every device-file handle type has in common: it owns a transport and a label for
//! errors, can be opened from a path, duplicated, and seen as an fd. One macro writes it, so that
//! `Kfd` and `RenderNode` stay distinct types (a KFD call cannot be made on a render node) without
//! writing the same code twice.

/// Declares a handle type `$name<T: Transport>` over a transport, with `open`, `new`,
/// `transport`, `label`, `try_clone`, `into_transport` and `AsFd`.
macro_rules! device_handle {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name<T: $crate::transport::Transport = $crate::transport::FdTransport> {
            transport: T,
            label: String,
        }

        impl $name<$crate::transport::FdTransport> {
            #[doc = concat!("Opens the ", $what, " at `path`.")]
            pub fn open(path: &std::path::Path) -> $crate::error::Result<Self> {
                let transport = $crate::transport::FdTransport::open(path).map_err(|source| {
                    $crate::error::IoctlError::Open { path: path.to_owned(), source }
                })?;
                Ok(Self::new(transport, path.display().to_string()))
            }
        }

        impl<T: $crate::transport::Transport> std::os::fd::AsFd for $name<T> {
            fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
                self.transport.as_fd()
            }
        }

        impl<T: $crate::transport::Transport> $name<T> {
            #[doc = concat!("Wraps a transport open on a ", $what, "; `label` names it in errors.")]
            pub fn new(transport: T, label: impl Into<String>) -> Self {
                Self { transport, label: label.into() }
            }

            /// The transport.
            pub fn transport(&self) -> &T {
                &self.transport
            }

            /// The name used in error messages.
            pub fn label(&self) -> &str {
                &self.label
            }

            /// Gives the transport back.
            pub fn into_transport(self) -> T {
                self.transport
            }

            /// Another handle on the same open file (as `dup(2)` makes).
            pub fn try_clone(&self) -> $crate::error::Result<Self> {
                let transport = self.transport.try_clone().map_err(|source| {
                    $crate::error::IoctlError::Fd { what: "dup", device: self.label.clone(), source }
                })?;
                Ok(Self { transport, label: self.label.clone() })
            }
        }
    };
}

pub(crate) use device_handle;
