//! A small, fast hasher for the daemon's hash maps and sets (the FxHash multiply-rotate
//! step, one machine word at a time).
//!
//! std's default SipHash resists collision floods from untrusted keys, but it works in
//! 64-bit arithmetic, which a 32-bit MIPS or ARM router emulates with pairs of registers:
//! it was a tenth of the data plane worker's full sync there. The maps here are keyed by
//! the daemon's own data (set elements it built, names of chains and sets, the ports and
//! addresses of one object under validation, at most a few thousand keys), and a
//! collision only costs a longer probe, never a wrong answer.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

#[cfg(target_pointer_width = "64")]
const K: usize = 0x517c_c1b7_2722_0a95;
#[cfg(not(target_pointer_width = "64"))]
const K: usize = 0x9e37_79b9;

/// The hasher: state is one word.
#[derive(Debug, Default, Clone, Copy)]
pub struct FxHasher(usize);

impl FxHasher {
    #[inline]
    fn add(&mut self, word: usize) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(K);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        const W: usize = std::mem::size_of::<usize>();
        let mut rest = bytes;
        while let Some((word, r)) = rest.split_first_chunk::<W>() {
            self.add(usize::from_le_bytes(*word));
            rest = r;
        }
        if !rest.is_empty() {
            // The tail as a little-endian word, byte by byte: a copy of a length known
            // only at run time would be a call to `memcpy`.
            let word = rest.iter().rev().fold(0usize, |w, &b| (w << 8) | usize::from(b));
            // The length keeps "a" and "a\0" apart.
            self.add(word ^ (rest.len() << (W * 8 - 8)));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(usize::from(i));
    }
    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.add(usize::from(i));
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(i as usize);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i);
    }
    /// The multiply leaves the low bits weakest and hashbrown picks buckets by them: fold
    /// the high half down.
    #[inline]
    fn finish(&self) -> u64 {
        (self.0 ^ (self.0 >> (usize::BITS / 2))) as u64
    }
}

pub type FxBuild = BuildHasherDefault<FxHasher>;
pub type FxHashMap<K, V> = HashMap<K, V, FxBuild>;
pub type FxHashSet<T> = HashSet<T, FxBuild>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    fn hash(v: impl std::hash::Hash) -> u64 {
        FxBuild::default().hash_one(v)
    }

    #[test]
    fn equal_keys_hash_equal_and_near_keys_apart() {
        assert_eq!(hash("web/default"), hash(String::from("web/default")));
        assert_eq!(hash(&b"\x01\x02\x03"[..]), hash(vec![1u8, 2, 3]));
        // Prefixes, trailing zero bytes, one bit: all different.
        let keys: Vec<Vec<u8>> = vec![
            vec![],
            vec![0],
            vec![0, 0],
            b"a".to_vec(),
            b"a\0".to_vec(),
            b"b".to_vec(),
            b"abcdefgh".to_vec(),
            b"abcdefgi".to_vec(),
            b"abcdefgh\0".to_vec(),
        ];
        let hashes: FxHashSet<u64> = keys.iter().map(hash).collect();
        assert_eq!(hashes.len(), keys.len());
    }

    #[test]
    fn keys_that_differ_in_one_byte_spread_over_the_low_bits() {
        // 4 096 set elements that differ only in their last address byte or port, as the
        // planner's are: the buckets hashbrown picks (low bits) must not pile up.
        let mut buckets = [0u32; 256];
        for i in 0..4096u32 {
            let mut key = b"\xc6\x12\x80\x00\x06\x00\x00".to_vec();
            key.extend_from_slice(&i.to_be_bytes());
            buckets[(hash(&key) & 255) as usize] += 1;
        }
        let max = buckets.iter().max().copied().unwrap_or(0);
        assert!(max <= 48, "fullest of 256 buckets holds {max} of 4 096 keys");
    }

    /// The words hashed are the bytes read little-endian, the tail padded with zeros.
    #[test]
    fn words_are_the_bytes_little_endian() {
        const W: usize = std::mem::size_of::<usize>();
        let bytes: Vec<u8> = (1..=40u8).collect();
        for n in 0..bytes.len() {
            let b = &bytes[..n];
            let mut want = FxHasher::default();
            for c in b.chunks(W) {
                let mut word = [0u8; W];
                word[..c.len()].copy_from_slice(c);
                let w = usize::from_le_bytes(word);
                want.add(if c.len() == W { w } else { w ^ (c.len() << (W * 8 - 8)) });
            }
            let mut got = FxHasher::default();
            got.write(b);
            assert_eq!(got.0, want.0, "{n} bytes");
        }
    }

    #[test]
    fn maps_work_as_maps() {
        let mut m: FxHashMap<String, u32> = FxHashMap::default();
        for i in 0..1000 {
            m.insert(format!("svc-{i}"), i);
        }
        assert_eq!(m.len(), 1000);
        assert!((0..1000).all(|i| m.get(&format!("svc-{i}")) == Some(&i)));
    }
}
