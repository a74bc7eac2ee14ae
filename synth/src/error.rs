use thiserror::Error;

/// Errors of this crate.
#[derive(Debug, Error)]
pub enum SynthError {
    /// The circuit's own `synthesize` returned an error.
    #[error("circuit synthesis failed: {0}")]
    Circuit(#[from] bellperson::SynthesisError),
    /// A synthetic-circuit specification that cannot be built.
    #[error("invalid synthetic circuit: {0}")]
    InvalidSpec(String),
    /// A circuit synthesized with a recording of another circuit's structure.
    #[error("circuit does not match its pre-compiled structure: {0}")]
    StructureMismatch(String),
}
