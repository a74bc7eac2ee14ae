//! A [`Precompiled`] recording on disk, so that a new process proves its first
//! partitions pre-compiled instead of synthesizing them the plain way while one of
//! them records (about 3 s of the first 2KiB PoRep proofs on a 16-core host).
//!
//! The file belongs to one parameter set: its header carries an identity the caller
//! derives from the proving key (32 bytes), and a file with another identity is
//! refused. The payload is checked with SHA-256 and every index in it is checked
//! against the recorded sizes, so a damaged file is refused by name, never used.
//!
//! Layout (little-endian): magic `CUZKR1CS`, format version (u32), key identity
//! (32 bytes), inputs and aux counts (u64), the A, B, C matrices (row ends, then
//! entries as variable/coefficient u32 pairs, each list prefixed by its length as
//! u64), the coefficient table (canonical 32-byte scalars), the three densities
//! (bit length, then words), and the SHA-256 of everything before it.

use std::io::{self, Read, Write};

use blstrs::Scalar;
use ff::PrimeField;
use sha2::{Digest, Sha256};

use crate::{
    precompiled::{Entry, Matrix},
    Density, Precompiled,
};

const MAGIC: &[u8; 8] = b"CUZKR1CS";
const VERSION: u32 = 1;

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Writes through to `w` and hashes what it writes.
struct Hashing<W> {
    w: W,
    h: Sha256,
}

impl<W: Write> Hashing<W> {
    fn put(&mut self, b: &[u8]) -> io::Result<()> {
        self.h.update(b);
        self.w.write_all(b)
    }
    fn u64(&mut self, v: u64) -> io::Result<()> {
        self.put(&v.to_le_bytes())
    }
    /// `n` values, streamed: no copy of a whole matrix (GBs for large circuits).
    fn u32s(&mut self, n: usize, v: impl Iterator<Item = u32>) -> io::Result<()> {
        self.u64(n as u64)?;
        let mut buf = Vec::with_capacity(1 << 16);
        let mut written = 0usize;
        for x in v {
            written += 1;
            buf.extend_from_slice(&x.to_le_bytes());
            if buf.len() >= 1 << 16 {
                self.put(&buf)?;
                buf.clear();
            }
        }
        // The count is written first: a caller's `n` must match what it streams.
        debug_assert_eq!(written, n, "u32s: announced {n} values, streamed {written}");
        self.put(&buf)
    }
}

impl Precompiled {
    /// Writes the recording for the parameter set identified by `key_id`.
    ///
    /// # Errors
    /// Those of `w`.
    pub fn write_to(&self, w: impl Write, key_id: &[u8; 32]) -> io::Result<()> {
        let mut o = Hashing { w: io::BufWriter::with_capacity(1 << 20, w), h: Sha256::new() };
        o.put(MAGIC)?;
        o.put(&VERSION.to_le_bytes())?;
        o.put(key_id)?;
        o.u64(self.inputs as u64)?;
        o.u64(self.aux as u64)?;
        for m in [&self.a, &self.b, &self.c] {
            o.u32s(m.row_end.len(), m.row_end.iter().copied())?;
            o.u32s(2 * m.entries.len(), m.entries.iter().flat_map(|e| [e.var, e.coeff]))?;
        }
        o.u64(self.coeffs.len() as u64)?;
        for c in &self.coeffs {
            o.put(&c.to_repr())?;
        }
        for d in [&self.a_aux_density, &self.b_input_density, &self.b_aux_density] {
            o.u64(d.len() as u64)?;
            o.u32s(2 * d.words().len(), d.words().iter().flat_map(|w| [*w as u32, (*w >> 32) as u32]))?;
        }
        let digest = o.h.finalize();
        o.w.write_all(&digest)?;
        o.w.flush()
    }

    /// Reads a recording written by [`Precompiled::write_to`] for `key_id`.
    ///
    /// Streamed: each chunk goes straight into the recording's own vectors while a
    /// second thread hashes the chunk before it, so a 7 GB recording is read once,
    /// never held twice, and its checksum costs no time of its own. Sizes read
    /// before the checksum is known only reserve address space; a damaged file is
    /// refused when its data runs out or its checksum differs.
    ///
    /// # Errors
    /// `InvalidData`, naming the problem, when the file is not a recording, is of
    /// another format version or parameter set, fails its checksum, or holds an
    /// index out of its own sizes; the reader's errors otherwise.
    pub fn read_from(r: impl Read, key_id: &[u8; 32]) -> io::Result<Precompiled> {
        read_chunked(r, key_id, CHUNK)
    }

