//! Native witness generation: gadgets that compute a circuit's witness directly.
//!
//! Pre-compiled synthesis ([`crate::synthesize_precompiled`]) already skips the
//! constraints, but the circuit's gadgets still run: bellperson's SHA-256 builds a
//! `LinearCombination` per bit operation, per addition and per `MultiEq` step whether
//! or not anyone reads it, and that was most of the CPU time of a PoRep partition.
//! The functions here are those gadgets reduced to what the witness needs: the
//! values of the variables they allocate, pushed in the gadget's own order into a
//! [`WitnessCs`], and a count of the constraints they would have enforced (checked
//! against the recording). A circuit's native generator (cuzk-filecoin has the
//! PoRep one) calls them where the circuit calls the gadget and runs every other
//! gadget unchanged on the same [`WitnessCs`], which is a `ConstraintSystem`.
//!
//! Exactness is the contract: differential tests compare every aux value with
//! bellperson's gadgets, here for each gadget and in cuzk-filecoin for whole circuits.

mod sha256;

use bellperson::{
    gadgets::{boolean::Boolean, num::AllocatedNum},
    SynthesisError,
};
use blstrs::Scalar;
use ff::{Field, PrimeField};

pub use crate::precompiled::WitnessCs;

/// A bit as bellperson's `Boolean` holds it, without its variable: a constant, an
/// allocated bit (`Is`), or the negation of one (`Not`). The `bool` of `Is` and
/// `Not` is the allocated variable's value, as `AllocatedBit::get_value` gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bit {
    Const(bool),
    Is(bool),
    Not(bool),
}

impl Bit {
    /// The bit of a circuit's `Boolean`.
    ///
    /// # Errors
    /// `AssignmentMissing` when the `Boolean` is an allocated bit without a value
    /// (a blank circuit has no witness to generate).
    pub fn of(b: &Boolean) -> Result<Bit, SynthesisError> {
        Ok(match b {
            Boolean::Constant(c) => Bit::Const(*c),
            Boolean::Is(a) => Bit::Is(a.get_value().ok_or(SynthesisError::AssignmentMissing)?),
            Boolean::Not(a) => Bit::Not(a.get_value().ok_or(SynthesisError::AssignmentMissing)?),
        })
    }

    /// The value the bit stands for.
    #[inline]
    pub fn value(self) -> bool {
        match self {
            Bit::Const(v) | Bit::Is(v) => v,
            Bit::Not(v) => !v,
        }
    }

    #[inline]
    pub fn is_constant(self) -> bool {
        matches!(self, Bit::Const(_))
    }
}

/// `Boolean::not`: no allocation, the negation kept in the bit.
impl std::ops::Not for Bit {
    type Output = Bit;

    #[inline]
    fn not(self) -> Bit {
        match self {
            Bit::Const(v) => Bit::Const(!v),
            Bit::Is(v) => Bit::Not(v),
            Bit::Not(v) => Bit::Is(v),
        }
    }
}

#[inline]
fn scalar(b: bool) -> Scalar {
    if b {
        Scalar::ONE
    } else {
        Scalar::ZERO
    }
}

/// The `Boolean` and `AllocatedBit` operations, allocating what they allocate.
impl WitnessCs {
    /// One allocated value and the one constraint that defines it: what most
    /// field-element gadgets allocate (a square, a product, a sum).
    #[inline]
    pub fn alloc_value(&mut self, v: Scalar) -> Scalar {
        self.aux.push(v);
        self.constraints += 1;
        v
    }

    /// `AllocatedBit::alloc`: one variable, one constraint.
    #[inline]
    pub(crate) fn alloc_bit(&mut self, v: bool) -> Bit {
        self.aux.push(scalar(v));
        self.constraints += 1;
        Bit::Is(v)
    }

    /// `Boolean::xor`.
    #[inline]
    pub(crate) fn xor(&mut self, a: Bit, b: Bit) -> Bit {
        match (a, b) {
            (Bit::Const(false), x) | (x, Bit::Const(false)) => x,
            (Bit::Const(true), x) | (x, Bit::Const(true)) => !x,
            // Is ^ Not: the xor of the two variables, negated.
            (Bit::Is(x), Bit::Not(y)) | (Bit::Not(y), Bit::Is(x)) => !self.alloc_bit(x ^ y),
            (Bit::Is(x), Bit::Is(y)) | (Bit::Not(x), Bit::Not(y)) => self.alloc_bit(x ^ y),
        }
    }

