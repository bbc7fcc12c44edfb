//! A small, typed nf_tables layer: a description of a ruleset (this file), its
//! rendering as `nft` text (for `--dry-run`, docs and golden tests) and its
//! lowering to nf_tables netlink messages sent in one atomic batch.
//!
//! The description is deliberately higher level than kernel expressions (it reads
//! like `nft` syntax) but lower level than Kubernetes: the data plane composes it,
//! this module knows how the kernel spells it.

pub mod ir;

pub use ir::*;
