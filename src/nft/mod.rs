//! A small, typed nf_tables layer: a description of a ruleset (`ir`), its
//! lowering to nf_tables netlink messages (`lower`, `expr`, `wire`), atomic
//! batches and dumps (`socket`), listing (`list`), change events (`events`)
//! and the sync engine (`sync`) that makes the kernel match a description.
//!
//! The description is deliberately higher level than kernel expressions (it reads
//! like `nft` syntax) but lower level than Kubernetes: the data plane composes it,
//! this module knows how the kernel spells it. Nothing here depends on the rest
//! of nodeportd, so it can become its own crate.

pub mod error;
pub mod events;
pub mod expr;
pub mod ir;
pub mod list;
pub mod lower;
pub mod packed;
pub mod recv;
pub mod render;
pub mod repair;
pub mod socket;
pub mod sync;
pub mod synthetic;
pub mod wire;

pub use error::{KernelError, NftError};
pub use events::{EventStream, TableEvent};
pub use ir::*;
pub use socket::{NftSocket, TxStats};
pub use sync::{delete_table, full_sync, partial_sync, SyncReport};
