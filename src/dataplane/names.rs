//! Names of the table's fixed objects and of the per-service chains and sets.
//!
//! Per-service names are derived from content only (namespace, name, protocol, port,
//! family, endpoint), never from a counter, so that two builds of the same objects give
//! the same names and the sync engine can diff the kernel against the desired ruleset
//! by name. A short hash of that content comes first: it keeps names unique when a long
//! one is cut to the kernel's limit, and makes chains of one service easy to grep.

use std::net::IpAddr;

use crate::model::Protocol;

// The table's fixed sets and maps. Every service port is data in these: a change to a
// service adds and removes elements, never rules or chains (docs/dataplane.md).
pub const NODEPORT_IPS_V4: &str = "nodeport-ips-v4";
pub const NODEPORT_IPS_V6: &str = "nodeport-ips-v6";
/// Backends of service IPs: `addr . proto . port . slot : endpoint addr . endpoint port`.
pub const SERVICE_BACKENDS_V4: &str = "service-backends-v4";
pub const SERVICE_BACKENDS_V6: &str = "service-backends-v6";
/// Backends of NodePorts: `proto . nodePort . slot : endpoint addr . endpoint port`.
pub const NODEPORT_BACKENDS_V4: &str = "nodeport-backends-v4";
pub const NODEPORT_BACKENDS_V6: &str = "nodeport-backends-v6";
/// External destinations under `externalTrafficPolicy: Cluster`: masqueraded.
pub const MASQUERADE_IPS_V4: &str = "masquerade-ips-v4";
pub const MASQUERADE_IPS_V6: &str = "masquerade-ips-v6";
pub const MASQUERADE_NODEPORTS_V4: &str = "masquerade-nodeports-v4";
pub const MASQUERADE_NODEPORTS_V6: &str = "masquerade-nodeports-v6";
/// Destinations without usable endpoints: refused at once, or dropped (Local policies).
pub const REJECT_IPS_V4: &str = "reject-ips-v4";
pub const REJECT_IPS_V6: &str = "reject-ips-v6";
pub const REJECT_NODEPORTS_V4: &str = "reject-nodeports-v4";
pub const REJECT_NODEPORTS_V6: &str = "reject-nodeports-v6";
pub const DROP_IPS_V4: &str = "drop-ips-v4";
pub const DROP_IPS_V6: &str = "drop-ips-v6";
pub const DROP_NODEPORTS_V4: &str = "drop-nodeports-v4";
pub const DROP_NODEPORTS_V6: &str = "drop-nodeports-v6";
/// `endpoint . endpoint`: a connection DNATed back to its own source is masqueraded.
pub const HAIRPIN_V4: &str = "hairpin-v4";
pub const HAIRPIN_V6: &str = "hairpin-v6";
/// Services with `sessionAffinity: ClientIP` keep per-service chains, reached by these.
pub const AFFINITY_IPS_V4: &str = "affinity-ips-v4";
pub const AFFINITY_IPS_V6: &str = "affinity-ips-v6";
pub const AFFINITY_NODEPORTS_V4: &str = "affinity-nodeports-v4";
pub const AFFINITY_NODEPORTS_V6: &str = "affinity-nodeports-v6";
pub const FIREWALL_IPS_V4: &str = "firewall-ips-v4";
pub const FIREWALL_IPS_V6: &str = "firewall-ips-v6";
/// Both families: the ports `spec.healthCheckNodePort` is served on (the daemon's own socket).
pub const HEALTH_CHECK_PORTS: &str = "health-check-ports";

// The table's fixed chains.
pub const FILTER_PREROUTING: &str = "filter-prerouting";
pub const FILTER_INPUT: &str = "filter-input";
pub const FILTER_FORWARD: &str = "filter-forward";
pub const FILTER_OUTPUT: &str = "filter-output";
pub const NAT_PREROUTING: &str = "nat-prerouting";
pub const NAT_OUTPUT: &str = "nat-output";
pub const NAT_POSTROUTING: &str = "nat-postrouting";
pub const SERVICES: &str = "services";
pub const ENDPOINTS_CHECK: &str = "endpoints-check";
pub const FIREWALL_CHECK: &str = "firewall-check";
pub const REJECT_CHAIN: &str = "reject-chain";
pub const MARK_FOR_MASQUERADE: &str = "mark-for-masquerade";
pub const MASQUERADING: &str = "masquerading";

