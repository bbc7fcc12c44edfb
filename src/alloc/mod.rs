//! Port and IP allocators with the Kubernetes static-subrange scheme (seeds 000/002/003).
//!
//! A range is split into a lower *static* band and an upper *dynamic* band. Dynamic
//! allocation starts at a random offset in the upper band and scans forward, wrapping
//! inside the band; only when that band is full does it scan the lower band the same
//! way. A static request may take any free value in the whole range. Operators can
//! therefore hand out well-known values from the lower band with little risk that a
//! dynamic allocation got there first.
//!
//! Everything here is pure: no I/O, no clock. Randomness comes from a small seeded PRNG
//! ([`Rng`]) so tests can fix the seed.

mod bitmap;
mod ips;
mod ports;
mod rng;

pub use bitmap::BandedBitmap;
pub use ips::{ip_band_offset, IpAllocator, IPV6_MAX_USABLE};
pub use ports::{node_port_band_offset, PortAllocator};
pub use rng::Rng;

use serde::Serialize;

/// Why an allocation failed. The registry turns these into the API server's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocError {
    /// The value is held already.
    AlreadyAllocated,
    /// The value is outside the allocator's range.
    OutOfRange,
    /// No free value left in either band.
    RangeFull,
}

/// Figures of one band, as `status` shows them (`{first, last, used, free}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BandUsage<T> {
    pub first: T,
    pub last: T,
    pub used: u64,
    pub free: u64,
}

/// Both bands of one allocator. `static` is `None` when the range is too small to
/// have a static band (16 values or fewer): then everything is dynamic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Usage<T> {
    #[serde(rename = "static")]
    pub static_band: Option<BandUsage<T>>,
    pub dynamic: BandUsage<T>,
}
