//! The only `unsafe` of this crate: viewing blstrs types as the blst types they wrap.

use blst::{blst_p1, blst_p1_affine, blst_p2, blst_p2_affine};
use blstrs::{G1Affine, G1Projective, G2Affine, G2Projective};

pub(crate) fn g1_affines(p: &[G1Affine]) -> &[blst_p1_affine] {
    // SAFETY: blstrs::G1Affine is #[repr(transparent)] over blst_p1_affine.
    unsafe { std::slice::from_raw_parts(p.as_ptr().cast(), p.len()) }
}

pub(crate) fn g2_affines(p: &[G2Affine]) -> &[blst_p2_affine] {
    // SAFETY: blstrs::G2Affine is #[repr(transparent)] over blst_p2_affine.
    unsafe { std::slice::from_raw_parts(p.as_ptr().cast(), p.len()) }
}

pub(crate) fn g1_projective(p: blst_p1) -> G1Projective {
    // SAFETY: blstrs::G1Projective is #[repr(transparent)] over blst_p1.
    unsafe { std::mem::transmute::<blst_p1, G1Projective>(p) }
}

pub(crate) fn g2_projective(p: blst_p2) -> G2Projective {
    // SAFETY: blstrs::G2Projective is #[repr(transparent)] over blst_p2.
    unsafe { std::mem::transmute::<blst_p2, G2Projective>(p) }
}