    /// `Boolean::and`.
    #[inline]
    pub(crate) fn and(&mut self, a: Bit, b: Bit) -> Bit {
        match (a, b) {
            (Bit::Const(false), _) | (_, Bit::Const(false)) => Bit::Const(false),
            (Bit::Const(true), x) | (x, Bit::Const(true)) => x,
            // and_not, nor, and: each one variable and one constraint.
            (Bit::Is(is), Bit::Not(not)) | (Bit::Not(not), Bit::Is(is)) => self.alloc_bit(is & !not),
            (Bit::Not(x), Bit::Not(y)) => self.alloc_bit(!x & !y),
            (Bit::Is(x), Bit::Is(y)) => self.alloc_bit(x & y),
        }
    }

    /// `Boolean::sha256_ch`.
    pub(crate) fn sha256_ch(&mut self, a: Bit, b: Bit, c: Bit) -> Bit {
        let v = (a.value() & b.value()) ^ (!a.value() & c.value());
        match (a, b, c) {
            (Bit::Const(_), Bit::Const(_), Bit::Const(_)) => Bit::Const(v),
            (Bit::Const(false), _, c) => c,
            (a, Bit::Const(false), c) => self.and(!a, c),
            (a, b, Bit::Const(false)) => self.and(a, b),
            (a, b, Bit::Const(true)) => !self.and(a, !b),
            (a, Bit::Const(true), c) => !self.and(!a, !c),
            // A constant `true` a, or no constant: the general case.
            _ => self.alloc_bit(v),
        }
    }

    /// `Boolean::sha256_maj`.
    pub(crate) fn sha256_maj(&mut self, a: Bit, b: Bit, c: Bit) -> Bit {
        let v = (a.value() & b.value()) ^ (a.value() & c.value()) ^ (b.value() & c.value());
        match (a, b, c) {
            (Bit::Const(_), Bit::Const(_), Bit::Const(_)) => Bit::Const(v),
            (Bit::Const(false), b, c) => self.and(b, c),
            (a, Bit::Const(false), c) => self.and(a, c),
            (a, b, Bit::Const(false)) => self.and(a, b),
            (a, b, Bit::Const(true)) => !self.and(!a, !b),
            (a, Bit::Const(true), c) => !self.and(!a, !c),
            (Bit::Const(true), b, c) => !self.and(!b, !c),
            _ => {
                // The gadget allocates maj, then `b and c`, then enforces maj.
                let maj = self.alloc_bit(v);
                self.and(b, c);
                maj
            }
        }
    }
}

/// `AllocatedNum::to_bits_le`: the value's bits, least significant first, each an
/// allocated bit, and the unpacking constraint.
pub fn to_bits_le(cs: &mut WitnessCs, value: Scalar) -> Vec<Bit> {
    let repr = value.to_repr();
    let bits =
        (0..Scalar::NUM_BITS as usize).map(|i| cs.alloc_bit((repr.as_ref()[i / 8] >> (i % 8)) & 1 == 1)).collect();
    cs.constraints += 1;
    bits
}

/// `gadgets::sha256::sha256` on `input`: the digest's bits as the gadget returns them.
pub fn sha256(cs: &mut WitnessCs, input: &[Bit]) -> Vec<Bit> {
    sha256::sha256(cs, input)
}

/// `gadgets::multipack::pack_bits`: the first `Scalar::CAPACITY` bits, least
/// significant first, packed into one allocated number.
///
/// # Errors
/// Never in practice (the value always fits); the `ConstraintSystem`'s error type.
pub fn pack_bits(cs: &mut WitnessCs, bits: &[Bit]) -> Result<AllocatedNum<Scalar>, SynthesisError> {
    let mut repr = [0u8; 32];
    for (i, b) in bits.iter().take(Scalar::CAPACITY as usize).enumerate() {
        repr[i / 8] |= u8::from(b.value()) << (i % 8);
    }
    let value = Option::from(Scalar::from_repr(repr)).ok_or(SynthesisError::Unsatisfiable)?;
    let num = AllocatedNum::alloc(&mut *cs, || Ok(value))?;
    cs.constraints += 1;
    Ok(num)
}

#[cfg(test)]
mod tests {
    use bellperson::{
        gadgets::{boolean::AllocatedBit, multipack, sha256::sha256 as sha256_gadget},
        ConstraintSystem,
    };
    use rand::{Rng, SeedableRng};
    use sha2::Digest;

    use super::*;

    /// How an input bit is made: a constant, an allocated bit, or a negated one.
    #[derive(Clone, Copy)]
    enum Kind {
        Const,
        Is,
        Not,
    }

