//! Decoding what schedulers send beside the vanilla proofs: the proofs themselves
//! (bincode, as filecoin-proofs-api serializes them) and commitments (raw 32 bytes,
//! or the CID Lotus and Curio name a sector's commitment by).

use serde::de::DeserializeOwned;

/// Decodes one bincode value with filecoin-proofs-api's encoding (fixed-width
/// integers, little endian); trailing bytes are refused, so a proof with bytes
/// appended or two proofs run together are named, not half read. bincode reserves
/// at most what the input can hold, so a forged length cannot allocate much.
pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    use bincode::Options;
    bincode::options()
        .with_fixint_encoding()
        .with_little_endian()
        .with_limit(bytes.len() as u64)
        .reject_trailing_bytes()
        .deserialize(bytes)
        .map_err(|e| e.to_string())
}

/// Whether `b` is 32 bytes that are a BLS12-381 scalar (little endian, below the
/// modulus): what every hash and commitment of a vanilla proof must be. filecoin's
/// domain types take any 32 bytes when decoded and panic when one that is not is
/// turned into a field element, so decoded proofs are checked with this first.
pub(crate) fn is_field_element(b: &[u8]) -> bool {
    use ff::PrimeField;
    <[u8; 32]>::try_from(b).is_ok_and(|repr| blstrs::Scalar::from_repr_vartime(repr).is_some())
}

/// Vanilla proofs as a JSON array of base64 strings: what Go's `json.Marshal` makes
/// of a `[][]byte` (Curio's stored SnapDeals vanilla proofs, cuzk-bench's files,
/// `cuzk gen-vanilla`'s output).
///
/// # Errors
/// A message saying what is not JSON or not base64.
pub fn vanilla_json(bytes: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    use base64::Engine as _;
    let list: Vec<String> =
        serde_json::from_slice(bytes).map_err(|e| format!("not a JSON array of base64 vanilla proofs: {e}"))?;
    list.iter()
        .enumerate()
        .map(|(i, p)| {
            base64::engine::general_purpose::STANDARD
                .decode(p)
                .map_err(|e| format!("vanilla proof {i} is not base64: {e}"))
        })
        .collect()
}

/// The vanilla proofs as [`vanilla_json`] reads them.
pub fn vanilla_to_json(proofs: &[Vec<u8>]) -> Vec<u8> {
    use base64::Engine as _;
    let list: Vec<String> = proofs.iter().map(|p| base64::engine::general_purpose::STANDARD.encode(p)).collect();
    serde_json::to_vec(&list).expect("strings serialize")
}

/// The multicodecs of Filecoin commitment CIDs: (codec, multihash) pairs.
const COMMITMENT_CIDS: [(u64, u64, &str); 2] = [
    (0xf101, 0x1012, "fil-commitment-unsealed / sha2-256-trunc254-padded"),
    (0xf102, 0xb401, "fil-commitment-sealed / poseidon-bls12_381-a2-fc1"),
];

fn varint(b: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*at)?;
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// A commitment as 32 bytes: given raw (32 bytes), or as the binary CID of a
/// Filecoin commitment (`CIDv1`, codec fil-commitment-sealed or -unsealed, a
/// 32-byte digest), which is what `cid.Bytes()` gives a Go client.
///
/// # Errors
/// A message naming `name` and what its bytes are not.
pub fn commitment(name: &str, b: &[u8]) -> Result<[u8; 32], String> {
    if let Ok(raw) = <[u8; 32]>::try_from(b) {
        return Ok(raw);
    }
    if b.is_empty() {
        return Err(format!("{name} is missing (32 bytes, or a Filecoin commitment CID)"));
    }
    let bad = |why: &str| {
        format!("{name} is {} bytes and not a Filecoin commitment CID ({why}); send the raw 32 bytes", b.len())
    };
    let mut at = 0;
    if varint(b, &mut at) != Some(1) {
        return Err(bad("not CIDv1"));
    }
    let codec = varint(b, &mut at).ok_or_else(|| bad("truncated"))?;
    let hash = varint(b, &mut at).ok_or_else(|| bad("truncated"))?;
    if !COMMITMENT_CIDS.iter().any(|&(c, h, _)| c == codec && h == hash) {
        return Err(bad(&format!("codec {codec:#x} / multihash {hash:#x}")));
    }
    let len = varint(b, &mut at).ok_or_else(|| bad("truncated"))?;
    match (len, <[u8; 32]>::try_from(&b[at..])) {
        (32, Ok(d)) => Ok(d),
        _ => Err(bad("its digest is not 32 bytes")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commitments_raw_or_cid() {
        let d = [7u8; 32];
        assert_eq!(commitment("comm_r_new", &d).unwrap(), d);
        // CIDv1, fil-commitment-sealed (0xf102 = varint 82 e2 03), poseidon (0xb401 = 81 e8 02), 32 bytes.
        let mut cid = vec![0x01, 0x82, 0xe2, 0x03, 0x81, 0xe8, 0x02, 0x20];
        cid.extend_from_slice(&d);
        assert_eq!(commitment("comm_r_new", &cid).unwrap(), d);
        let mut unsealed = vec![0x01, 0x81, 0xe2, 0x03, 0x92, 0x20, 0x20];
        unsealed.extend_from_slice(&d);
        assert_eq!(commitment("comm_d_new", &unsealed).unwrap(), d);
        let e = commitment("comm_r_old", &cid[..20]).unwrap_err();
        assert!(e.contains("comm_r_old is 20 bytes"), "{e}");
        let e = commitment("comm_r_old", &[]).unwrap_err();
        assert!(e.contains("missing"), "{e}");
        let mut other = cid.clone();
        other[1] = 0x70; // dag-pb
        assert!(commitment("x", &other).unwrap_err().contains("codec"));
    }
}
