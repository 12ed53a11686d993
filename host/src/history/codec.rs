//! The chunk encoding: Gorilla-style bit streams, one per chunk.
//!
//! A chunk holds points in strictly increasing time order, each a timestamp
//! (ns since the Unix epoch) and `cols` f64 values (1 for raw points; 4 for a
//! rollup bucket: min, max, mean, count). Per point:
//! - the timestamp as a delta-of-delta, zigzagged, in one of five widths:
//!   `0` (same step as before), `10`+7 bits, `110`+24 bits, `1110`+40 bits,
//!   `1111`+64 bits; the first point's time is written whole (64 bits);
//! - each value XORed with the previous value of its column: `0` (same value),
//!   `10`+the meaningful bits when they fit the previous window of leading and
//!   trailing zeros, `11`+5 bits leading zeros+6 bits length+the meaningful
//!   bits otherwise; the first value is written whole.
//!
//! The encoder is incremental (a head chunk grows point by point in memory and
//! can be read at any time); the decoder stops after the point count that the
//! chunk's header gives, so padding bits at the end are never read.

/// Bits appended most significant first.
#[derive(Default, Clone)]
pub(crate) struct BitWriter {
    buf: Vec<u8>,
    /// Pending bits (fewer than 8), right-aligned.
    acc: u64,
    nacc: u32,
}

impl BitWriter {
    #[inline]
    fn write(&mut self, v: u64, bits: u32) {
        debug_assert!(bits <= 64);
        if bits > 32 {
            self.write(v >> 32, bits - 32);
            self.write(v & 0xffff_ffff, 32);
            return;
        }
        if bits == 0 {
            return;
        }
        let v = v & ((1u64 << bits) - 1);
        self.acc = (self.acc << bits) | v;
        self.nacc += bits;
        while self.nacc >= 8 {
            self.nacc -= 8;
            self.buf.push((self.acc >> self.nacc) as u8);
        }
        self.acc &= (1u64 << self.nacc) - 1;
    }

    /// Bytes written so far, the partial last byte padded with zeros.
    fn append_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.buf);
        if self.nacc > 0 {
            out.push((self.acc << (8 - self.nacc)) as u8);
        }
    }

    fn byte_len(&self) -> usize {
        self.buf.len() + usize::from(self.nacc > 0)
    }

    fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Empties the buffer, keeping room for about as much again (chunks of a
    /// series are alike in size, and doubling growth would waste up to half).
    fn clear(&mut self) {
        let want = self.buf.len() + self.buf.len() / 8 + 16;
        self.buf.clear();
        if self.buf.capacity() > want {
            self.buf.shrink_to(want);
        } else {
            self.buf.reserve_exact(want);
        }
        self.acc = 0;
        self.nacc = 0;
    }

    fn shrink(&mut self) {
        self.buf = Vec::new();
    }
}

/// Reads what [`BitWriter`] wrote, by peeking at the next 64 bits and then
/// consuming as many as the field took: one unaligned load decodes a whole
/// prefix code and its payload, which is what makes a query's decode fast (an
/// hour of 320 series is over a million rollup buckets of four columns).
pub(crate) struct BitReader<'a> {
    data: &'a [u8],
    /// Bits consumed so far.
    pos: usize,
}

impl<'a> BitReader<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Self { data, pos: 0 }
    }

    /// The next 64 bits, most significant first; past the end they read as
    /// zeros (the caller's [`Self::consume`] then fails). At least 57 of them
    /// are the stream's own bits whenever that many remain.
    #[inline(always)]
    fn peek(&self) -> u64 {
        let byte = self.pos / 8;
        let w = match self.data.get(byte..byte + 8) {
            Some(w) => u64::from_be_bytes(w.try_into().expect("8 bytes")),
            None => {
                let mut w = [0u8; 8];
                let tail = self.data.get(byte..).unwrap_or_default();
                w[..tail.len()].copy_from_slice(tail);
                u64::from_be_bytes(w)
            }
        };
        w << (self.pos % 8)
    }

    /// Moves past `bits` bits; `None` when that runs past the data.
    #[inline(always)]
    fn consume(&mut self, bits: u32) -> Option<()> {
        self.pos += bits as usize;
        (self.pos <= self.data.len() * 8).then_some(())
    }

    /// The next `bits` (up to 64) as a number.
    #[inline]
    fn read(&mut self, bits: u32) -> Option<u64> {
        if bits == 0 {
            return Some(0);
        }
        if bits > 56 {
            let hi = self.read(bits - 32)?;
            let lo = self.read(32)?;
            return Some((hi << 32) | lo);
        }
        let v = self.peek() >> (64 - bits);
        self.consume(bits)?;
        Some(v)
    }
}

/// The top `bits` (1..=64) of `w`.
#[inline(always)]
fn top(w: u64, bits: u32) -> u64 {
    w >> (64 - bits)
}

#[inline]
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

