//! Integration tests across the workspace.