/// The kernel's limit for table, chain and set names (`NFT_NAME_MAXLEN`, 256 with the NUL).
pub const NAME_MAX: usize = 255;

/// The set of service IPs (`ip`) or NodePorts (`nodeport`) with `count` usable endpoints:
/// `service-ips-v4-k3`. The skeleton has one pair, and one rule each, per count in use.
pub fn endpoint_count_set(family: IpFamily, nodeport: bool, count: u32) -> String {
    let kind = if nodeport { "nodeports" } else { "ips" };
    format!("service-{kind}-v{}-k{count}", family.digit())
}

/// The family and endpoint count of an [`endpoint_count_set`] name.
pub fn parse_endpoint_count_set(name: &str) -> Option<(IpFamily, u32)> {
    let rest = name.strip_prefix("service-ips-v").or_else(|| name.strip_prefix("service-nodeports-v"))?;
    let (fam, count) = rest.split_once("-k")?;
    let family = match fam {
        "4" => IpFamily::V4,
        "6" => IpFamily::V6,
        _ => return None,
    };
    Some((family, count.parse().ok().filter(|c| *c > 0)?))
}

/// What a set stands for in messages: a count set by its family's name
/// (`service-ips-v4-k3` → `service-ips-v4`), any other set by its own.
pub fn dispatch_name(name: &str) -> &str {
    match (parse_endpoint_count_set(name), name.rfind("-k")) {
        (Some(_), Some(i)) => &name[..i],
        _ => name,
    }
}

/// Whether a map's key ends with a numgen slot that is not part of the destination (its
/// elements belong to whoever holds the destination).
pub fn is_backends_map(name: &str) -> bool {
    [SERVICE_BACKENDS_V4, SERVICE_BACKENDS_V6, NODEPORT_BACKENDS_V4, NODEPORT_BACKENDS_V6].contains(&name)
}

/// Prefixes of the per-service objects; every fixed name above has none of them, so
/// `is_service_object` tells the two apart.
pub const SERVICE_PREFIXES: [&str; 12] =
    ["svc4-", "svc6-", "local4-", "local6-", "ext4-", "ext6-", "fwall4-", "fwall6-", "ep4-", "ep6-", "aff4-", "aff6-"];

/// Whether a chain or set name belongs to a service (and so may be stale), rather than
/// to the table's fixed skeleton.
pub fn is_service_object(name: &str) -> bool {
    SERVICE_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// IP family of a service port's objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IpFamily {
    V4,
    V6,
}

impl IpFamily {
    pub fn of(ip: &IpAddr) -> IpFamily {
        if ip.is_ipv4() {
            IpFamily::V4
        } else {
            IpFamily::V6
        }
    }
    fn digit(self) -> char {
        match self {
            IpFamily::V4 => '4',
            IpFamily::V6 => '6',
        }
    }
}

/// Identifies the objects of one service port in one family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortId {
    family: IpFamily,
    /// `namespace/name/proto/port`, already sanitised.
    base: String,
    hash: String,
}

impl PortId {
    /// `port` is the service port's name, or its number when it has none.
    pub fn new(family: IpFamily, namespace: &str, name: &str, proto: Protocol, port: &str) -> PortId {
        let base = format!("{}/{}/{}/{}", sanitize(namespace), sanitize(name), proto.nft_name(), sanitize(port));
        let hash = hash8(&format!("{}{}", family.digit(), base));
        PortId { family, base, hash }
    }

    fn name(&self, kind: &str) -> String {
        limit(format!("{kind}{}-{}-{}", self.family.digit(), self.hash, self.base))
    }

    /// Chooses among all usable endpoints (`Cluster` traffic policy).
    pub fn cluster_chain(&self) -> String {
        self.name("svc")
    }
    /// Chooses among the endpoints on this node (`Local` traffic policy).
    pub fn local_chain(&self) -> String {
        self.name("local")
    }
    /// Entry for external destinations (NodePort, externalIPs, LoadBalancer IPs).
    pub fn external_chain(&self) -> String {
        self.name("ext")
    }
    /// `loadBalancerSourceRanges` check.
    pub fn firewall_chain(&self) -> String {
        self.name("fwall")
    }

