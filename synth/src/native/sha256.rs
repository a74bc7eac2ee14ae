//! bellperson's SHA-256 gadget (`gadgets::sha256::sha256`), witness only.
//!
//! Every function here is the gadget of the same name with the constraints and the
//! `LinearCombination`s taken out: it allocates the same auxiliary variables, in the
//! same order, with the same values, and counts the constraints the gadget would
//! have enforced. The constant-folding cases (a bit that is a constant allocates
//! nothing) are kept exactly, because they decide what is allocated: the first
//! rounds of a compression run on the constant IV, the padding is constant, and a
//! constant operand changes which `AllocatedBit` operation `and`/`ch`/`maj` use.

use super::{Bit, WitnessCs};

/// One 32-bit word: bits least significant first, as bellperson's `UInt32` keeps them.
#[derive(Clone, Copy)]
pub(crate) struct Word {
    bits: [Bit; 32],
    value: u32,
}

const ROUND_CONSTANTS: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
    0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
    0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
    0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2,
];

const IV: [u32; 8] = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];

/// `Scalar::CAPACITY` of BLS12-381's Fr: what one MultiEq constraint packs.
const CAPACITY: usize = 254;

impl Word {
    fn constant(value: u32) -> Self {
        let mut bits = [Bit::Const(false); 32];
        for (i, b) in bits.iter_mut().enumerate() {
            *b = Bit::Const((value >> i) & 1 == 1);
        }
        Word { bits, value }
    }

    /// `UInt32::from_bits_be`.
    fn from_bits_be(be: &[Bit]) -> Self {
        debug_assert_eq!(be.len(), 32);
        let mut bits = [Bit::Const(false); 32];
        let mut value = 0u32;
        for (i, b) in be.iter().enumerate() {
            bits[31 - i] = *b;
            value = (value << 1) | u32::from(b.value());
        }
        Word { bits, value }
    }

    fn rotr(&self, by: usize) -> Self {
        let mut bits = [Bit::Const(false); 32];
        for (i, b) in bits.iter_mut().enumerate() {
            *b = self.bits[(i + by) % 32];
        }
        Word { bits, value: self.value.rotate_right(by as u32) }
    }

    fn shr(&self, by: usize) -> Self {
        let mut bits = [Bit::Const(false); 32];
        bits[..32 - by].copy_from_slice(&self.bits[by..]);
        Word { bits, value: self.value >> by }
    }

    fn xor(&self, cs: &mut WitnessCs, other: &Word) -> Word {
        let mut bits = [Bit::Const(false); 32];
        for (i, b) in bits.iter_mut().enumerate() {
            *b = cs.xor(self.bits[i], other.bits[i]);
        }
        Word { bits, value: self.value ^ other.value }
    }

    fn ch(cs: &mut WitnessCs, a: &Word, b: &Word, c: &Word) -> Word {
        let mut bits = [Bit::Const(false); 32];
        for (i, o) in bits.iter_mut().enumerate() {
            *o = cs.sha256_ch(a.bits[i], b.bits[i], c.bits[i]);
        }
        Word { bits, value: (a.value & b.value) ^ ((!a.value) & c.value) }
    }

    fn maj(cs: &mut WitnessCs, a: &Word, b: &Word, c: &Word) -> Word {
        let mut bits = [Bit::Const(false); 32];
        for (i, o) in bits.iter_mut().enumerate() {
            *o = cs.sha256_maj(a.bits[i], b.bits[i], c.bits[i]);
        }
        Word { bits, value: (a.value & b.value) ^ (a.value & c.value) ^ (b.value & c.value) }
    }

    /// `UInt32::addmany` under a `MultiEq`.
    fn addmany(cs: &mut WitnessCs, eq: &mut MultiEq, ops: &[Word]) -> Word {
        debug_assert!((2..=10).contains(&ops.len()));
        let sum: u64 = ops.iter().map(|w| u64::from(w.value)).sum();
        if ops.iter().all(|w| w.bits.iter().all(|b| b.is_constant())) {
            return Word::constant(sum as u32);
        }
        // As many result bits as the largest possible sum has.
        let max = ops.len() as u64 * u64::from(u32::MAX);
        let n = (64 - max.leading_zeros()) as usize;
        let mut bits = [Bit::Const(false); 32];
        for (i, slot) in bits.iter_mut().enumerate() {
            *slot = cs.alloc_bit((sum >> i) & 1 == 1);
        }
        // The carry bits past the word are allocated too, then dropped.
        for i in 32..n {
            cs.alloc_bit((sum >> i) & 1 == 1);
        }
        eq.enforce_equal(cs, n);
        Word { bits, value: sum as u32 }
    }
}

/// bellperson's `MultiEq`: equalities packed into as few constraints as fit.
struct MultiEq {
    bits_used: usize,
}

