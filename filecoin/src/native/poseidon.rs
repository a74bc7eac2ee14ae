//! neptune's Poseidon circuit (`neptune::circuit::poseidon_hash`, the "legacy"
//! circuit storage-proofs uses), witness only.
//!
//! The state is kept as values, each marked as the circuit marks it: an allocated
//! variable, or a linear combination (`Num`) that is only allocated when an S-box
//! needs it as a variable. The rounds allocate what the circuit allocates, in its
//! order: the S-box input when it is a combination, then l², l⁴ and l⁵ (the first
//! round adds its pre-round key inside the square). The MDS products allocate
//! nothing. The result is allocated as the circuit allocates it.

use bellperson::{gadgets::num::AllocatedNum, SynthesisError};
use blstrs::Scalar;
use cuzk_synth::WitnessCs;
use ff::Field;
use neptune::{poseidon::PoseidonConstants, Arity};

#[derive(Clone, Copy)]
enum Elt {
    Allocated(Scalar),
    Num(Scalar),
}

impl Elt {
    fn value(self) -> Scalar {
        match self {
            Elt::Allocated(v) | Elt::Num(v) => v,
        }
    }
}

/// `Elt::ensure_allocated` with `enforce`: a combination is allocated (one
/// variable, one constraint), an allocated value is used as it is.
#[inline]
fn ensure_allocated(cs: &mut WitnessCs, e: Elt) -> Scalar {
    match e {
        Elt::Allocated(v) => v,
        Elt::Num(v) => cs.alloc_value(v),
    }
}

struct Poseidon<'a, A: Arity<Scalar>> {
    c: &'a PoseidonConstants<Scalar, A>,
    elements: Vec<Elt>,
    offset: usize,
    round: usize,
}

impl<A: Arity<Scalar>> Poseidon<'_, A> {
    fn full_round(&mut self, cs: &mut WitnessCs, first: bool, last: bool) {
        let width = self.elements.len();
        let keys = &self.c.compressed_round_constants;
        let pre = if first { Some(&keys[self.offset..self.offset + width]) } else { None };
        let mut next = self.offset + if first { width } else { 0 };
        let post = if first || !last { Some(&keys[next..next + width]) } else { None };
        next += post.map_or(0, |p| p.len());
        for i in 0..width {
            let post_key = post.map(|p| p[i]);
            self.elements[i] = match (pre, i) {
                (Some(pre), 0) => {
                    // The domain tag: a constant, its S-box computed in the clear.
                    let mut v = self.elements[0].value() + pre[0];
                    v = v.square().square() * v;
                    Elt::Num(v + post_key.unwrap_or(Scalar::ZERO))
                }
                (Some(pre), _) => {
                    let l = ensure_allocated(cs, self.elements[i]);
                    let l2 = cs.alloc_value((l + pre[i]).square());
                    let l4 = cs.alloc_value(l2.square());
                    Elt::Allocated(cs.alloc_value(l4 * (l + pre[i]) + post_key.unwrap_or(Scalar::ZERO)))
                }
                (None, _) => Elt::Allocated(self.s_box(cs, self.elements[i], post_key)),
            };
        }
        self.offset = next;
        self.product_mds();
    }

    /// `quintic_s_box`.
    fn s_box(&self, cs: &mut WitnessCs, e: Elt, post_key: Option<Scalar>) -> Scalar {
        let l = ensure_allocated(cs, e);
        let l2 = cs.alloc_value(l.square());
        let l4 = cs.alloc_value(l2.square());
        cs.alloc_value(l4 * l + post_key.unwrap_or(Scalar::ZERO))
    }

    fn partial_round(&mut self, cs: &mut WitnessCs) {
        let key = self.c.compressed_round_constants[self.offset];
        self.offset += 1;
        self.elements[0] = Elt::Allocated(self.s_box(cs, self.elements[0], Some(key)));
        self.product_mds();
    }

    fn product_mds(&mut self) {
        let half = self.c.half_full_rounds;
        let sparse_offset = half - 1;
        if self.round == sparse_offset {
            let c = self.c;
            self.dense(&c.pre_sparse_matrix);
        } else if self.round > sparse_offset && self.round < half + self.c.partial_rounds {
            let m = &self.c.sparse_matrixes[self.round - sparse_offset - 1];
            let e0 = self.elements[0].value();
            let first = self.elements.iter().zip(&m.w_hat).fold(Scalar::ZERO, |acc, (e, w)| acc + e.value() * w);
            for (j, v) in m.v_rest.iter().enumerate() {
                self.elements[j + 1] = Elt::Num(self.elements[j + 1].value() + e0 * v);
            }
            self.elements[0] = Elt::Num(first);
        } else {
            let c = self.c;
            self.dense(&c.mds_matrices.m);
        }
        self.round += 1;
    }

    fn dense(&mut self, m: &[Vec<Scalar>]) {
        let values: Vec<Scalar> = self.elements.iter().map(|e| e.value()).collect();
        for (j, e) in self.elements.iter_mut().enumerate() {
            *e = Elt::Num(values.iter().enumerate().fold(Scalar::ZERO, |acc, (i, v)| acc + *v * m[i][j]));
        }
    }
}