    fn endpoint_base(&self, ip: &IpAddr, port: u16) -> (String, String) {
        // `:` is not allowed in a name; IPv6 endpoints use `.` as kube-proxy does.
        let content = format!("{}__{}/{port}", self.base, ip.to_string().replace(':', "."));
        let hash = hash8(&format!("{}{content}", self.family.digit()));
        (content, hash)
    }

    /// DNATs to one endpoint.
    pub fn endpoint_chain(&self, ip: &IpAddr, port: u16) -> String {
        let (content, hash) = self.endpoint_base(ip, port);
        limit(format!("ep{}-{hash}-{content}", self.family.digit()))
    }

    /// Client addresses stuck to one endpoint (`sessionAffinity: ClientIP`).
    pub fn affinity_set(&self, ip: &IpAddr, port: u16) -> String {
        let (content, hash) = self.endpoint_base(ip, port);
        limit(format!("aff{}-{hash}-{content}", self.family.digit()))
    }
}

/// Keeps what nft accepts unquoted in a name after the first letter; Kubernetes names
/// already fit (DNS labels), this only guards against what validation let through.
fn sanitize(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' { c } else { '_' }).collect()
}

/// Cuts a name to the kernel limit; the hash at its front keeps it unique.
fn limit(mut name: String) -> String {
    if name.len() > NAME_MAX {
        // Every character is ASCII (sanitised), so any byte index is a char boundary.
        name.truncate(NAME_MAX - 3);
        name.push_str("...");
    }
    name
}

/// 64-bit FNV-1a: tiny, stable across platforms and releases (names persist in the
/// kernel across daemon upgrades), and good enough to tell names apart.
fn fnv1a64(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in data {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The top 40 bits of the hash as 8 base32 characters (RFC 4648 alphabet).
fn hash8(s: &str) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let h = fnv1a64(s.as_bytes());
    (0..8).map(|i| ALPHABET[((h >> (59 - 5 * i)) & 31) as usize] as char).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_and_distinct() {
        let a = PortId::new(IpFamily::V4, "default", "web", Protocol::Tcp, "http");
        let b = PortId::new(IpFamily::V4, "default", "web", Protocol::Tcp, "http");
        let c = PortId::new(IpFamily::V6, "default", "web", Protocol::Tcp, "http");
        let d = PortId::new(IpFamily::V4, "default", "web", Protocol::Udp, "http");
        assert_eq!(a.cluster_chain(), b.cluster_chain());
        assert_ne!(a.cluster_chain(), c.cluster_chain());
        assert_ne!(a.cluster_chain(), d.cluster_chain());
        assert!(a.cluster_chain().starts_with("svc4-"));
        assert!(a.cluster_chain().ends_with("-default/web/tcp/http"));
        let ip: IpAddr = "2001:db8::5".parse().unwrap();
        let ep = c.endpoint_chain(&ip, 8080);
        assert!(ep.starts_with("ep6-"), "{ep}");
        assert!(ep.ends_with("-default/web/tcp/http__2001.db8..5/8080"), "{ep}");
        assert!(!ep.contains(':'));
    }

    #[test]
    fn hash_is_fixed_forever() {
        // Names live in the kernel across upgrades; a changed hash would churn every chain.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(hash8("").len(), 8);
    }

    #[test]
    fn long_names_fit_the_kernel_limit() {
        let long = "a".repeat(63);
        let id = PortId::new(IpFamily::V6, &long, &long, Protocol::Sctp, &long);
        let ip: IpAddr = "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff".parse().unwrap();
        let name = id.endpoint_chain(&ip, 65535);
        assert!(name.len() <= NAME_MAX, "{}", name.len());
        let other = id.endpoint_chain(&"2001:db8:ffff:ffff:ffff:ffff:ffff:fffe".parse().unwrap(), 65535);
        assert_ne!(name, other, "the hash keeps truncated names apart");
    }

    #[test]
    fn service_objects_are_told_from_fixed_ones() {
        let id = PortId::new(IpFamily::V4, "default", "web", Protocol::Tcp, "80");
        for n in [id.cluster_chain(), id.local_chain(), id.external_chain(), id.firewall_chain()] {
            assert!(is_service_object(&n), "{n}");
        }
        for n in [SERVICES, MASQUERADING, SERVICE_BACKENDS_V4, NODEPORT_IPS_V6, REJECT_CHAIN, FIREWALL_CHECK] {
            assert!(!is_service_object(n), "{n}");
        }
    }
}
