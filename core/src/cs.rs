//! One implementation of bellperson's `ConstraintSystem` boilerplate for every
//! constraint system cuzk has, so that they cannot diverge in what they share.

/// Implements `bellperson::ConstraintSystem<blstrs::Scalar>` for `$ty`, a root-only
/// system (names are ignored, namespaces do nothing), from three inherent methods
/// that are where cuzk's systems differ:
///
/// - `fn new_root() -> Self`;
/// - `fn push_aux(&mut self, value: impl FnOnce() -> Result<Scalar, SynthesisError>)
///   -> Result<Variable, SynthesisError>` and `fn push_input(…)` (the same);
/// - `fn push_constraint(&mut self, a: impl FnOnce(Lc) -> Lc, b: …, c: …)`, taking
///   the linear-combination builders unevaluated, so a system that needs no
///   constraints (witness only) never builds them.
///
/// Further items of the impl (`is_extensible`, `extend`) follow in braces. The
/// expansion names bellperson and blstrs by absolute path: the calling crate depends
/// on both. Modelled on bellperson's `proving_assignment_impls!`.
#[macro_export]
macro_rules! root_constraint_system {
    ($ty:ty $(, { $($extra:tt)* })?) => {
        impl ::bellperson::ConstraintSystem<::blstrs::Scalar> for $ty {
            type Root = Self;

            fn new() -> Self {
                <$ty>::new_root()
            }

            #[inline]
            fn alloc<F, A, AR>(&mut self, _: A, f: F) -> Result<::bellperson::Variable, ::bellperson::SynthesisError>
            where
                F: FnOnce() -> Result<::blstrs::Scalar, ::bellperson::SynthesisError>,
                A: FnOnce() -> AR,
                AR: Into<String>,
            {
                self.push_aux(f)
            }

            #[inline]
            fn alloc_input<F, A, AR>(&mut self, _: A, f: F) -> Result<::bellperson::Variable, ::bellperson::SynthesisError>
            where
                F: FnOnce() -> Result<::blstrs::Scalar, ::bellperson::SynthesisError>,
                A: FnOnce() -> AR,
                AR: Into<String>,
            {
                self.push_input(f)
            }

            #[inline]
            fn enforce<A, AR, LA, LB, LC>(&mut self, _: A, a: LA, b: LB, c: LC)
            where
                A: FnOnce() -> AR,
                AR: Into<String>,
                LA: FnOnce(::bellperson::LinearCombination<::blstrs::Scalar>) -> ::bellperson::LinearCombination<::blstrs::Scalar>,
                LB: FnOnce(::bellperson::LinearCombination<::blstrs::Scalar>) -> ::bellperson::LinearCombination<::blstrs::Scalar>,
                LC: FnOnce(::bellperson::LinearCombination<::blstrs::Scalar>) -> ::bellperson::LinearCombination<::blstrs::Scalar>,
            {
                self.push_constraint(a, b, c)
            }

            fn push_namespace<NR, N>(&mut self, _: N)
            where
                NR: Into<String>,
                N: FnOnce() -> NR,
            {
            }

            fn pop_namespace(&mut self) {}

            fn get_root(&mut self) -> &mut Self::Root {
                self
            }

            $($($extra)*)?
        }
    };
}