impl MultiEq {
    fn enforce_equal(&mut self, cs: &mut WitnessCs, num_bits: usize) {
        if CAPACITY <= self.bits_used + num_bits {
            cs.constraints += 1;
            self.bits_used = 0;
        }
        self.bits_used += num_bits;
    }

    /// What dropping the gadget's `MultiEq` enforces.
    fn finish(self, cs: &mut WitnessCs) {
        if self.bits_used > 0 {
            cs.constraints += 1;
        }
    }
}

enum Maybe {
    Deferred(Vec<Word>),
    Concrete(Word),
}

impl Maybe {
    fn compute(self, cs: &mut WitnessCs, eq: &mut MultiEq, others: &[Word]) -> Word {
        match self {
            Maybe::Concrete(v) => v,
            Maybe::Deferred(mut v) => {
                v.extend_from_slice(others);
                Word::addmany(cs, eq, &v)
            }
        }
    }
}

fn compression(cs: &mut WitnessCs, input: &[Bit], current: &[Word; 8]) -> [Word; 8] {
    debug_assert_eq!(input.len(), 512);
    let mut w: Vec<Word> = input.chunks(32).map(Word::from_bits_be).collect();
    let mut eq = MultiEq { bits_used: 0 };
    for i in 16..64 {
        let mut s0 = w[i - 15].rotr(7);
        s0 = s0.xor(cs, &w[i - 15].rotr(18));
        s0 = s0.xor(cs, &w[i - 15].shr(3));
        let mut s1 = w[i - 2].rotr(17);
        s1 = s1.xor(cs, &w[i - 2].rotr(19));
        s1 = s1.xor(cs, &w[i - 2].shr(10));
        let tmp = Word::addmany(cs, &mut eq, &[w[i - 16], s0, w[i - 7], s1]);
        w.push(tmp);
    }

    let mut a = Maybe::Concrete(current[0]);
    let mut b = current[1];
    let mut c = current[2];
    let mut d = current[3];
    let mut e = Maybe::Concrete(current[4]);
    let mut f = current[5];
    let mut g = current[6];
    let mut h = current[7];
    for (i, wi) in w.iter().enumerate() {
        let new_e = e.compute(cs, &mut eq, &[]);
        let mut s1 = new_e.rotr(6);
        s1 = s1.xor(cs, &new_e.rotr(11));
        s1 = s1.xor(cs, &new_e.rotr(25));
        let ch = Word::ch(cs, &new_e, &f, &g);
        let temp1 = [h, s1, ch, Word::constant(ROUND_CONSTANTS[i]), *wi];

        let new_a = a.compute(cs, &mut eq, &[]);
        let mut s0 = new_a.rotr(2);
        s0 = s0.xor(cs, &new_a.rotr(13));
        s0 = s0.xor(cs, &new_a.rotr(22));
        let maj = Word::maj(cs, &new_a, &b, &c);

        h = g;
        g = f;
        f = new_e;
        let mut te = Vec::with_capacity(6);
        te.extend_from_slice(&temp1);
        te.push(d);
        e = Maybe::Deferred(te);
        d = c;
        c = b;
        b = new_a;
        let mut ta = Vec::with_capacity(7);
        ta.extend_from_slice(&temp1);
        ta.push(s0);
        ta.push(maj);
        a = Maybe::Deferred(ta);
    }

    let h0 = a.compute(cs, &mut eq, &[current[0]]);
    let h1 = Word::addmany(cs, &mut eq, &[current[1], b]);
    let h2 = Word::addmany(cs, &mut eq, &[current[2], c]);
    let h3 = Word::addmany(cs, &mut eq, &[current[3], d]);
    let h4 = e.compute(cs, &mut eq, &[current[4]]);
    let h5 = Word::addmany(cs, &mut eq, &[current[5], f]);
    let h6 = Word::addmany(cs, &mut eq, &[current[6], g]);
    let h7 = Word::addmany(cs, &mut eq, &[current[7], h]);
    eq.finish(cs);
    [h0, h1, h2, h3, h4, h5, h6, h7]
}

/// `gadgets::sha256::sha256`: the padded message's compressions; the digest's 256
/// bits, big-endian per word as the gadget returns them.
pub(crate) fn sha256(cs: &mut WitnessCs, input: &[Bit]) -> Vec<Bit> {
    assert!(input.len().is_multiple_of(8), "sha256 takes whole bytes");
    let mut padded = Vec::with_capacity(input.len() + 576);
    padded.extend_from_slice(input);
    let plen = input.len() as u64;
    padded.push(Bit::Const(true));
    while !(padded.len() + 64).is_multiple_of(512) {
        padded.push(Bit::Const(false));
    }
    for i in (0..64).rev() {
        padded.push(Bit::Const((plen >> i) & 1 == 1));
    }
    let mut cur = IV.map(Word::constant);
    for block in padded.chunks(512) {
        cur = compression(cs, block, &cur);
    }
    let mut out = Vec::with_capacity(256);
    for word in &cur {
        out.extend(word.bits.iter().rev());
    }
    out
}
