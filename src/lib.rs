//! nodeportd: Kubernetes Services (ClusterIP, NodePort, LoadBalancer, externalIPs) on an
//! OpenWrt-class router.
//!
//! Data flows one way: request → validate (`model`) → allocate (`alloc`, `registry`) →
//! persist (`store`) → desired ruleset (`dataplane`) → netlink batch (`nft`). Kernel
//! events (`netwatch`, nf_tables monitor) enter where API changes do.

pub mod alloc;
pub mod api;
pub mod config;
pub mod conntrack;
pub mod ctl;
pub mod daemon;
pub mod dataplane;
pub mod healthcheck;
pub mod led;
pub mod logging;
pub mod model;
pub mod netwatch;
pub mod nft;
pub mod registry;
pub mod store;
pub mod ubus;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");
