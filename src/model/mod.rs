//! Kubernetes objects nodeportd understands: Service (v1), Endpoints (v1),
//! EndpointSlice (discovery.k8s.io/v1) and Node (v1, for pod routes), as `kubectl -o json` and an API server print them.
//!
//! Unknown fields are ignored on input; known fields round-trip with Kubernetes' JSON
//! names so objects read back look like Kubernetes objects.
//!
//! Each type declares its fields in the byte order of their JSON names, so that the one
//! printer, serde_json's compact one straight from the typed object, writes keys sorted:
//! the text a `serde_json::Value` prints, which the store has always kept. Trees for
//! replies are read back from that text, so the model's serializers are compiled in once
//! (`parse::tests::objects_print_as_their_trees_print` checks the order).

pub mod error;
mod jsonpath;
mod key;
pub mod names;
pub mod node;
pub mod parse;
pub mod smallmap;
pub mod strategy;
pub mod validate;

use serde::{Deserialize, Serialize};

pub use error::{ApiError, Reason};
pub use key::Key;
pub use node::{validate_node, Node};
pub use parse::{objects_of_text, parse_and_validate, parse_object, parse_object_text, AnyObject};
pub use smallmap::SmallMap;

/// `metadata` of every object we store.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    #[serde(default, skip_serializing_if = "SmallMap::is_empty")]
    pub annotations: SmallMap,
    /// `null` in what `kubectl --dry-run=client` prints; filled in when stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    #[serde(default, skip_serializing_if = "SmallMap::is_empty")]
    pub labels: SmallMap,
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

impl ObjectMeta {
    fn shrink_to_fit(&mut self) {
        self.labels.shrink_to_fit();
        self.annotations.shrink_to_fit();
    }
    /// The namespace, `default` when absent (as kubectl does).
    pub fn ns(&self) -> &str {
        self.namespace.as_deref().unwrap_or("default")
    }
}

/// `intstr.IntOrString`: `targetPort: 8080` or `targetPort: "http"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum IntOrString {
    Int(i64),
    Str(String),
}

// By hand rather than `#[serde(untagged)]`: the same values and the same error text, but
// the value is read once (no buffered copy), and a wrong one fails where it stands, so
// the error's position in the text names the field (`spec.ports[0].targetPort`).
impl<'de> Deserialize<'de> for IntOrString {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{Error, IgnoredAny, MapAccess, SeqAccess, Visitor};
        const NO_VARIANT: &str = "data did not match any variant of untagged enum IntOrString";
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = IntOrString;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an integer or a string")
            }
            fn visit_i64<E: Error>(self, v: i64) -> Result<IntOrString, E> {
                Ok(IntOrString::Int(v))
            }
            fn visit_u64<E: Error>(self, v: u64) -> Result<IntOrString, E> {
                i64::try_from(v).map(IntOrString::Int).map_err(|_| E::custom(NO_VARIANT))
            }
            fn visit_str<E: Error>(self, v: &str) -> Result<IntOrString, E> {
                Ok(IntOrString::Str(v.to_owned()))
            }
            fn visit_string<E: Error>(self, v: String) -> Result<IntOrString, E> {
                Ok(IntOrString::Str(v))
            }
            fn visit_f64<E: Error>(self, _: f64) -> Result<IntOrString, E> {
                Err(E::custom(NO_VARIANT))
            }
            fn visit_bool<E: Error>(self, _: bool) -> Result<IntOrString, E> {
                Err(E::custom(NO_VARIANT))
            }
            fn visit_unit<E: Error>(self) -> Result<IntOrString, E> {
                Err(E::custom(NO_VARIANT))
            }
            // Read to its end first, so that the error stands after the value.
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<IntOrString, A::Error> {
                while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Err(A::Error::custom(NO_VARIANT))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<IntOrString, A::Error> {
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Err(A::Error::custom(NO_VARIANT))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Service {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: ServiceSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ServiceStatus>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocate_load_balancer_node_ports: Option<bool>,
    #[serde(default, rename = "clusterIP", skip_serializing_if = "Option::is_none")]
    pub cluster_ip: Option<String>,
    #[serde(default, rename = "clusterIPs", skip_serializing_if = "Vec::is_empty")]
    pub cluster_ips: Vec<String>,
    #[serde(default, rename = "externalIPs", skip_serializing_if = "Vec::is_empty")]
    pub external_ips: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_name: Option<String>,
    /// `Cluster` (default) or `Local`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_traffic_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check_node_port: Option<i64>,
    /// `Cluster` (default) or `Local`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_traffic_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_families: Vec<String>,
    /// `SingleStack`, `PreferDualStack`, `RequireDualStack`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_family_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer_class: Option<String>,
    #[serde(default, rename = "loadBalancerIP", skip_serializing_if = "Option::is_none")]
    pub load_balancer_ip: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub load_balancer_source_ranges: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<ServicePort>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publish_not_ready_addresses: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<SmallMap>,
    /// `None` (default) or `ClientIP`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity_config: Option<SessionAffinityConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_distribution: Option<String>,
    /// `ClusterIP` (default), `NodePort`, `LoadBalancer`, `ExternalName`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_port: Option<i64>,
    #[serde(default)]
    pub port: i64,
    /// `TCP` (default), `UDP`, `SCTP`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_port: Option<IntOrString>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionAffinityConfig {
    #[serde(default, rename = "clientIP", skip_serializing_if = "Option::is_none")]
    pub client_ip: Option<ClientIpConfig>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientIpConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceStatus {
    #[serde(default)]
    pub load_balancer: LoadBalancerStatus,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ingress: Vec<LoadBalancerIngress>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerIngress {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
}

/// core/v1 Endpoints.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Endpoints {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subsets: Vec<EndpointSubset>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointSubset {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<EndpointAddress>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_ready_addresses: Vec<EndpointAddress>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<EndpointPort>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointAddress {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    pub ip: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
}

/// A port of an Endpoints subset or an EndpointSlice.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointPort {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
}

/// discovery.k8s.io/v1 EndpointSlice. Linked to its Service by the
/// `kubernetes.io/service-name` label.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointSlice {
    /// `IPv4`, `IPv6` or `FQDN`.
    #[serde(default)]
    pub address_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default)]
    pub endpoints: Vec<SliceEndpoint>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub ports: Vec<EndpointPort>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SliceEndpoint {
    #[serde(default)]
    pub addresses: Vec<String>,
    #[serde(default)]
    pub conditions: EndpointConditions,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
}

