//! The NodePort allocator (seeds 000 and 003).

use super::{AllocError, BandUsage, BandedBitmap, Rng, Usage};
use crate::config::PortRange;

/// Size of the static band: `min(max(16, size/32), 128)`, and 0 when the range holds
/// 16 ports or fewer (then every port is dynamic).
pub fn node_port_band_offset(size: u32) -> u32 {
    if size <= 16 {
        return 0;
    }
    (size / 32).clamp(16, 128)
}

#[derive(Debug, Clone)]
pub struct PortAllocator {
    range: PortRange,
    bits: BandedBitmap,
    rng: Rng,
}

impl PortAllocator {
    pub fn new(range: PortRange, rng: Rng) -> PortAllocator {
        let size = range.size();
        let band = node_port_band_offset(size);
        PortAllocator { range, bits: BandedBitmap::new(u64::from(size), u64::from(band)), rng }
    }

    pub fn range(&self) -> PortRange {
        self.range
    }

    fn offset(&self, port: u16) -> Option<u64> {
        self.range.contains(port).then(|| u64::from(port - self.range.first))
    }

    fn port(&self, off: u64) -> u16 {
        // Offsets come from a bitmap of `range.size()` bits, so this fits.
        self.range.first.saturating_add(u16::try_from(off).unwrap_or(u16::MAX))
    }

    /// A dynamic port: upper band first, random start.
    pub fn allocate_next(&mut self) -> Result<u16, AllocError> {
        let off = self.bits.set_next(&mut self.rng)?;
        Ok(self.port(off))
    }

    /// A static request for one given port, anywhere in the range.
    pub fn allocate(&mut self, port: u16) -> Result<(), AllocError> {
        let off = self.offset(port).ok_or(AllocError::OutOfRange)?;
        self.bits.set(off)
    }

    /// Frees a port; false when it was not allocated (or is outside the range).
    pub fn release(&mut self, port: u16) -> bool {
        match self.offset(port) {
            Some(off) => self.bits.clear(off),
            None => false,
        }
    }

    pub fn is_allocated(&self, port: u16) -> bool {
        self.offset(port).is_some_and(|o| self.bits.is_set(o))
    }

    pub fn allocated(&self) -> Vec<u16> {
        self.bits.iter_set().map(|o| self.port(o)).collect()
    }

    /// First and last port of the static band, `None` when there is none.
    pub fn static_band(&self) -> Option<(u16, u16)> {
        let b = self.bits.band();
        (b > 0).then(|| (self.range.first, self.port(b - 1)))
    }

    pub fn dynamic_band(&self) -> (u16, u16) {
        (self.port(self.bits.band()), self.range.last)
    }

