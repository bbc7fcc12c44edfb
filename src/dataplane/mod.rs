//! The data plane: the desired nftables ruleset, computed as data from the stored
//! services, their endpoints and the node's addresses (pure, no I/O). The `nft` module
//! renders it as text and programs it into the kernel.
//!
//! See docs/dataplane.md for the ruleset in nft syntax.

pub mod builder;
pub mod claims;
pub mod endpoints;
#[cfg(test)]
pub mod fake;
pub mod kernel;
pub mod names;
pub mod plan;
pub mod syncer;

pub use builder::{build_service, build_skeleton, Input, ServiceInput, ServicePieces};
pub use plan::build;

#[cfg(test)]
mod tests;