    /// Every index within the recorded sizes, so that a recording that passed its
    /// checksum but was written wrong fails here rather than in a product.
    fn check(&self) -> io::Result<()> {
        let rows = self.a.row_end.len();
        if self.b.row_end.len() != rows || self.c.row_end.len() != rows {
            return Err(bad("matrices of different row counts"));
        }
        if self.coeffs.len() < 3 {
            return Err(bad("coefficient table without its fixed slots"));
        }
        for m in [&self.a, &self.b, &self.c] {
            if m.row_end.windows(2).any(|w| w[0] > w[1])
                || m.row_end.last().map_or(0, |e| *e as usize) != m.entries.len()
            {
                return Err(bad("row ends out of order or not matching the entries"));
            }
            for e in &m.entries {
                let (i, input) = ((e.var >> 1) as usize, e.var & 1 == 0);
                if (input && i >= self.inputs) || (!input && i >= self.aux) || e.coeff as usize >= self.coeffs.len() {
                    return Err(bad("entry out of the recorded sizes"));
                }
            }
        }
        if self.a_aux_density.len() != self.aux
            || self.b_aux_density.len() != self.aux
            || self.b_input_density.len() != self.inputs
        {
            return Err(bad("densities not matching the variable counts"));
        }
        Ok(())
    }
}

/// Bytes read at a time: a multiple of 4, as every field of the format is, so no
/// field straddles two chunks.
const CHUNK: usize = 8 << 20;

/// [`Precompiled::read_from`] with chunks of `chunk` bytes (tests use small ones).
fn read_chunked(r: impl Read, key_id: &[u8; 32], chunk: usize) -> io::Result<Precompiled> {
    assert!(chunk >= 64 && chunk.is_multiple_of(4), "chunk {chunk}");
    let (to_hash, hash_rx) = std::sync::mpsc::sync_channel::<(Vec<u8>, usize)>(2);
    let (free_tx, free) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::scope(|scope| {
        let hasher = scope.spawn(move || {
            let mut h = Sha256::new();
            for (buf, n) in hash_rx {
                h.update(&buf[..n]);
                let _ = free_tx.send(buf);
            }
            h.finalize()
        });
        let mut st = Stream { r, buf: Vec::new(), len: 0, at: 0, to_hash: Some(to_hash), free, chunk };
        let parsed = parse(&mut st, key_id);
        // The body ends where the parse did: what is left is the digest.
        let tail = parsed.as_ref().ok().map(|_| st.finish());
        drop(st);
        let digest = hasher.join().map_err(|_| bad("checksum thread panicked"))?;
        let (pre, tail) = (parsed?, tail.expect("set when parsed")?);
        if tail.len() > 32 {
            return Err(bad("trailing bytes"));
        }
        if tail.len() < 32 || digest.as_slice() != tail.as_slice() {
            return Err(bad("checksum mismatch (damaged file)"));
        }
        pre.check()?;
        Ok(pre)
    })
}