/// `neptune::circuit::poseidon_hash` of `preimage` (the values of allocated
/// numbers): the hash as the allocated number the circuit returns.
///
/// # Errors
/// The `ConstraintSystem`'s error type (never in practice).
pub fn poseidon_hash<A: Arity<Scalar>>(
    cs: &mut WitnessCs,
    preimage: &[Scalar],
    c: &PoseidonConstants<Scalar, A>,
) -> Result<AllocatedNum<Scalar>, SynthesisError> {
    assert_eq!(preimage.len(), A::to_usize(), "a preimage of the constants' arity");
    let mut elements = Vec::with_capacity(preimage.len() + 1);
    elements.push(Elt::Num(c.domain_tag));
    elements.extend(preimage.iter().map(|v| Elt::Allocated(*v)));
    let mut p = Poseidon { c, elements, offset: 0, round: 0 };
    p.full_round(cs, true, false);
    for _ in 1..c.full_rounds / 2 {
        p.full_round(cs, false, false);
    }
    for _ in 0..c.partial_rounds {
        p.partial_round(cs);
    }
    for _ in 0..c.full_rounds / 2 - 1 {
        p.full_round(cs, false, false);
    }
    p.full_round(cs, false, true);
    match p.elements[1] {
        Elt::Num(v) => {
            let out = AllocatedNum::alloc(&mut *cs, || Ok(v))?;
            cs.count_constraint();
            Ok(out)
        }
        // The last round's MDS product leaves only combinations.
        Elt::Allocated(_) => unreachable!("the state after an MDS product is never allocated"),
    }
}

#[cfg(test)]
mod tests {
    use bellperson::ConstraintSystem;
    use rand::SeedableRng;

    use super::*;

    fn case<A: Arity<Scalar>>(seed: u64) {
        let c = PoseidonConstants::<Scalar, A>::new();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let values: Vec<Scalar> = (0..A::to_usize()).map(|_| Scalar::random(&mut rng)).collect();
        let mut gadget = <WitnessCs as ConstraintSystem<Scalar>>::new();
        let nums: Vec<_> = values.iter().map(|v| AllocatedNum::alloc(&mut gadget, || Ok(*v)).unwrap()).collect();
        let want = neptune::circuit::poseidon_hash(&mut gadget, nums, &c).unwrap();
        let mut native = <WitnessCs as ConstraintSystem<Scalar>>::new();
        for v in &values {
            AllocatedNum::alloc(&mut native, || Ok(*v)).unwrap();
        }
        let got = poseidon_hash(&mut native, &values, &c).unwrap();
        let arity = A::to_usize();
        assert_eq!(got.get_value(), want.get_value(), "arity {arity}");
        assert_eq!(got.get_variable(), want.get_variable(), "arity {arity}");
        assert_eq!(native.witness(), gadget.witness(), "arity {arity}: inputs, aux values, constraint count");
        // And it is Poseidon.
        assert_eq!(got.get_value(), Some(neptune::Poseidon::new_with_preimage(&values, &c).hash()));
    }

    /// Every arity Filecoin's circuits hash with: Merkle trees (2, 4, 8), PoRep
    /// columns (2, 11).
    #[test]
    fn poseidon_allocates_what_the_circuit_allocates() {
        for seed in 0..3 {
            case::<typenum::U2>(seed);
            case::<typenum::U4>(seed);
            case::<typenum::U8>(seed);
            case::<typenum::U11>(seed);
        }
    }
}