#[inline]
fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Per-column XOR state.
#[derive(Clone, Copy, Default)]
struct Xor {
    prev: u64,
    /// Leading and trailing zeros of the current window; `lead == 64` means none yet.
    lead: u32,
    trail: u32,
}

/// Largest number of value columns in a chunk.
pub(crate) const MAX_COLS: usize = 4;

/// An incremental chunk encoder (see the module comment).
#[derive(Clone)]
pub(crate) struct ChunkEnc {
    w: BitWriter,
    cols: usize,
    n: u32,
    t_first: u64,
    t_last: u64,
    delta: i64,
    x: [Xor; MAX_COLS],
}

impl ChunkEnc {
    pub(crate) fn new(cols: usize) -> Self {
        assert!((1..=MAX_COLS).contains(&cols));
        Self {
            w: BitWriter::default(),
            cols,
            n: 0,
            t_first: 0,
            t_last: 0,
            delta: 0,
            x: [Xor::default(); MAX_COLS],
        }
    }

    pub(crate) fn len(&self) -> u32 {
        self.n
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.n == 0
    }

    pub(crate) fn t_first(&self) -> u64 {
        self.t_first
    }

    pub(crate) fn t_last(&self) -> u64 {
        self.t_last
    }

    pub(crate) fn cols(&self) -> usize {
        self.cols
    }

    /// Encoded size so far.
    pub(crate) fn byte_len(&self) -> usize {
        self.w.byte_len()
    }

    /// Heap bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.w.capacity()
    }

    /// Appends a point; `t` must be after the last point's time (the caller checks).
    #[inline]
    pub(crate) fn push(&mut self, t: u64, vals: &[f64]) {
        debug_assert_eq!(vals.len(), self.cols);
        if self.n == 0 {
            self.w.write(t, 64);
            for (i, v) in vals.iter().enumerate() {
                let b = v.to_bits();
                self.w.write(b, 64);
                self.x[i] = Xor {
                    prev: b,
                    lead: 64,
                    trail: 0,
                };
            }
            self.t_first = t;
            self.t_last = t;
            self.delta = 0;
            self.n = 1;
            return;
        }
        debug_assert!(t > self.t_last);
        let delta = t.wrapping_sub(self.t_last) as i64;
        let z = zigzag(delta.wrapping_sub(self.delta));
        if z == 0 {
            self.w.write(0, 1);
        } else if z < (1 << 7) {
            self.w.write(0b10, 2);
            self.w.write(z, 7);
        } else if z < (1 << 24) {
            self.w.write(0b110, 3);
            self.w.write(z, 24);
        } else if z < (1 << 40) {
            self.w.write(0b1110, 4);
            self.w.write(z, 40);
        } else {
            self.w.write(0b1111, 4);
            self.w.write(z, 64);
        }
        self.delta = delta;
        self.t_last = t;
        for (i, v) in vals.iter().enumerate() {
            let b = v.to_bits();
            let st = &mut self.x[i];
            let x = b ^ st.prev;
            st.prev = b;
            if x == 0 {
                self.w.write(0, 1);
                continue;
            }
            let lead = x.leading_zeros().min(31);
            let trail = x.trailing_zeros();
            if st.lead != 64 && lead >= st.lead && trail >= st.trail {
                self.w.write(0b10, 2);
                self.w.write(x >> st.trail, 64 - st.lead - st.trail);
            } else {
                let sig = 64 - lead - trail;
                self.w.write(0b11, 2);
                self.w.write(lead as u64, 5);
                self.w.write((sig - 1) as u64, 6);
                self.w.write(x >> trail, sig);
                st.lead = lead;
                st.trail = trail;
            }
        }
        self.n += 1;
    }

    /// The encoded bytes so far (a copy; the encoder can go on).
    pub(crate) fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.w.byte_len());
        self.w.append_to(&mut out);
        out
    }

    pub(crate) fn append_bytes_to(&self, out: &mut Vec<u8>) {
        self.w.append_to(out);
    }

    /// Starts again, keeping the buffer's capacity unless `shrink`.
    pub(crate) fn reset(&mut self, shrink: bool) {
        self.w.clear();
        if shrink {
            self.w.shrink();
        }
        self.n = 0;
        self.t_first = 0;
        self.t_last = 0;
        self.delta = 0;
    }
}

