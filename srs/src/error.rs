use std::path::PathBuf;

use thiserror::Error;

/// Errors of this crate.
#[derive(Debug, Error)]
pub enum SrsError {
    /// The file could not be opened, mapped or written.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file ends inside a section.
    #[error("{path}: truncated parameter file: section `{section}` needs {needed} bytes at offset {offset}, but the file has {file_len} bytes")]
    Truncated { path: PathBuf, section: &'static str, offset: usize, needed: usize, file_len: usize },
    /// A point that does not decode (off the curve, not in the subgroup, or at infinity).
    #[error("{path}: invalid point #{index} in section `{section}` (offset {offset}): {reason}")]
    InvalidPoint { path: PathBuf, section: &'static str, index: usize, offset: usize, reason: &'static str },
    /// Bytes after the last section.
    #[error(
        "{path}: {extra} unexpected bytes after the last section (offset {offset}); not a bellperson parameter file?"
    )]
    TrailingBytes { path: PathBuf, offset: usize, extra: usize },
    /// The parameters do not fit the circuit.
    #[error("parameters do not match the circuit: {0}")]
    ShapeMismatch(String),
    /// Parameter generation failed (for example an unconstrained variable).
    #[error("parameter generation failed: {0}")]
    Generate(String),
}
