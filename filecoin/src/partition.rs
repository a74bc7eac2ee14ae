//! One partition of any Filecoin proof, ready to synthesize: its circuit with the
//! type erased ([`Partition`]), and the native witness generator where the circuit
//! has one. The circuits of every kind (`porep.rs`, `post.rs`, `update.rs`) are
//! built into it.

use bellperson::{Circuit, SynthesisError};
use blstrs::Scalar;
use cuzk_synth::{
    synthesize_deferred, synthesize_in, synthesize_native, witness_only, Assignment, Precompiled, SynthError,
    SynthMode, WitnessCs,
};

type SynthFn = Box<dyn FnOnce(SynthMode<'_>) -> Result<(Assignment, Option<Precompiled>), SynthError> + Send>;
type NativeFn = Box<dyn FnOnce(&mut WitnessCs) -> Result<(), SynthesisError> + Send>;

/// One partition of any Filecoin proof, ready to synthesize (its circuit type erased),
/// with its native witness generator where the circuit has one (PoRep).
pub struct Partition {
    generic: SynthFn,
    native: Option<NativeFn>,
}

impl Partition {
    pub(crate) fn new<C: Circuit<Scalar> + Send + 'static>(circuit: C) -> Self {
        Partition { generic: Box::new(move |mode| synthesize_in(circuit, mode)), native: None }
    }

    /// A partition whose pre-compiled synthesis computes the witness with `native`
    /// (see `crate::native`) instead of the circuit's `synthesize`.
    pub(crate) fn with_native<C, G>(circuit: C, native: G) -> Self
    where
        C: Circuit<Scalar> + Send + 'static,
        G: FnOnce(&mut WitnessCs) -> Result<(), SynthesisError> + Send + 'static,
    {
        Partition { native: Some(Box::new(native)), ..Partition::new(circuit) }
    }

    /// Whether [`SynthMode::Precompiled`] and [`SynthMode::PrecompiledInto`] generate
    /// this partition's witness natively.
    pub fn has_native(&self) -> bool {
        self.native.is_some()
    }

    /// Synthesizes the partition's circuit.
    ///
    /// # Errors
    /// The circuit's synthesis error.
    pub fn synthesize(self) -> Result<Assignment, SynthError> {
        (self.generic)(SynthMode::Plain).map(|(a, _)| a)
    }

    /// Synthesizes the partition's circuit in `mode`; the recording is returned for
    /// [`SynthMode::Record`] (`None` if the circuit was too large to record).
    ///
    /// # Errors
    /// The circuit's synthesis error, or a structure mismatch in
    /// [`SynthMode::Precompiled`].
    pub fn synthesize_with(self, mode: SynthMode<'_>) -> Result<(Assignment, Option<Precompiled>), SynthError> {
        match (mode, self.native) {
            (SynthMode::Precompiled(pre), Some(native)) => synthesize_native(native, pre, None).map(|a| (a, None)),
            (SynthMode::PrecompiledInto(pre, alloc), Some(native)) => {
                synthesize_native(native, pre, Some(alloc)).map(|a| (a, None))
            }
            (SynthMode::WitnessOnly { native: true }, Some(native)) => witness_only(native).map(|a| (a, None)),
            (SynthMode::Deferred { pre, native: true }, Some(native)) => {
                synthesize_deferred(native, pre).map(|a| (a, None))
            }
            (mode, _) => (self.generic)(mode),
        }
    }
}
