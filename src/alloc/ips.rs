//! The ClusterIP allocator (seed 002), one per service CIDR.
//!
//! Like Kubernetes, the network address is never handed out, nor the IPv4 broadcast
//! address. An IPv6 range only uses its first 65536 addresses (Kubernetes' bitmap
//! allocator caps it the same way), so the bitmap stays at 8 KiB however large the
//! prefix; addresses above are refused as out of range. IPv4 ranges use the whole
//! prefix (a /16 is an 8 KiB bitmap).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use super::{AllocError, BandUsage, BandedBitmap, Rng, Usage};

/// How many addresses of an IPv6 range are used at most (network address included).
pub const IPV6_MAX_USABLE: u64 = 1 << 16;

/// Size of the static band: `min(max(16, size/16), 256)`, where `size` is the number
/// of addresses in the CIDR, and 0 for ranges of 16 addresses or fewer.
pub fn ip_band_offset(net: &IpNet) -> u64 {
    let host_bits = u32::from(net.max_prefix_len() - net.prefix_len());
    if host_bits <= 4 {
        return 0;
    }
    // Above 2^12 addresses the formula is at its 256 cap; avoid overflow for big v6 nets.
    let size: u64 = if host_bits >= 32 { u64::MAX } else { 1u64 << host_bits };
    (size / 16).clamp(16, 256)
}

fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

#[derive(Debug, Clone)]
pub struct IpAllocator {
    net: IpNet,
    /// The first address handed out (network + 1), as a number.
    base: u128,
    bits: BandedBitmap,
    rng: Rng,
}

impl IpAllocator {
    pub fn new(net: IpNet, rng: Rng) -> IpAllocator {
        let net = net.trunc();
        let host_bits = u32::from(net.max_prefix_len() - net.prefix_len());
        let total: u64 = if host_bits >= 63 { u64::MAX } else { 1u64 << host_bits };
        let usable = match net {
            // Minus the network and broadcast addresses.
            IpNet::V4(_) => total.saturating_sub(2),
            // Minus the network address ("subnet-router anycast").
            IpNet::V6(_) => total.min(IPV6_MAX_USABLE).saturating_sub(1),
        };
        let base = to_u128(net.network()) + 1;
        IpAllocator { net, base, bits: BandedBitmap::new(usable, ip_band_offset(&net)), rng }
    }

    pub fn net(&self) -> IpNet {
        self.net
    }

    pub fn is_ipv4(&self) -> bool {
        matches!(self.net, IpNet::V4(_))
    }

    fn addr(&self, off: u64) -> IpAddr {
        let n = self.base + u128::from(off);
        match self.net {
            // Offsets stay inside the net, so a v4 address fits (saturate rather than wrap).
            IpNet::V4(_) => IpAddr::V4(Ipv4Addr::from(u32::try_from(n).unwrap_or(u32::MAX))),
            IpNet::V6(_) => IpAddr::V6(Ipv6Addr::from(n)),
        }
    }

    fn offset(&self, ip: IpAddr) -> Option<u64> {
        if !self.net.contains(&ip) {
            return None;
        }
        let n = to_u128(ip).checked_sub(self.base)?;
        let off = u64::try_from(n).ok()?;
        (off < self.bits.size()).then_some(off)
    }