fn parse<R: Read>(p: &mut Stream<R>, key_id: &[u8; 32]) -> io::Result<Precompiled> {
    let mut magic = [0u8; 8];
    if p.bytes(&mut magic).is_err() || &magic != MAGIC {
        return Err(bad("not a cuzk circuit recording"));
    }
    let version = p.u32()?;
    if version != VERSION {
        return Err(bad(format!("format version {version}, this build reads {VERSION}")));
    }
    let mut id = [0u8; 32];
    p.bytes(&mut id)?;
    if &id != key_id {
        return Err(bad("recorded for another parameter set"));
    }
    let inputs = p.len()?;
    let aux = p.len()?;
    let mut m = [Matrix::default(), Matrix::default(), Matrix::default()];
    for x in &mut m {
        let n = p.len()?;
        x.row_end = reserved(n)?;
        p.u32s(n, |v| x.row_end.extend(v.chunks_exact(4).map(le32)))?;
        let n = p.len()?;
        if n % 2 != 0 {
            return Err(bad("odd entry list"));
        }
        x.entries = reserved(n / 2)?;
        p.u32s(n, |v| x.entries.extend(v.chunks_exact(8).map(|e| Entry { var: le32(&e[..4]), coeff: le32(&e[4..]) })))?;
    }
    let n = p.len()?;
    let mut coeffs = reserved(n)?;
    for _ in 0..n {
        let mut repr = [0u8; 32];
        p.bytes(&mut repr)?;
        coeffs.push(Option::from(Scalar::from_repr(repr)).ok_or_else(|| bad("coefficient out of the field"))?);
    }
    let mut dens = Vec::new();
    for _ in 0..3 {
        let len = p.len()?;
        let n = p.len()?;
        if n % 2 != 0 {
            return Err(bad("density of the wrong length"));
        }
        let mut words: Vec<u64> = reserved(n / 2)?;
        p.u32s(n, |v| {
            words.extend(v.chunks_exact(8).map(|w| u64::from(le32(&w[..4])) | u64::from(le32(&w[4..])) << 32))
        })?;
        dens.push(Density::from_words(words, len).ok_or_else(|| bad("density of the wrong length"))?);
    }
    let [b_aux_density, b_input_density, a_aux_density] = [dens.pop(), dens.pop(), dens.pop()];
    let [a, b, c] = m;
    Ok(Precompiled {
        inputs,
        aux,
        a,
        b,
        c,
        coeffs,
        a_aux_density: a_aux_density.expect("three read"),
        b_input_density: b_input_density.expect("three read"),
        b_aux_density: b_aux_density.expect("three read"),
    })
}

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes(b.try_into().expect("4 bytes"))
}

/// An empty vector with room for `n`: address space only until written, so a
/// damaged size costs nothing before the data runs out; one past what can be
/// reserved is refused.
fn reserved<T>(n: usize) -> io::Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| bad("size out of range"))?;
    Ok(v)
}

/// The file in chunks: parsed here, hashed on the other thread once parsed.
struct Stream<R> {
    r: R,
    buf: Vec<u8>,
    /// Bytes of `buf` filled, and parsed.
    len: usize,
    at: usize,
    /// Chunks to the hashing thread (`None` once the body has ended).
    to_hash: Option<std::sync::mpsc::SyncSender<(Vec<u8>, usize)>>,
    /// Chunks the hashing thread is done with.
    free: std::sync::mpsc::Receiver<Vec<u8>>,
    chunk: usize,
}

