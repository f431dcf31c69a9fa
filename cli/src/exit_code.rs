//! The exit codes of `fencelock run` (docs/design.md §9.2), shared with `--help`.

/// The lease was lost while CMD ran (CMD was stopped).
pub const LOST: i32 = 122;
/// Not acquired within `--wait` (unless `--conflict-exit-code` says otherwise), as timeout(1).
pub const NOT_ACQUIRED: i32 = 124;
/// fencelock's own error: bad arguments, backend unreachable, …
pub const OWN_ERROR: i32 = 125;
/// CMD exists but cannot be executed.
pub const NOT_EXECUTABLE: i32 = 126;
/// CMD was not found.
pub const NOT_FOUND: i32 = 127;
/// CMD killed by signal N exits with 128 + N.
pub const SIGNAL_BASE: i32 = 128;