/// Decodes `n` points of `cols` columns, calling `f(t, values)` for each.
/// Returns `None` when the data ends early or a time goes backwards (a corrupt
/// chunk); points already handed to `f` stay handed.
pub(crate) fn decode(data: &[u8], n: u32, cols: usize, mut f: impl FnMut(u64, &[f64])) -> Option<()> {
    if n == 0 {
        return Some(());
    }
    if !(1..=MAX_COLS).contains(&cols) {
        return None;
    }
    let mut r = BitReader::new(data);
    let mut t = r.read(64)?;
    let mut x = [Xor::default(); MAX_COLS];
    let mut vals = [0f64; MAX_COLS];
    for (i, st) in x.iter_mut().enumerate().take(cols) {
        st.prev = r.read(64)?;
        st.lead = 64;
        vals[i] = f64::from_bits(st.prev);
    }
    f(t, &vals[..cols]);
    let mut delta: i64 = 0;
    for _ in 1..n {
        // The delta-of-delta: a prefix of up to four 1s, then its payload.
        let w = r.peek();
        let ones = (!w).leading_zeros().min(4);
        let (prefix, width) = [(1, 0), (2, 7), (3, 24), (4, 40), (4, 64)][ones as usize];
        let z = if width == 0 {
            r.consume(1)?;
            0
        } else if prefix + width <= 57 {
            r.consume(prefix + width)?;
            top(w << prefix, width)
        } else {
            r.consume(prefix)?;
            r.read(width)?
        };
        delta = delta.wrapping_add(unzigzag(z));
        let next = t.wrapping_add(delta as u64);
        if next <= t {
            return None;
        }
        t = next;
        for i in 0..cols {
            let st = &mut x[i];
            let w = r.peek();
            if w >> 63 == 0 {
                // `0`: the same value as before.
                r.consume(1)?;
            } else if w >> 62 == 0b10 {
                // `10`: the meaningful bits within the previous window.
                if st.lead == 64 {
                    return None;
                }
                let sig = 64 - st.lead - st.trail;
                let v = if 2 + sig <= 57 {
                    r.consume(2 + sig)?;
                    top(w << 2, sig)
                } else {
                    r.consume(2)?;
                    r.read(sig)?
                };
                st.prev ^= v << st.trail;
            } else {
                // `11`: 5 bits of leading zeros, 6 of length, then the bits.
                let lead = ((w >> 57) & 31) as u32;
                let sig = ((w >> 51) & 63) as u32 + 1;
                if lead + sig > 64 {
                    return None;
                }
                let trail = 64 - lead - sig;
                let v = if 13 + sig <= 57 {
                    r.consume(13 + sig)?;
                    top(w << 13, sig)
                } else {
                    r.consume(13)?;
                    r.read(sig)?
                };
                st.lead = lead;
                st.trail = trail;
                st.prev ^= v << trail;
            }
            vals[i] = f64::from_bits(st.prev);
        }
        f(t, &vals[..cols]);
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(cols: usize, pts: &[(u64, Vec<f64>)]) {
        let mut e = ChunkEnc::new(cols);
        for (t, v) in pts {
            e.push(*t, v);
        }
        let bytes = e.bytes();
        let mut got = Vec::new();
        decode(&bytes, e.len(), cols, |t, v| got.push((t, v.to_vec()))).expect("decodes");
        assert_eq!(got.len(), pts.len());
        for (a, b) in got.iter().zip(pts) {
            assert_eq!(a.0, b.0);
            for (x, y) in a.1.iter().zip(&b.1) {
                assert_eq!(x.to_bits(), y.to_bits());
            }
        }
    }

    #[test]
    fn exact_round_trip_of_awkward_values_and_times() {
        let mut pts = Vec::new();
        let mut t = 1_764_000_000_123_456_789u64;
        let specials = [
            0.0,
            -0.0,
            f64::NAN,
            f64::INFINITY,
            f64::MIN_POSITIVE,
            1e300,
            -3.25,
            0.1,
            0.1,
        ];
        for i in 0..5000u64 {
            // Jitter of up to ~2 ms on a 100 ms period, occasional long gaps.
            t += 100_000_000 + (i * 7919 % 4_000_000) + if i % 997 == 0 { 3_600_000_000_000 } else { 0 };
            let v = if i % 13 == 0 {
                specials[(i / 13) as usize % specials.len()]
            } else {
                (i as f64 * 0.37).sin() * 1e3
            };
            pts.push((t, vec![v]));
        }
        round_trip(1, &pts);
        let pts4: Vec<_> = pts
            .iter()
            .map(|(t, v)| (*t, vec![v[0], v[0] * 2.0, 7.0, (*t % 10) as f64]))
            .collect();
        round_trip(4, &pts4);
        // One point, and huge deltas.
        round_trip(1, &[(5, vec![1.5])]);
        round_trip(
            1,
            &[(1, vec![1.0]), (u64::MAX / 2, vec![2.0]), (u64::MAX - 1, vec![3.0])],
        );
    }

    #[test]
    fn truncated_data_is_refused_not_misread() {
        let mut e = ChunkEnc::new(1);
        for i in 0..100u64 {
            e.push(1_000 + i * 100_000_000 + i * i, &[i as f64 * 1.1]);
        }
        let bytes = e.bytes();
        let mut n = 0;
        assert!(decode(&bytes[..bytes.len() / 2], 100, 1, |_, _| n += 1).is_none());
        assert!(n < 100);
    }
}
