//! Byte-string comparison a machine word at a time, for the daemon's hot keys and texts.
//!
//! `[u8]`'s `Ord` and `==` call libc's `memcmp`/`bcmp`. musl's are C loops of one byte
//! per step, and behind a call: the registry's (namespace, name) keys, which share their
//! namespace and most of their name, cost ~100 instructions per comparison that way, and
//! comparisons were a fifth of a restart's work (docs/benchmarks.md, session 13). These
//! compare one `usize` at a time, read big-endian so that the first differing word orders
//! as its first differing byte: the same order and equality as `[u8]`'s, in safe code.

use std::cmp::Ordering;

const W: usize = std::mem::size_of::<usize>();

/// `a.cmp(b)`.
#[inline]
pub fn cmp(mut a: &[u8], mut b: &[u8]) -> Ordering {
    while let (Some((x, ra)), Some((y, rb))) = (a.split_first_chunk::<W>(), b.split_first_chunk::<W>()) {
        if x != y {
            return usize::from_be_bytes(*x).cmp(&usize::from_be_bytes(*y));
        }
        (a, b) = (ra, rb);
    }
    // Fewer than a word left in one of them: a half word and a quarter, then a byte
    // (names are short: `default` is all tail).
    if W > 4 {
        if let (Some((x, ra)), Some((y, rb))) = (a.split_first_chunk::<4>(), b.split_first_chunk::<4>()) {
            if x != y {
                return u32::from_be_bytes(*x).cmp(&u32::from_be_bytes(*y));
            }
            (a, b) = (ra, rb);
        }
    }
    if let (Some((x, ra)), Some((y, rb))) = (a.split_first_chunk::<2>(), b.split_first_chunk::<2>()) {
        if x != y {
            return u16::from_be_bytes(*x).cmp(&u16::from_be_bytes(*y));
        }
        (a, b) = (ra, rb);
    }
    if let (Some(x), Some(y)) = (a.first(), b.first()) {
        if x != y {
            return x.cmp(y);
        }
    }
    a.len().cmp(&b.len())
}

/// `a == b`.
#[inline]
pub fn eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && cmp(a, b).is_eq()
}

/// `a.starts_with(prefix)`.
#[inline]
pub fn starts_with(a: &[u8], prefix: &[u8]) -> bool {
    a.get(..prefix.len()).is_some_and(|head| cmp(head, prefix).is_eq())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bytes() -> impl Strategy<Value = Vec<u8>> {
        // A small alphabet, so that strings often share long prefixes.
        prop::collection::vec(prop::sample::select(vec![0u8, b'a', b'b', 0x7f, 0x80, 0xff]), 0..40)
    }

    proptest! {
        #[test]
        fn agrees_with_slices(a in bytes(), b in bytes()) {
            prop_assert_eq!(cmp(&a, &b), a.cmp(&b));
            prop_assert_eq!(eq(&a, &b), a == b);
            prop_assert_eq!(starts_with(&a, &b), a.starts_with(&b));
        }

        #[test]
        fn a_shared_prefix_then_one_byte(p in bytes(), x: u8, y: u8, tail in bytes()) {
            let (mut a, mut b) = (p.clone(), p.clone());
            a.push(x);
            b.push(y);
            a.extend(&tail);
            let longer = if tail.is_empty() { Ordering::Equal } else { Ordering::Greater };
            prop_assert_eq!(cmp(&a, &b), x.cmp(&y).then(longer));
            prop_assert_eq!(eq(&a, &b), a == b);
            prop_assert!(starts_with(&a, &p));
        }
    }

    #[test]
    fn edges() {
        assert_eq!(cmp(b"", b""), Ordering::Equal);
        assert_eq!(cmp(b"", b"a"), Ordering::Less);
        assert_eq!(cmp(b"defaultx", b"default"), Ordering::Greater);
        assert_eq!(cmp(b"svc-00010", b"svc-00009"), Ordering::Greater);
        assert_eq!(cmp(&[0x80; 9], &[0x7f; 9]), Ordering::Greater);
        assert!(eq(b"0123456789abcdef0", b"0123456789abcdef0"));
        assert!(!eq(b"0123456789abcdef0", b"0123456789abcdef1"));
        assert!(!eq(b"0123456789abcdeX0", b"0123456789abcdef0"));
        assert!(starts_with(b"abc", b""));
        assert!(!starts_with(b"ab", b"abc"));
    }
}