/// Absent `ready` means ready (the EndpointSlice API says so); absent
/// `serving` means the same as `ready`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointConditions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminating: Option<bool>,
}

// Objects parsed from text grow their lists as they are read (4 slots for 1 port, 1
// address...); the compacted forms are what the registry keeps for their lifetime.
impl Service {
    /// The same Service without spare capacity in its lists.
    pub fn compacted(mut self) -> Self {
        self.metadata.shrink_to_fit();
        let s = &mut self.spec;
        s.ports.shrink_to_fit();
        if let Some(m) = &mut s.selector {
            m.shrink_to_fit();
        }
        for v in [&mut s.cluster_ips, &mut s.ip_families, &mut s.external_ips, &mut s.load_balancer_source_ranges] {
            v.shrink_to_fit();
        }
        if let Some(st) = &mut self.status {
            st.load_balancer.ingress.shrink_to_fit();
        }
        self
    }
}

impl Endpoints {
    /// The same Endpoints without spare capacity in its lists.
    pub fn compacted(mut self) -> Self {
        self.metadata.shrink_to_fit();
        self.subsets.shrink_to_fit();
        for s in &mut self.subsets {
            s.addresses.shrink_to_fit();
            s.not_ready_addresses.shrink_to_fit();
            s.ports.shrink_to_fit();
        }
        self
    }
}

impl EndpointSlice {
    /// The same EndpointSlice without spare capacity in its lists.
    pub fn compacted(mut self) -> Self {
        self.metadata.shrink_to_fit();
        self.endpoints.shrink_to_fit();
        for e in &mut self.endpoints {
            e.addresses.shrink_to_fit();
        }
        self.ports.shrink_to_fit();
        self
    }
}

pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The annotation naming the applier of an object, for `apply --prune`; `nodeportctl
/// apply` sets it to [`APPLIER_NODEPORTCTL`] (as `kubectl apply` sets
/// `kubectl.kubernetes.io/last-applied-configuration`).
pub const APPLIED_BY: &str = "nodeportd.io/applied-by";
pub const APPLIER_NODEPORTCTL: &str = "nodeportctl";

/// Either endpoint object kind, as `endpoints.apply` accepts them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointsObject {
    Endpoints(Endpoints),
    Slice(EndpointSlice),
}

/// One backend of a service port, the common form both Endpoints and
/// EndpointSlices reduce to; what the data plane consumes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Backend {
    pub ip: std::net::IpAddr,
    pub port: u16,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    pub node_name: Option<String>,
}

/// Service type, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceType {
    ClusterIP,
    NodePort,
    LoadBalancer,
    ExternalName,
}

/// L4 protocol of a service port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Protocol {
    #[serde(rename = "TCP")]
    Tcp,
    #[serde(rename = "UDP")]
    Udp,
    #[serde(rename = "SCTP")]
    Sctp,
}

impl Protocol {
    /// The IANA protocol number, as nf_tables matches `meta l4proto`.
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Sctp => 132,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }
    /// nft's lower-case name (`tcp`, `udp`, `sctp`).
    pub fn nft_name(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
    pub fn parse(s: &str) -> Option<Protocol> {
        match s {
            "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            "SCTP" => Some(Protocol::Sctp),
            _ => None,
        }
    }
}

impl ServicePort {
    /// The protocol, TCP when absent (the API server's default).
    pub fn proto(&self) -> Protocol {
        self.protocol.as_deref().and_then(Protocol::parse).unwrap_or(Protocol::Tcp)
    }
}

impl Service {
    /// The service type, `ClusterIP` when absent. Validation has refused unknown types.
    pub fn service_type(&self) -> ServiceType {
        match self.spec.type_.as_deref() {
            Some("NodePort") => ServiceType::NodePort,
            Some("LoadBalancer") => ServiceType::LoadBalancer,
            Some("ExternalName") => ServiceType::ExternalName,
            _ => ServiceType::ClusterIP,
        }
    }
    pub fn namespace(&self) -> &str {
        self.metadata.ns()
    }
    pub fn name(&self) -> &str {
        &self.metadata.name
    }
    pub fn is_headless(&self) -> bool {
        self.spec.cluster_ip.as_deref() == Some("None")
    }
}
