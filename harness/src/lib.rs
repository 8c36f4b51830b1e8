//! The simulated node: the simulator wired to the plugin engine, and the model ROCm workload that
//! runs on it.
//!
//! Where it sits: below `cli` (`amdgpu-cr demo`, `bench`), `tests` and `fuzz`, which all drive
//! checkpoints and restores through it, so that none of them builds on another's internals;
//! above the plugin engine (`plugin`), the simulator (`kfd-sim`) and `kfd-abi`. It depends on no
//! CLI crate, and its library on no argument parser: the binary `kfd-workload` (the VM lane and
//! the hardware lane run it) parses its own arguments.
//!
//! ```text
//!   cli   tests   fuzz
//!     \     |     /
//!        harness            (this crate; binary kfd-workload)
//!     /     |     \
//!  plugin  kfd-sim  kfd-abi
//! ```
//!
//! - [`workload`]: a model ROCm process written against `kfd-abi` only (so it runs in process,
//!   over CUSE and on hardware alike), its data patterns and its verification.
//! - [`node`]: a simulated node ([`SimNode`]), the workload started on it ([`Target`]), and a
//!   node with other gpu ids to restore onto ([`remapped_variant`]).
//! - [`criu`]: criu's part of a checkpoint and a restore, through the plugin's hooks in criu's
//!   order ([`checkpoint`], [`restore`]), and the checkpoint's file ids ([`ImageIds`]); of a
//!   tree of processes that share buffers ([`checkpoint_tree`], [`restore_tree`]).

pub mod criu;
pub mod node;
pub mod workload;

pub use criu::{
    checkpoint, checkpoint_files, checkpoint_new, checkpoint_restored, checkpoint_tree, restore,
    restore_tree, restore_tree_as, restore_with, CriuHooksSet, ImageIds, RestoredFile,
    RestoredTarget, RestoredTask, TaskFiles, TaskIds,
};
pub use node::{
    remapped_variant, start_target, start_target_in, NodeError, SimNode, Target, TOPOLOGY_DIR_BASE,
};