impl<R: Read> Stream<R> {
    /// The next chunk, once this one is parsed (and handed to the hashing thread).
    /// Filled completely but at the end of the file, so fields never straddle.
    fn refill(&mut self) -> io::Result<()> {
        debug_assert_eq!(self.at, self.len);
        let next = self.free.try_recv().unwrap_or_else(|_| vec![0; self.chunk]);
        let done = std::mem::replace(&mut self.buf, next);
        if self.len > 0 {
            if let Some(tx) = &self.to_hash {
                tx.send((done, self.len)).map_err(|_| bad("checksum thread stopped"))?;
            }
        }
        self.len = 0;
        self.at = 0;
        while self.len < self.buf.len() {
            match self.r.read(&mut self.buf[self.len..]) {
                Ok(0) => break,
                Ok(n) => self.len += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// At least 4 bytes ready (every field is a multiple of 4 long, and chunks are).
    fn ready(&mut self) -> io::Result<()> {
        if self.at == self.len {
            self.refill()?;
        }
        if self.len - self.at < 4 {
            return Err(bad("truncated"));
        }
        Ok(())
    }

    fn bytes(&mut self, out: &mut [u8]) -> io::Result<()> {
        for w in out.chunks_mut(4) {
            self.ready()?;
            w.copy_from_slice(&self.buf[self.at..self.at + w.len()]);
            self.at += w.len();
        }
        Ok(())
    }

    fn u32(&mut self) -> io::Result<u32> {
        let mut b = [0u8; 4];
        self.bytes(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    fn len(&mut self) -> io::Result<usize> {
        let v = u64::from(self.u32()?) | u64::from(self.u32()?) << 32;
        usize::try_from(v).map_err(|_| bad("size out of range"))
    }

    /// `n` u32s, handed to `sink` as byte slices of whole pairs (but for the last
    /// u32 of an odd count): pair lists (entries, density words) never see half a
    /// pair, even where one straddles two chunks.
    fn u32s(&mut self, n: usize, mut sink: impl FnMut(&[u8])) -> io::Result<()> {
        let mut left = n.checked_mul(4).ok_or_else(|| bad("size out of range"))?;
        let mut half: Option<[u8; 4]> = None;
        while left > 0 {
            self.ready()?;
            if let Some(h) = half.take() {
                let mut pair = [0u8; 8];
                pair[..4].copy_from_slice(&h);
                pair[4..].copy_from_slice(&self.buf[self.at..self.at + 4]);
                self.at += 4;
                sink(&pair);
                left -= 8;
                continue;
            }
            let mut take = left.min(self.len - self.at);
            if take < left {
                take -= take % 8;
            }
            if take == 0 {
                // The first half of a pair ends this chunk.
                half = Some(self.buf[self.at..self.at + 4].try_into().expect("4 bytes"));
                self.at += 4;
                continue;
            }
            sink(&self.buf[self.at..self.at + take]);
            self.at += take;
            left -= take;
        }
        Ok(())
    }

    /// Ends the body where the parse stopped: its last chunk goes to the hashing
    /// thread up to here, and what follows (the digest; at most 33 bytes read) is
    /// returned.
    fn finish(&mut self) -> io::Result<Vec<u8>> {
        let mut tail = self.buf[self.at..self.len].to_vec();
        if let Some(tx) = self.to_hash.take() {
            let done = std::mem::take(&mut self.buf);
            tx.send((done, self.at)).map_err(|_| bad("checksum thread stopped"))?;
        }
        let mut more = [0u8; 33];
        while tail.len() <= 32 {
            match self.r.read(&mut more[..33 - tail.len().min(32)]) {
                Ok(0) => break,
                Ok(n) => tail.extend_from_slice(&more[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(tail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{synthesize_precompiled, synthesize_recording, SyntheticCircuit, SyntheticSpec};

    /// Chunks of every alignment against the fields: pairs and 32-byte coefficients
    /// split across chunk ends, and a reader that returns a few bytes at a time.
    #[test]
    fn any_chunk_size_reads_the_same_recording() {
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
                let n = out.len().min(self.0.len()).min(7);
                out[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let spec = SyntheticSpec { constraints: 3_000, public_inputs: 5, a_density: 0.6, b_density: 0.3 };
        let (_, pre) = synthesize_recording(SyntheticCircuit::new(spec, 3).unwrap()).unwrap();
        let pre = pre.unwrap();
        let id = [9u8; 32];
        let mut file = Vec::new();
        pre.write_to(&mut file, &id).unwrap();
        for chunk in [64, 68, 72, 76, 100, 4096, CHUNK] {
            assert_eq!(read_chunked(&file[..], &id, chunk).unwrap(), pre, "chunk {chunk}");
            assert_eq!(read_chunked(Trickle(&file), &id, chunk).unwrap(), pre, "chunk {chunk}, trickled");
            let mut damaged = file.clone();
            *damaged.last_mut().unwrap() ^= 1;
            let e = read_chunked(&damaged[..], &id, chunk).unwrap_err().to_string();
            assert!(e.contains("checksum"), "chunk {chunk}: {e}");
        }
    }

    #[test]
    fn round_trip_and_refusals() {
        let spec = SyntheticSpec { constraints: 300, public_inputs: 3, a_density: 0.7, b_density: 0.4 };
        let (_, pre) = synthesize_recording(SyntheticCircuit::new(spec, 1).unwrap()).unwrap();
        let pre = pre.unwrap();
        let id = [7u8; 32];
        let mut file = Vec::new();
        pre.write_to(&mut file, &id).unwrap();
        let back = Precompiled::read_from(&file[..], &id).unwrap();
        assert_eq!(back, pre);
        // Proves the same: another instance synthesized with the loaded recording.
        let a = synthesize_precompiled(SyntheticCircuit::new(spec, 2).unwrap(), &back).unwrap();
        assert_eq!(a, crate::synthesize(SyntheticCircuit::new(spec, 2).unwrap()).unwrap());

        let err = |f: &[u8], id: &[u8; 32]| Precompiled::read_from(f, id).unwrap_err().to_string();
        assert!(err(&file, &[8u8; 32]).contains("another parameter set"));
        let mut damaged = file.clone();
        damaged[100] ^= 1;
        assert!(err(&damaged, &id).contains("checksum"));
        assert!(err(&file[..file.len() / 2], &id).contains("truncated"));
        assert!(err(&file[..file.len() - 1], &id).contains("checksum"));
        let mut longer = file.clone();
        longer.push(0);
        assert!(err(&longer, &id).contains("trailing bytes"));
        assert!(err(b"hello", &id).contains("not a cuzk circuit recording"));
    }
}