    /// Whether the address can be allocated here at all.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.offset(ip).is_some()
    }

    pub fn allocate_next(&mut self) -> Result<IpAddr, AllocError> {
        let off = self.bits.set_next(&mut self.rng)?;
        Ok(self.addr(off))
    }

    pub fn allocate(&mut self, ip: IpAddr) -> Result<(), AllocError> {
        let off = self.offset(ip).ok_or(AllocError::OutOfRange)?;
        self.bits.set(off)
    }

    pub fn release(&mut self, ip: IpAddr) -> bool {
        match self.offset(ip) {
            Some(off) => self.bits.clear(off),
            None => false,
        }
    }

    pub fn is_allocated(&self, ip: IpAddr) -> bool {
        self.offset(ip).is_some_and(|o| self.bits.is_set(o))
    }

    pub fn allocated(&self) -> Vec<IpAddr> {
        self.bits.iter_set().map(|o| self.addr(o)).collect()
    }

    pub fn static_band(&self) -> Option<(IpAddr, IpAddr)> {
        let b = self.bits.band();
        (b > 0).then(|| (self.addr(0), self.addr(b - 1)))
    }

    /// First and last address dynamic allocation uses (the range end).
    pub fn dynamic_band(&self) -> (IpAddr, IpAddr) {
        (self.addr(self.bits.band()), self.addr(self.bits.size().saturating_sub(1)))
    }

    pub fn usage(&self) -> Usage<IpAddr> {
        let band = self.bits.band();
        let (first, last) = self.dynamic_band();
        Usage {
            static_band: self.static_band().map(|(f, l)| BandUsage {
                first: f,
                last: l,
                used: self.bits.used_static(),
                free: band - self.bits.used_static(),
            }),
            dynamic: BandUsage {
                first,
                last,
                used: self.bits.used_dynamic(),
                free: self.bits.size() - band - self.bits.used_dynamic(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// Seed 002's three examples: (CIDR, range size, band offset, static start, static end, range end).
    #[test]
    fn seed_examples() {
        let rows = [
            ("10.96.0.0/24", 254, 16, "10.96.0.1", "10.96.0.16", "10.96.0.254"),
            ("10.96.0.0/20", 4094, 256, "10.96.0.1", "10.96.1.0", "10.96.15.254"),
            ("10.96.0.0/16", 65534, 256, "10.96.0.1", "10.96.1.0", "10.96.255.254"),
        ];
        for (cidr, size, offset, sstart, send, end) in rows {
            let net: IpNet = cidr.parse().unwrap();
            assert_eq!(ip_band_offset(&net), offset, "{cidr}");
            let a = IpAllocator::new(net, Rng::seeded(1));
            assert_eq!(a.static_band(), Some((ip(sstart), ip(send))), "{cidr}");
            assert_eq!(a.dynamic_band().1, ip(end), "{cidr}");
            let u = a.usage();
            let static_free = u.static_band.as_ref().map_or(0, |b| b.free);
            assert_eq!((static_free, u.dynamic.free), (offset, size - offset), "{cidr}");
        }
    }

    #[test]
    fn small_ranges_have_no_static_band() {
        let a = IpAllocator::new("10.0.0.0/28".parse().unwrap(), Rng::seeded(1));
        assert!(a.static_band().is_none());
        assert_eq!(a.dynamic_band(), (ip("10.0.0.1"), ip("10.0.0.14")));
        let b = IpAllocator::new("10.0.0.0/27".parse().unwrap(), Rng::seeded(1));
        assert_eq!(b.static_band(), Some((ip("10.0.0.1"), ip("10.0.0.16"))));
    }

    #[test]
    fn network_and_broadcast_never_handed_out() {
        let mut a = IpAllocator::new("198.18.0.0/27".parse().unwrap(), Rng::seeded(4));
        assert_eq!(a.allocate(ip("198.18.0.0")), Err(AllocError::OutOfRange));
        assert_eq!(a.allocate(ip("198.18.0.31")), Err(AllocError::OutOfRange));
        assert_eq!(a.allocate(ip("198.18.0.32")), Err(AllocError::OutOfRange));
        let mut got: Vec<IpAddr> = (0..30).map(|_| a.allocate_next().unwrap()).collect();
        assert_eq!(a.allocate_next(), Err(AllocError::RangeFull));
        // Upper band first: the first 14 dynamic allocations are all above .16.
        assert!(got[..14].iter().all(|&x| to_u128(x) > to_u128(ip("198.18.0.16"))));
        got.sort_unstable();
        got.dedup();
        assert_eq!(got.len(), 30);
        assert_eq!(got[0], ip("198.18.0.1"));
        assert_eq!(got[29], ip("198.18.0.30"));
    }

    #[test]
    fn static_dns_address_and_spread() {
        let mut a = IpAllocator::new("10.96.0.0/16".parse().unwrap(), Rng::seeded(11));
        a.allocate(ip("10.96.0.10")).unwrap();
        assert_eq!(a.allocate(ip("10.96.0.10")), Err(AllocError::AlreadyAllocated));
        assert_eq!(a.allocate(ip("10.97.0.10")), Err(AllocError::OutOfRange));
        let u = a.usage();
        assert_eq!(u.static_band.map(|b| b.used), Some(1));
        let mut firsts: Vec<IpAddr> = (0..100)
            .map(|s| IpAllocator::new("10.96.0.0/16".parse().unwrap(), Rng::seeded(s)).allocate_next().unwrap())
            .collect();
        firsts.sort_unstable();
        firsts.dedup();
        assert!(firsts.len() > 90);
        assert!(firsts.iter().all(|&x| to_u128(x) > to_u128(ip("10.96.1.0"))));
    }

    #[test]
    fn ipv6_is_capped_not_bitmapped_whole() {
        let net: IpNet = "fd00:10:96::/64".parse().unwrap();
        assert_eq!(ip_band_offset(&net), 256);
        let mut a = IpAllocator::new(net, Rng::seeded(2));
        assert_eq!(a.static_band(), Some((ip("fd00:10:96::1"), ip("fd00:10:96::100"))));
        assert_eq!(a.dynamic_band().1, ip("fd00:10:96::ffff"));
        assert_eq!(a.allocate(ip("fd00:10:96::")), Err(AllocError::OutOfRange));
        assert_eq!(a.allocate(ip("fd00:10:96::1:0")), Err(AllocError::OutOfRange));
        a.allocate(ip("fd00:10:96::a")).unwrap();
        let x = a.allocate_next().unwrap();
        assert!(net.contains(&x) && to_u128(x) > to_u128(ip("fd00:10:96::100")));
        let small = IpAllocator::new("fd00::/124".parse().unwrap(), Rng::seeded(1));
        assert!(small.static_band().is_none());
        assert_eq!(small.dynamic_band(), (ip("fd00::1"), ip("fd00::f")));
    }
}
