//! nodeportd: Kubernetes Services (ClusterIP, NodePort, LoadBalancer, externalIPs) on an
//! OpenWrt-class router.
//!
//! Data flows one way: request → validate (`model`) → allocate (`alloc`, `registry`) →
//! persist (`store`) → desired ruleset (`dataplane`) → netlink batch (`nft`). Kernel
//! events (`netwatch`, nf_tables monitor) enter where API changes do.

pub mod alloc;
pub mod api;
pub mod bytes;
pub mod cluster;
pub mod config;
pub mod conntrack;
pub mod ctl;
pub mod daemon;
pub mod dataplane;
pub mod fxhash;
pub mod healthcheck;
pub mod jsontext;
pub mod led;
pub mod logging;
pub mod model;
pub mod netwatch;
pub mod nft;
pub mod podroutes;
pub mod registry;
pub mod store;
pub mod ubus;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The command line as UTF-8 strings, or an error naming the first argument that is
/// not UTF-8 (shown lossily). The program name (argument 0) may be anything.
pub fn utf8_args(args: impl IntoIterator<Item = std::ffi::OsString>) -> Result<Vec<String>, String> {
    args.into_iter()
        .enumerate()
        .map(|(i, a)| match a.into_string() {
            Ok(s) => Ok(s),
            Err(a) if i == 0 => Ok(a.to_string_lossy().into_owned()),
            Err(a) => Err(format!("argument {i} is not valid UTF-8: {:?}", a.to_string_lossy())),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;

    #[test]
    fn non_utf8_arguments_are_named_not_a_panic() {
        let args = vec![OsString::from("nodeportctl"), OsString::from("get"), OsString::from_vec(vec![b'-', 0xff])];
        let e = super::utf8_args(args).unwrap_err();
        assert!(e.contains("argument 2") && e.contains("\u{fffd}"), "{e}");
        let ok = super::utf8_args(vec![OsString::from_vec(vec![0xfe]), OsString::from("status")]).unwrap();
        assert_eq!(ok[1], "status");
    }
}