    fn inputs(cs: &mut WitnessCs, spec: &[(Kind, bool)]) -> Vec<Boolean> {
        spec.iter()
            .map(|&(kind, v)| match kind {
                Kind::Const => Boolean::Constant(v),
                Kind::Is => Boolean::from(AllocatedBit::alloc(&mut *cs, Some(v)).unwrap()),
                Kind::Not => Boolean::from(AllocatedBit::alloc(&mut *cs, Some(!v)).unwrap()).not(),
            })
            .collect()
    }

    fn both(spec: &[(Kind, bool)]) -> (WitnessCs, Vec<bool>, WitnessCs, Vec<bool>) {
        let mut gadget = <WitnessCs as ConstraintSystem<Scalar>>::new();
        let bits = inputs(&mut gadget, spec);
        let out = sha256_gadget(&mut gadget, &bits).unwrap();
        let packed = multipack::pack_bits(&mut gadget, &out).unwrap();
        let gadget_out: Vec<bool> = out.iter().map(|b| b.get_value().unwrap()).collect();

        let mut native = <WitnessCs as ConstraintSystem<Scalar>>::new();
        let bits = inputs(&mut native, spec);
        let bits: Vec<Bit> = bits.iter().map(|b| Bit::of(b).unwrap()).collect();
        let out = sha256(&mut native, &bits);
        let native_packed = pack_bits(&mut native, &out).unwrap();
        assert_eq!(packed.get_value(), native_packed.get_value());
        let native_out = out.iter().map(|b| b.value()).collect();
        (gadget, gadget_out, native, native_out)
    }

    #[test]
    fn sha256_allocates_what_the_gadget_allocates() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        // Whole blocks, a padded tail, the label preimage's 39 x 256 bits, and
        // inputs of every mix of constant, allocated and negated bits.
        for (len, mix) in [(0, 0), (8, 1), (256, 1), (440, 2), (512, 1), (512, 0), (1000, 2), (39 * 256, 3), (1024, 2)]
        {
            let spec: Vec<(Kind, bool)> = (0..len)
                .map(|i| {
                    let kind = match mix {
                        0 => Kind::Const,
                        1 => Kind::Is,
                        2 => [Kind::Const, Kind::Is, Kind::Not][rng.gen_range(0..3)],
                        // Mostly allocated with constant runs, as a label's padding.
                        _ if (i / 200) % 3 == 2 => Kind::Const,
                        _ => Kind::Is,
                    };
                    (kind, rng.gen::<bool>())
                })
                .collect();
            let (gadget, gadget_out, native, native_out) = both(&spec);
            assert_eq!(native_out, gadget_out, "len {len} mix {mix}: digest");
            assert_eq!(native.aux.len(), gadget.aux.len(), "len {len} mix {mix}: aux count");
            assert!(native.aux == gadget.aux, "len {len} mix {mix}: aux values");
            assert_eq!(native.constraints, gadget.constraints, "len {len} mix {mix}: constraints");
            assert_eq!(native.input, gadget.input);
            // And it is SHA-256.
            if len % 8 == 0 {
                let bytes: Vec<u8> =
                    spec.chunks(8).map(|c| c.iter().fold(0u8, |acc, &(_, v)| (acc << 1) | u8::from(v))).collect();
                let want: Vec<bool> = sha2::Sha256::digest(&bytes)
                    .iter()
                    .flat_map(|&byte| (0..8).rev().map(move |i| (byte >> i) & 1 == 1))
                    .collect();
                assert_eq!(native_out, want, "len {len} mix {mix}: sha256");
            }
        }
    }

    #[test]
    fn to_bits_le_allocates_what_the_gadget_allocates() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        for v in [Scalar::ZERO, Scalar::ONE, -Scalar::ONE, Scalar::random(&mut rng), Scalar::random(&mut rng)] {
            let mut gadget = <WitnessCs as ConstraintSystem<Scalar>>::new();
            let num = AllocatedNum::alloc(&mut gadget, || Ok(v)).unwrap();
            let want: Vec<bool> = num.to_bits_le(&mut gadget).unwrap().iter().map(|b| b.get_value().unwrap()).collect();
            let mut native = <WitnessCs as ConstraintSystem<Scalar>>::new();
            AllocatedNum::alloc(&mut native, || Ok(v)).unwrap();
            let got: Vec<bool> = to_bits_le(&mut native, v).iter().map(|b| b.value()).collect();
            assert_eq!(got, want);
            assert!(native.aux == gadget.aux && native.constraints == gadget.constraints);
        }
    }
}
