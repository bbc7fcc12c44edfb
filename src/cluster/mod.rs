//! Cluster mode: the daemon lists and watches a Kubernetes API server's Services and
//! EndpointSlices and mirrors them into the registry (docs/cluster.md).
//!
//! `http` and `watch` are pure (URLs, HTTP framing, watch events, relist difference,
//! backoff) and always built; the connection (`client`, TLS) is behind the `cluster`
//! cargo feature.

#[cfg(feature = "cluster")]
pub mod client;
pub mod http;
pub mod watch;

/// The annotation marking an object the cluster owns (mirrored by cluster mode): a
/// local apply or delete of it is refused, and only cluster mode removes it.
pub const OWNER_ANNOTATION: &str = "nodeportd.io/owner";
pub const OWNER_CLUSTER: &str = "cluster";

/// Whether stored metadata marks an object as the cluster's.
pub fn cluster_owned(annotations: &crate::model::SmallMap) -> bool {
    annotations.get(OWNER_ANNOTATION).is_some_and(|v| v == OWNER_CLUSTER)
}
