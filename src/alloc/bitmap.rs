//! The banded bitmap both allocators share: offsets `0..size`, a static band
//! `0..offset` and a dynamic band `offset..size`.

use super::{AllocError, Rng};

#[derive(Debug, Clone)]
pub struct BandedBitmap {
    words: Vec<u64>,
    size: u64,
    /// Number of offsets in the static (lower) band.
    band: u64,
    used_static: u64,
    used_dynamic: u64,
}

impl BandedBitmap {
    /// `band` is clamped to `size`.
    pub fn new(size: u64, band: u64) -> BandedBitmap {
        let nwords = usize::try_from(size.div_ceil(64)).unwrap_or(usize::MAX);
        BandedBitmap { words: vec![0; nwords], size, band: band.min(size), used_static: 0, used_dynamic: 0 }
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn band(&self) -> u64 {
        self.band
    }

    pub fn used_static(&self) -> u64 {
        self.used_static
    }

    pub fn used_dynamic(&self) -> u64 {
        self.used_dynamic
    }

    pub fn is_set(&self, off: u64) -> bool {
        off < self.size && self.words[(off / 64) as usize] & (1u64 << (off % 64)) != 0
    }

    fn count(&mut self, off: u64, up: bool) {
        let c = if off < self.band { &mut self.used_static } else { &mut self.used_dynamic };
        if up {
            *c += 1;
        } else {
            *c -= 1;
        }
    }

    /// Takes one given offset.
    pub fn set(&mut self, off: u64) -> Result<(), AllocError> {
        if off >= self.size {
            return Err(AllocError::OutOfRange);
        }
        let (w, b) = ((off / 64) as usize, 1u64 << (off % 64));
        if self.words[w] & b != 0 {
            return Err(AllocError::AlreadyAllocated);
        }
        self.words[w] |= b;
        self.count(off, true);
        Ok(())
    }

    /// Frees an offset; false when it was not taken.
    pub fn clear(&mut self, off: u64) -> bool {
        if !self.is_set(off) {
            return false;
        }
        self.words[(off / 64) as usize] &= !(1u64 << (off % 64));
        self.count(off, false);
        true
    }

    /// First free offset in `lo..hi`, a word at a time.
    fn first_free(&self, lo: u64, hi: u64) -> Option<u64> {
        let mut off = lo;
        while off < hi {
            let w = (off / 64) as usize;
            // Treat bits below `off` as taken so they are skipped.
            let word = self.words[w] | ((1u64 << (off % 64)) - 1);
            if word != u64::MAX {
                let bit = u64::from((!word).trailing_zeros());
                let found = (off / 64) * 64 + bit;
                return (found < hi).then_some(found);
            }
            off = (off / 64 + 1) * 64;
        }
        None
    }

    /// A free offset in `lo..hi` starting at a random point and wrapping.
    fn scan_band(&self, lo: u64, hi: u64, rng: &mut Rng) -> Option<u64> {
        if lo >= hi {
            return None;
        }
        let start = lo + rng.below(hi - lo);
        self.first_free(start, hi).or_else(|| self.first_free(lo, start))
    }

    /// Dynamic allocation: the upper band first, then the lower one.
    pub fn set_next(&mut self, rng: &mut Rng) -> Result<u64, AllocError> {
        let dynamic_full = self.used_dynamic == self.size - self.band;
        let found = if dynamic_full { None } else { self.scan_band(self.band, self.size, rng) };
        let found = match found {
            Some(o) => Some(o),
            None if self.used_static < self.band => self.scan_band(0, self.band, rng),
            None => None,
        };
        let off = found.ok_or(AllocError::RangeFull)?;
        self.set(off)?;
        Ok(off)
    }

    /// Every taken offset, ascending.
    pub fn iter_set(&self) -> impl Iterator<Item = u64> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = u64::from(w.trailing_zeros());
                w &= w - 1;
                Some(i as u64 * 64 + b)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_upper_band_then_lower_then_full() {
        let mut bm = BandedBitmap::new(200, 70);
        let mut rng = Rng::seeded(7);
        for i in 0..130 {
            let o = bm.set_next(&mut rng).unwrap();
            assert!(o >= 70, "allocation {i} went to the static band ({o}) while the dynamic band had room");
        }
        assert_eq!((bm.used_static(), bm.used_dynamic()), (0, 130));
        for _ in 0..70 {
            let o = bm.set_next(&mut rng).unwrap();
            assert!(o < 70);
        }
        assert_eq!(bm.set_next(&mut rng), Err(AllocError::RangeFull));
        assert_eq!(bm.iter_set().count(), 200);
    }

    #[test]
    fn set_clear_and_errors() {
        let mut bm = BandedBitmap::new(100, 10);
        assert_eq!(bm.set(5), Ok(()));
        assert_eq!(bm.set(5), Err(AllocError::AlreadyAllocated));
        assert_eq!(bm.set(100), Err(AllocError::OutOfRange));
        assert!(bm.clear(5));
        assert!(!bm.clear(5));
        assert_eq!(bm.used_static(), 0);
    }

    #[test]
    fn finds_the_single_hole_across_words() {
        let mut bm = BandedBitmap::new(1000, 0);
        for o in 0..1000 {
            if o != 777 {
                bm.set(o).unwrap();
            }
        }
        let mut rng = Rng::seeded(3);
        assert_eq!(bm.set_next(&mut rng), Ok(777));
        assert_eq!(bm.set_next(&mut rng), Err(AllocError::RangeFull));
    }
}