    pub fn usage(&self) -> Usage<u16> {
        let band = self.bits.band();
        let (dfirst, dlast) = self.dynamic_band();
        Usage {
            static_band: self.static_band().map(|(first, last)| BandUsage {
                first,
                last,
                used: self.bits.used_static(),
                free: band - self.bits.used_static(),
            }),
            dynamic: BandUsage {
                first: dfirst,
                last: dlast,
                used: self.bits.used_dynamic(),
                free: self.bits.size() - band - self.bits.used_dynamic(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(first: u16, last: u16, seed: u64) -> PortAllocator {
        PortAllocator::new(PortRange { first, last }, Rng::seeded(seed))
    }

    /// Seed 000's five example tables: (range, band offset, static band, dynamic band).
    #[test]
    fn seed_examples() {
        type Row = ((u16, u16), u32, Option<(u16, u16)>, (u16, u16));
        let rows: [Row; 5] = [
            ((30000, 32767), 86, Some((30000, 30085)), (30086, 32767)),
            ((30000, 30015), 0, None, (30000, 30015)),
            ((30000, 30127), 16, Some((30000, 30015)), (30016, 30127)),
            ((30000, 34095), 128, Some((30000, 30127)), (30128, 34095)),
            ((30000, 38191), 128, Some((30000, 30127)), (30128, 38191)),
        ];
        for ((first, last), offset, static_band, dynamic) in rows {
            let r = PortRange { first, last };
            assert_eq!(node_port_band_offset(r.size()), offset, "range {r}");
            let a = alloc(first, last, 1);
            assert_eq!(a.static_band(), static_band, "range {r}");
            assert_eq!(a.dynamic_band(), dynamic, "range {r}");
            let u = a.usage();
            assert_eq!(u.static_band.as_ref().map_or(0, |b| b.free), u64::from(offset));
            assert_eq!(u.dynamic.free, u64::from(r.size() - offset));
        }
    }

    #[test]
    fn formula_edges() {
        assert_eq!(node_port_band_offset(1), 0);
        assert_eq!(node_port_band_offset(16), 0);
        assert_eq!(node_port_band_offset(17), 16);
        assert_eq!(node_port_band_offset(2768), 86);
        assert_eq!(node_port_band_offset(65535), 128);
    }

    #[test]
    fn dynamic_uses_upper_band_then_lower_then_full() {
        let mut a = alloc(30000, 30127, 42);
        let mut got = Vec::new();
        for _ in 0..112 {
            let p = a.allocate_next().unwrap();
            assert!(p >= 30016, "dynamic port {p} came from the static band too early");
            got.push(p);
        }
        for _ in 0..16 {
            let p = a.allocate_next().unwrap();
            assert!((30000..30016).contains(&p));
            got.push(p);
        }
        assert_eq!(a.allocate_next(), Err(AllocError::RangeFull));
        got.sort_unstable();
        got.dedup();
        assert_eq!(got.len(), 128, "a port was handed out twice");
        assert!(a.release(30100));
        assert_eq!(a.allocate_next(), Ok(30100));
    }

    #[test]
    fn random_start_spreads() {
        // Fresh allocators with different seeds must not all start at the same port,
        // and the first ports must cover a good part of the dynamic band.
        let mut firsts: Vec<u16> = (0..200).map(|s| alloc(30000, 32767, s).allocate_next().unwrap()).collect();
        firsts.sort_unstable();
        firsts.dedup();
        assert!(firsts.len() > 150, "only {} distinct first ports out of 200", firsts.len());
        assert!(firsts.iter().all(|&p| p >= 30086));
        let (lo, hi) = (firsts[0], firsts[firsts.len() - 1]);
        assert!(lo < 30600 && hi > 32200, "first ports span only {lo}..{hi}");
        // Production seeding, too.
        let mut prod: Vec<u16> = (0..50)
            .map(|_| PortAllocator::new(PortRange { first: 30000, last: 32767 }, Rng::from_entropy()))
            .map(|mut a| a.allocate_next().unwrap())
            .collect();
        prod.sort_unstable();
        prod.dedup();
        assert!(prod.len() > 30, "entropy-seeded allocators start at {prod:?}");
    }

    #[test]
    fn static_and_dynamic_interplay() {
        let mut a = alloc(30000, 30127, 5);
        // Static requests may take any port, dynamic band included.
        a.allocate(30009).unwrap();
        a.allocate(30100).unwrap();
        assert_eq!(a.allocate(30009), Err(AllocError::AlreadyAllocated));
        assert_eq!(a.allocate(29999), Err(AllocError::OutOfRange));
        assert_eq!(a.allocate(30128), Err(AllocError::OutOfRange));
        // Dynamic allocations never return a statically held port and leave the
        // static band alone while the dynamic band has room.
        for _ in 0..111 {
            let p = a.allocate_next().unwrap();
            assert!(p >= 30016 && p != 30100);
        }
        let u = a.usage();
        assert_eq!(u.dynamic.free, 0);
        assert_eq!(u.static_band.as_ref().map(|b| (b.used, b.free)), Some((1, 15)));
        for _ in 0..15 {
            assert_ne!(a.allocate_next().unwrap(), 30009);
        }
        assert_eq!(a.allocate_next(), Err(AllocError::RangeFull));
        assert!(a.release(30009));
        assert!(!a.release(30009));
        assert_eq!(a.allocate_next(), Ok(30009));
    }

    #[test]
    fn tiny_range_is_all_dynamic() {
        let mut a = alloc(30000, 30015, 9);
        assert!(a.usage().static_band.is_none());
        for _ in 0..16 {
            a.allocate_next().unwrap();
        }
        assert_eq!(a.allocate_next(), Err(AllocError::RangeFull));
        let mut one = alloc(65535, 65535, 1);
        assert_eq!(one.allocate_next(), Ok(65535));
        assert_eq!(one.allocate_next(), Err(AllocError::RangeFull));
    }
}
