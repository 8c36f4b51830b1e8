//! The messages of criu-amdgpu.proto as prost types.
//!
//! Generated from `images/proto/criu-amdgpu.proto` by `scripts/gen-proto.sh` (committed; the
//! build needs no protoc). Field numbers and types are upstream's; upstream scalars are proto2
//! `required`, so they are always encoded, in field-number order, as upstream readers demand.
//! Our additions are numbered 100 and up (see [`PagesChecksums`]).

#[allow(clippy::all, clippy::pedantic, missing_docs)]
mod criu_amdgpu;

pub use criu_amdgpu::*;
