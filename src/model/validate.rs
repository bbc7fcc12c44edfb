//! Validation of Services, Endpoints and EndpointSlices as the Kubernetes 1.36 API
//! server does it (`pkg/apis/core/validation`, `pkg/apis/discovery/validation`,
//! apimachinery's name and IP checks), with its texts.
//!
//! Pure: no I/O, no allocator state (range checks for nodePorts and clusterIPs belong to
//! the allocators). Every error is collected; one is reported as
//! `Kind "name" is invalid: field: ...`, several as `Kind "name" is invalid: [a, b]`,
//! as the API server's `NewInvalid` does.
//!
//! A Service is validated as the API server validates it: after defaulting and after the
//! strategy dropped what an update makes obsolete ([`super::strategy::prepare_service`]);
//! [`validate_service_create`] does both for a Service without a stored predecessor.
//!
//! Accepted and stored as the API server accepts them, though a single node has no use
//! for them: `trafficDistribution`, `loadBalancerClass`, `loadBalancerIP` (not validated
//! at all, as in Kubernetes), `externalName` on a Service of another type,
//! `externalIPs` on a headless Service, `publishNotReadyAddresses`, `appProtocol`,
//! `selector`. EndpointSlice ports are not range-checked (the data plane skips a port
//! number it cannot use).
//!
//! Refused by name, where nodeportd deliberately differs (docs/extensions.md):
//! `addressType: FQDN` EndpointSlices (nodeportd DNATs to addresses and cannot resolve
//! names).

use crate::fxhash::FxHashSet as HashSet;
use std::fmt::Display;

use super::names;
use super::{ApiError, EndpointAddress, EndpointPort, EndpointSlice, Endpoints, IntOrString, Reason, Service};

const SUPPORTED_TYPES: &[&str] = &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
const SUPPORTED_PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];
const PORT_RANGE: &str = "must be between 1 and 65535, inclusive";

/// A JSON-quoted string, as the API server prints string values (Go's `%q`).
pub(crate) fn q(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

/// A list value as the API server prints it (JSON).
pub(crate) fn q_list(v: &[String]) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// The errors of one object, in the API server's order; see [`Errs::finish`].
pub(crate) struct Errs<'a> {
    kind: &'a str,
    name: &'a str,
    list: Vec<String>,
}

impl<'a> Errs<'a> {
    pub(crate) fn new(kind: &'a str, name: &'a str) -> Self {
        Errs { kind, name, list: Vec::new() }
    }
    pub(crate) fn push(&mut self, e: String) {
        self.list.push(e);
    }
    pub(crate) fn invalid(&mut self, field: &str, value: impl Display, detail: &str) {
        self.push(format!("{field}: Invalid value: {value}: {detail}"));
    }
    fn invalid_str(&mut self, field: &str, value: &str, detail: &str) {
        self.invalid(field, q(value), detail);
    }
    fn unsupported(&mut self, field: &str, value: &str, supported: &[&str]) {
        let list: Vec<String> = supported.iter().map(|s| q(s)).collect();
        self.push(format!("{field}: Unsupported value: {}: supported values: {}", q(value), list.join(", ")));
    }
    fn required(&mut self, field: &str, detail: &str) {
        if detail.is_empty() {
            self.push(format!("{field}: Required value"));
        } else {
            self.push(format!("{field}: Required value: {detail}"));
        }
    }
    fn forbidden(&mut self, field: &str, detail: &str) {
        self.push(format!("{field}: Forbidden: {detail}"));
    }
    fn duplicate(&mut self, field: &str, value: impl Display) {
        self.push(format!("{field}: Duplicate value: {value}"));
    }
    fn too_many(&mut self, field: &str, n: usize, max: usize) {
        self.push(format!("{field}: Too many: {n}: must have at most {max} items"));
    }

    /// `Kind "name" is invalid: e` for one error, `...: [e1, e2]` for several
    /// (repeated messages once, as apimachinery's aggregate does).
    pub(crate) fn finish(self) -> Result<(), ApiError> {
        let mut seen = HashSet::default();
        let list: Vec<String> = self.list.into_iter().filter(|e| seen.insert(e.clone())).collect();
        let body = match list.len() {
            0 => return Ok(()),
            1 => list[0].clone(),
            _ => format!("[{}]", list.join(", ")),
        };
        Err(ApiError::new(Reason::Invalid, format!("{} {} is invalid: {body}", self.kind, q(self.name))))
    }

    fn meta(&mut self, meta: &super::ObjectMeta, name_check: fn(&str) -> Vec<String>) {
        if meta.name.is_empty() {
            self.required("metadata.name", "name or generateName is required");
        } else {
            for e in name_check(&meta.name) {
                self.invalid_str("metadata.name", &meta.name, &e);
            }
        }
        if let Some(ns) = meta.namespace.as_deref() {
            for e in names::dns1123_label_all(ns) {
                self.invalid_str("metadata.namespace", ns, &e);
            }
        }
        self.labels("metadata.labels", &meta.labels);
    }

    /// Label keys and values, of `metadata.labels` or a selector: the field path is
    /// the map's, without the key (apimachinery's `ValidateLabels`).
    fn labels(&mut self, field: &str, labels: &super::SmallMap) {
        for (k, v) in labels {
            if let Err(e) = names::qualified_name(k) {
                self.invalid_str(field, k, &e);
            }
            if let Err(e) = names::label_value(v) {
                self.invalid_str(field, v, &e);
            }
        }
    }

    fn port_number(&mut self, field: &str, port: i64) {
        if !(1..=65535).contains(&port) {
            self.invalid(field, port, PORT_RANGE);
        }
    }

    fn protocol(&mut self, field: &str, p: Option<&str>) {
        match p {
            None | Some("") => self.required(field, ""),
            Some(s) if SUPPORTED_PROTOCOLS.contains(&s) => {}
            Some(s) => self.unsupported(field, s, SUPPORTED_PROTOCOLS),
        }
    }

    fn dns_label(&mut self, field: &str, v: &str) {
        for e in names::dns1123_label_all(v) {
            self.invalid_str(field, v, &e);
        }
    }

    /// `IsValidIPForLegacyField`, then `ValidateNonSpecialIP` for a parsable address.
    fn non_special_ip(&mut self, field: &str, ip: &str) {
        if let Err(e) = names::non_special_ip(ip) {
            self.invalid_str(field, ip, &e);
        }
    }
}

fn service_name(s: &str) -> Vec<String> {
    names::dns1123_label_all(s)
}

fn subdomain(s: &str) -> Vec<String> {
    names::dns1123_subdomain(s).err().into_iter().collect()
}

/// The value the API server prints for a duplicate service port: the JSON of its
/// internal `core.ServicePort` key, which carries only the protocol and port
/// (apimachinery prints non-scalar values as JSON).
fn go_port_key(port: i64, proto: &str) -> String {
    format!(
        "{{\"Name\":\"\",\"Protocol\":{},\"AppProtocol\":null,\"Port\":{port},\"TargetPort\":0,\"NodePort\":0}}",
        q(proto)
    )
}

/// Defaults a copy of a Service as a create would and validates it: what a Service
/// without a stored predecessor must pass.
pub fn validate_service_create(svc: &Service) -> Result<(), ApiError> {
    let mut s = svc.clone();
    super::strategy::prepare_service(&mut s, None);
    validate_service(&s)
}

/// `ValidateService` (as for a create) on a defaulted, prepared Service.
pub fn validate_service(svc: &Service) -> Result<(), ApiError> {
    let mut e = Errs::new("Service", &svc.metadata.name);
    service_errs(&mut e, svc, false);
    e.finish()
}

/// `ValidateServiceUpdate` on a defaulted, prepared Service and the stored one: the
/// update rules first (a primary cluster IP may not change, a secondary is released
/// only with `SingleStack`, `healthCheckNodePort` is immutable while it is needed),
/// then everything `ValidateService` checks but the name.
pub fn validate_service_update(svc: &Service, old: &Service) -> Result<(), ApiError> {
    let mut e = Errs::new("Service", &svc.metadata.name);
    upgrade_downgrade_cluster_ips(&mut e, svc, old);
    let needs_hc = super::strategy::needs_health_check;
    if needs_hc(old) && needs_hc(svc) && svc.spec.health_check_node_port != old.spec.health_check_node_port {
        e.forbidden("spec.healthCheckNodePort", "field is immutable");
    }
    service_errs(&mut e, svc, true);
    e.finish()
}

/// `validateUpgradeDowngradeClusterIPs`.
fn upgrade_downgrade_cluster_ips(e: &mut Errs, svc: &Service, old: &Service) {
    let external = |s: &Service| s.spec.type_.as_deref() == Some("ExternalName");
    let headless = |s: &Service| s.spec.cluster_ip.as_deref() == Some("None");
    if external(svc) || external(old) || (headless(svc) && headless(old)) {
        return;
    }
    let (new, was) = (&svc.spec.cluster_ips, &old.spec.cluster_ips);
    let value = q_list(new);
    if new.len() == was.len() {
        for (i, (n, w)) in new.iter().zip(was).enumerate() {
            if n != w {
                e.invalid(&format!("spec.clusterIPs[{i}]"), &value, "may not change once set");
            }
        }
    } else if was.len() > new.len() {
        if new.is_empty() {
            e.invalid("spec.clusterIPs[0]", &value, "primary clusterIP can not be unset");
        }
        if !was.is_empty() && !new.is_empty() && new[0] != was[0] {
            e.invalid("spec.clusterIPs[0]", &value, "may not change once set");
        }
        if new.len() == 1 && svc.spec.ip_family_policy.as_deref() != Some("SingleStack") {
            let policy = svc.spec.ip_family_policy.as_deref().map_or("null".to_string(), q);
            e.invalid(
                "spec.ipFamilyPolicy",
                policy,
                "must be set to 'SingleStack' when releasing the secondary clusterIP",
            );
        }
    } else if !was.is_empty() && new[0] != was[0] {
        e.invalid("spec.clusterIPs[0]", &value, "may not change once set");
    }
}

fn service_errs(e: &mut Errs, svc: &Service, is_update: bool) {
    let spec = &svc.spec;
    // An update does not validate the name again.
    e.meta(&svc.metadata, if is_update { |_: &str| Vec::new() } else { service_name });
    let ty = spec.type_.as_deref().unwrap_or("");
    let headless = spec.cluster_ip.as_deref() == Some("None");
    if spec.ports.is_empty() && !headless && ty != "ExternalName" {
        e.required("spec.ports", "");
    }
    match ty {
        "LoadBalancer" | "NodePort" if headless => {
            e.invalid_str("spec.clusterIPs[0]", "None", &format!("may not be set to 'None' for {ty} services"));
        }
        "ExternalName" => {
            if !spec.cluster_ips.is_empty() {
                e.forbidden("spec.clusterIPs", "may not be set for ExternalName services");
            }
            if !spec.ip_families.is_empty() {
                e.forbidden("spec.ipFamilies", "may not be set for ExternalName services");
            }
            if spec.ip_family_policy.is_some() {
                e.forbidden("spec.ipFamilyPolicy", "may not be set for ExternalName services");
            }
            // A CNAME may end in a dot (fully qualified).
            let name = spec.external_name.as_deref().unwrap_or("");
            let cname = name.strip_suffix('.').unwrap_or(name);
            if cname.is_empty() {
                e.required("spec.externalName", "");
            } else if let Err(m) = names::dns1123_subdomain(cname) {
                e.invalid_str("spec.externalName", cname, &m);
            }
        }
        _ => {}
    }

    let several = spec.ports.len() > 1;
    let mut port_names = HashSet::default();
    for (i, p) in spec.ports.iter().enumerate() {
        let f = |leaf: &str| format!("spec.ports[{i}].{leaf}");
        match p.name.as_deref().unwrap_or("") {
            "" if several => e.required(&f("name"), ""),
            "" => {}
            n => {
                e.dns_label(&f("name"), n);
                if !port_names.insert(n) {
                    e.duplicate(&f("name"), q(n));
                }
            }
        }
        e.port_number(&f("port"), p.port);
        e.protocol(&f("protocol"), p.protocol.as_deref());
        match &p.target_port {
            None => {}
            Some(IntOrString::Int(t)) => e.port_number(&f("targetPort"), *t),
            Some(IntOrString::Str(s)) => {
                for m in names::iana_svc_name_all(s) {
                    e.invalid_str(&f("targetPort"), s, &m);
                }
            }
        }
        if let Some(ap) = p.app_protocol.as_deref() {
            if let Err(m) = names::qualified_name(ap) {
                e.invalid_str(&f("appProtocol"), ap, &m);
            }
        }
    }

    if let Some(sel) = &spec.selector {
        e.labels("spec.selector", sel);
    }

    match spec.session_affinity.as_deref() {
        None | Some("") => e.required("spec.sessionAffinity", ""),
        Some("ClientIP") => {
            const WHEN: &str = "when session affinity type is ClientIP";
            let cfg = spec.session_affinity_config.as_ref();
            match cfg.map(|c| c.client_ip.as_ref().map(|ip| ip.timeout_seconds)) {
                None => e.required("spec.sessionAffinityConfig", WHEN),
                Some(None) => e.required("spec.sessionAffinityConfig.clientIP", WHEN),
                Some(Some(None)) => e.required("spec.sessionAffinityConfig.clientIP.timeoutSeconds", WHEN),
                Some(Some(Some(t))) => {
                    if !(1..=86400).contains(&t) {
                        e.invalid(
                            "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
                            t,
                            "must be greater than 0 and less than 86400",
                        );
                    }
                }
            }
        }
        Some("None") => {
            if spec.session_affinity_config.is_some() {
                e.forbidden("spec.sessionAffinityConfig", "must not be set when session affinity is None");
            }
        }
        Some(s) => e.unsupported("spec.sessionAffinity", s, &["ClientIP", "None"]),
    }

    cluster_ips_related(e, svc);

    for (i, ip) in spec.external_ips.iter().enumerate() {
        e.non_special_ip(&format!("spec.externalIPs[{i}]"), ip);
    }

    match ty {
        "" => e.required("spec.type", ""),
        t if SUPPORTED_TYPES.contains(&t) => {}
        t => e.unsupported("spec.type", t, SUPPORTED_TYPES),
    }
    if ty == "ClusterIP" {
        for (i, p) in spec.ports.iter().enumerate() {
            if p.node_port.is_some_and(|n| n != 0) {
                e.forbidden(&format!("spec.ports[{i}].nodePort"), "may not be used when `type` is 'ClusterIP'");
            }
        }
    }
    let mut node_ports = HashSet::default();
    for (i, p) in spec.ports.iter().enumerate() {
        let Some(np) = p.node_port.filter(|&n| n != 0) else { continue };
        // The API server allocates before it validates, so a nodePort named twice for
        // one protocol fails in its allocator, with the allocator's text.
        if !node_ports.insert((np, p.protocol.clone())) {
            e.invalid(&format!("spec.ports[{i}].nodePort"), np, "provided port is already allocated");
        }
    }
    let mut port_protos = HashSet::default();
    for (i, p) in spec.ports.iter().enumerate() {
        let proto = p.protocol.clone().unwrap_or_default();
        if !port_protos.insert((p.port, proto.clone())) {
            e.duplicate(&format!("spec.ports[{i}]"), go_port_key(p.port, &proto));
        }
    }

    let lb = ty == "LoadBalancer";
    if !spec.load_balancer_source_ranges.is_empty() {
        // Sic: the API server's path has a capital L here.
        let field = "spec.LoadBalancerSourceRanges";
        if !lb {
            e.forbidden(field, "may only be used when `type` is 'LoadBalancer'");
        }
        for (i, r) in spec.load_balancer_source_ranges.iter().enumerate() {
            let v = r.trim();
            if v.parse::<ipnet::IpNet>().is_err() {
                e.invalid_str(
                    &format!("{field}[{i}]"),
                    v,
                    "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
                );
            }
        }
    }
    if spec.allocate_load_balancer_node_ports.is_some() && !lb {
        e.forbidden("spec.allocateLoadBalancerNodePorts", "may only be used when `type` is 'LoadBalancer'");
    }
    if lb && spec.allocate_load_balancer_node_ports.is_none() {
        e.required("allocateLoadBalancerNodePorts", "");
    }
    if let Some(class) = spec.load_balancer_class.as_deref() {
        if !lb {
            e.forbidden("spec.loadBalancerClass", "may only be used when `type` is 'LoadBalancer'");
        } else if let Err(m) = names::qualified_name(class) {
            e.invalid_str("spec.loadBalancerClass", class, &m);
        }
    }

    // External traffic policy and the health-check port.
    let externally_accessible =
        matches!(ty, "NodePort" | "LoadBalancer") || (ty == "ClusterIP" && !spec.external_ips.is_empty());
    let etp = spec.external_traffic_policy.as_deref().unwrap_or("");
    if !externally_accessible {
        if !etp.is_empty() {
            e.invalid_str("spec.externalTrafficPolicy", etp, "may only be set for externally-accessible services");
        }
    } else if etp.is_empty() {
        e.required("spec.externalTrafficPolicy", "");
    } else if !matches!(etp, "Cluster" | "Local") {
        e.unsupported("spec.externalTrafficPolicy", etp, &["Cluster", "Local"]);
    }
    let hc = spec.health_check_node_port.unwrap_or(0);
    if !(lb && etp == "Local") {
        if hc != 0 {
            e.invalid(
                "spec.healthCheckNodePort",
                hc,
                "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
            );
        }
    } else if hc != 0 {
        // 0 (absent) is allocated after validation.
        e.port_number("spec.healthCheckNodePort", hc);
    }

    match spec.internal_traffic_policy.as_deref() {
        None if matches!(ty, "NodePort" | "LoadBalancer" | "ClusterIP") => {
            e.required("spec.internalTrafficPolicy", "");
        }
        None | Some("Cluster" | "Local") => {}
        Some(p) => e.unsupported("spec.internalTrafficPolicy", p, &["Cluster", "Local"]),
    }
    if let Some(td) = spec.traffic_distribution.as_deref() {
        // In the API server's order (not sorted), as its message lists them.
        const TD: &[&str] = &["PreferClose", "PreferSameZone", "PreferSameNode"];
        if !TD.contains(&td) {
            e.unsupported("spec.trafficDistribution", td, TD);
        }
    }

    // LoadBalancer ingress as the cluster's load-balancer controller reported it: the IPs
    // this node answers on for the service (`status` of other types is ignored).
    if lb {
        if let Some(st) = &svc.status {
            for (i, ing) in st.load_balancer.ingress.iter().enumerate() {
                if let Some(ip) = ing.ip.as_deref() {
                    if let Err(m) = names::parse_ip(ip) {
                        e.invalid_str(&format!("status.loadBalancer.ingress[{i}].ip"), ip, &m);
                    }
                }
            }
        }
    }
}

/// `ValidateServiceClusterIPsRelatedFields`.
fn cluster_ips_related(e: &mut Errs, svc: &Service) {
    let spec = &svc.spec;
    if spec.type_.as_deref() == Some("ExternalName") {
        return;
    }
    let cip = spec.cluster_ip.as_deref().unwrap_or("");
    let ips = &spec.cluster_ips;
    if !cip.is_empty() {
        if ips.is_empty() {
            e.required("spec.clusterIPs", "");
        } else if ips[0] != cip {
            e.invalid("spec.clusterIPs", q_list(ips), "first value must match `clusterIP`");
        }
    } else if !ips.is_empty() {
        e.invalid("spec.clusterIPs", q_list(ips), "must be empty when `clusterIP` is not specified");
    }
    let mut seen = HashSet::default();
    for (i, f) in spec.ip_families.iter().enumerate() {
        let field = format!("spec.ipFamilies[{i}]");
        if !matches!(f.as_str(), "IPv4" | "IPv6") {
            e.unsupported(&field, f, &["IPv4", "IPv6"]);
        }
        if !seen.insert(f.as_str()) {
            e.duplicate(&field, q(f));
        }
    }
    if let Some(p) = spec.ip_family_policy.as_deref() {
        const POLICIES: &[&str] = &["PreferDualStack", "RequireDualStack", "SingleStack"];
        if !POLICIES.contains(&p) {
            e.unsupported("spec.ipFamilyPolicy", p, POLICIES);
        }
    }
    let mut bad_ips = false;
    let mut parsed = Vec::new();
    for (i, ip) in ips.iter().enumerate() {
        if i == 0 && ip == "None" {
            if ips.len() > 1 {
                bad_ips = true;
                e.invalid("spec.clusterIPs", q_list(ips), "'None' must be the first and only value");
            }
            continue;
        }
        match names::parse_ip(ip) {
            Ok(a) => parsed.push(a),
            Err(m) => {
                bad_ips = true;
                e.invalid_str(&format!("spec.clusterIPs[{i}]"), ip, &m);
            }
        }
    }
    if ips.len() > 2 {
        e.invalid("spec.clusterIPs", q_list(ips), "may only hold up to 2 values");
    }
    if bad_ips {
        return;
    }
    if ips.len() > 1 && !(parsed.len() == 2 && parsed[0].is_ipv4() != parsed[1].is_ipv4()) {
        e.invalid("spec.clusterIPs", q_list(ips), "may specify no more than one IP for each IP family");
    }
    if cip != "None" {
        for (i, (ip, fam)) in parsed.iter().zip(&spec.ip_families).enumerate() {
            let want_v4 = fam == "IPv4";
            if (fam == "IPv4" || fam == "IPv6") && ip.is_ipv4() != want_v4 {
                e.invalid_str(
                    &format!("spec.clusterIPs[{i}]"),
                    &ips[i],
                    &format!("expected an {fam} value as indicated by `ipFamilies[{i}]`"),
                );
            }
        }
    }
}

/// Validates a core/v1 Endpoints object (`ValidateEndpoints`).
pub fn validate_endpoints(ep: &Endpoints) -> Result<(), ApiError> {
    let mut e = Errs::new("Endpoints", &ep.metadata.name);
    e.meta(&ep.metadata, subdomain);
    for (s, subset) in ep.subsets.iter().enumerate() {
        if subset.addresses.is_empty() && subset.not_ready_addresses.is_empty() {
            e.required(&format!("subsets[{s}]"), "must specify `addresses` or `notReadyAddresses`");
        }
        let addr_lists = [("addresses", &subset.addresses), ("notReadyAddresses", &subset.not_ready_addresses)];
        for (list, addrs) in addr_lists {
            for (a, addr) in addrs.iter().enumerate() {
                endpoint_address(&mut e, &format!("subsets[{s}].{list}[{a}]"), addr);
            }
        }
        let several = subset.ports.len() > 1;
        for (i, p) in subset.ports.iter().enumerate() {
            let f = |leaf: &str| format!("subsets[{s}].ports[{i}].{leaf}");
            match p.name.as_deref().unwrap_or("") {
                "" if several => e.required(&f("name"), ""),
                "" => {}
                n => e.dns_label(&f("name"), n),
            }
            e.port_number(&f("port"), p.port.unwrap_or(0));
            e.protocol(&f("protocol"), Some(p.protocol.as_deref().unwrap_or("TCP")));
        }
    }
    e.finish()
}

fn endpoint_address(e: &mut Errs, field: &str, a: &EndpointAddress) {
    let ip_field = format!("{field}.ip");
    e.non_special_ip(&ip_field, &a.ip);
    if names::parse_ip(&a.ip).is_err() {
        // `ValidateEndpointIP` parses it again and says so again, more briefly.
        e.invalid_str(&ip_field, &a.ip, "must be a valid IP address");
    }
    if let Some(h) = a.hostname.as_deref().filter(|h| !h.is_empty()) {
        e.dns_label(&format!("{field}.hostname"), h);
    }
    if let Some(n) = a.node_name.as_deref().filter(|n| !n.is_empty()) {
        if let Err(m) = names::dns1123_subdomain(n) {
            e.invalid_str(&format!("{field}.nodeName"), n, &m);
        }
    }
}

/// EndpointSlice ports (`validatePorts`): names unique (the empty name counts), no
/// range check on the number, protocol TCP when absent.
fn slice_ports(e: &mut Errs, ports: &[EndpointPort]) {
    if ports.len() > 100 {
        e.too_many("ports", ports.len(), 100);
        return;
    }
    let mut seen = HashSet::default();
    for (i, p) in ports.iter().enumerate() {
        let f = |leaf: &str| format!("ports[{i}].{leaf}");
        let n = p.name.as_deref().unwrap_or("");
        if !n.is_empty() {
            e.dns_label(&f("name"), n);
        }
        if !seen.insert(n) {
            e.duplicate(&f("name"), q(n));
        }
        e.protocol(&f("protocol"), Some(p.protocol.as_deref().unwrap_or("TCP")));
        if let Some(ap) = p.app_protocol.as_deref() {
            if let Err(m) = names::qualified_name(ap) {
                e.invalid_str(&f("appProtocol"), ap, &m);
            }
        }
    }
}

/// Validates a discovery.k8s.io/v1 EndpointSlice (`ValidateEndpointSlice`).
pub fn validate_endpoint_slice(es: &EndpointSlice) -> Result<(), ApiError> {
    let mut e = Errs::new("EndpointSlice.discovery.k8s.io", &es.metadata.name);
    e.meta(&es.metadata, subdomain);
    let v6 = match es.address_type.as_str() {
        "IPv4" => Some(false),
        "IPv6" => Some(true),
        "" => {
            e.required("addressType", "");
            None
        }
        "FQDN" => {
            e.push(
                "addressType: Unsupported value: \"FQDN\": supported values: \"IPv4\", \"IPv6\" (nodeportd forwards to addresses and cannot DNAT to names)".into(),
            );
            None
        }
        t => {
            e.unsupported("addressType", t, &["FQDN", "IPv4", "IPv6"]);
            None
        }
    };
    if es.endpoints.len() > 1000 {
        e.too_many("endpoints", es.endpoints.len(), 1000);
    } else {
        for (i, ep) in es.endpoints.iter().enumerate() {
            let f = format!("endpoints[{i}].addresses");
            if ep.addresses.is_empty() {
                e.required(&f, "must contain at least 1 address");
            } else if ep.addresses.len() > 100 {
                e.too_many(&f, ep.addresses.len(), 100);
            }
            for (a, addr) in ep.addresses.iter().enumerate() {
                let af = format!("{f}[{a}]");
                let Some(v6) = v6 else { continue };
                match names::parse_ip(addr) {
                    Err(m) => e.invalid_str(&af, addr, &m),
                    Ok(ip) => {
                        // The family mismatch names the list, the other checks the address.
                        if ip.is_ipv6() != v6 {
                            let m = if v6 { "must be an IPv6 address" } else { "must be an IPv4 address" };
                            e.invalid_str(&f, addr, m);
                        }
                        e.non_special_ip(&af, addr);
                    }
                }
            }
            if let Some(n) = ep.node_name.as_deref().filter(|n| !n.is_empty()) {
                if let Err(m) = names::dns1123_subdomain(n) {
                    e.invalid_str(&format!("endpoints[{i}].nodeName"), n, &m);
                }
            }
            if let Some(h) = ep.hostname.as_deref() {
                e.dns_label(&format!("endpoints[{i}].hostname"), h);
            }
        }
    }
    slice_ports(&mut e, &es.ports);
    e.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::strategy::prepare_service;
    use crate::model::{ClientIpConfig, EndpointSubset, ServicePort, SessionAffinityConfig, SliceEndpoint};

    fn svc(name: &str) -> Service {
        let mut s = Service::default();
        s.metadata.name = name.into();
        s.spec.ports = vec![ServicePort { port: 80, ..Default::default() }];
        s
    }
    fn port(name: &str, port: i64) -> ServicePort {
        ServicePort { name: Some(name.into()), port, ..Default::default() }
    }
    /// The error a create of `s` gets (defaulted first, as the API server does).
    fn err(s: &Service) -> String {
        validate_service_create(s).expect_err("should be refused").message
    }
    fn ok(s: &Service) {
        validate_service_create(s).unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn minimal_service_is_valid() {
        ok(&svc("web"));
    }

    #[test]
    fn port_out_of_range_reads_like_the_api_server() {
        let mut s = svc("web");
        s.spec.ports[0].port = 65536;
        s.spec.ports[0].target_port = Some(IntOrString::Int(8080));
        assert_eq!(
            err(&s),
            "Service \"web\" is invalid: spec.ports[0].port: Invalid value: 65536: must be between 1 and 65535, inclusive"
        );
    }

    #[test]
    fn several_errors_are_listed_in_brackets() {
        // port 0 defaults targetPort to 0: both are reported, as the API server does.
        let mut s = svc("web");
        s.spec.ports[0].port = 0;
        assert_eq!(
            err(&s),
            "Service \"web\" is invalid: [spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive, spec.ports[0].targetPort: Invalid value: 0: must be between 1 and 65535, inclusive]"
        );
    }

    #[test]
    fn unknown_type_lists_supported_values() {
        let mut s = svc("web");
        s.spec.type_ = Some("Foo".into());
        assert_eq!(
            err(&s),
            "Service \"web\" is invalid: spec.type: Unsupported value: \"Foo\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\""
        );
    }

    #[test]
    fn service_names_are_rfc1123_labels() {
        ok(&svc("1web"));
        assert_eq!(
            err(&svc("Web")),
            "Service \"Web\" is invalid: metadata.name: Invalid value: \"Web\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        );
        assert_eq!(
            err(&svc("web.example")),
            "Service \"web.example\" is invalid: metadata.name: Invalid value: \"web.example\": must not contain dots"
        );
        assert!(err(&svc("")).contains("metadata.name: Required value: name or generateName is required"));
        assert!(err(&svc(&"a".repeat(64))).contains("must be no more than 63 characters"));
    }

    #[test]
    fn label_lengths_count_bytes_names_count_characters() {
        // kube-apiserver 1.36's texts: names are DNS labels ("characters"), label keys
        // and values go through apimachinery's content checks ("bytes").
        let long = "a".repeat(64);
        let mut s = svc(&long);
        s.spec.selector = Some([("app".to_string(), long.clone())].into());
        assert_eq!(
            err(&s),
            format!("Service \"{long}\" is invalid: [metadata.name: Invalid value: \"{long}\": must be no more than 63 characters, spec.selector: Invalid value: \"{long}\": must be no more than 63 bytes]")
        );
        let k = "k".repeat(64);
        let mut s = svc("zz");
        s.spec.selector = Some([(k.clone(), "v".to_string())].into());
        assert_eq!(
            err(&s),
            format!("Service \"zz\" is invalid: spec.selector: Invalid value: \"{k}\": name part must be no more than 63 bytes")
        );
        let mut s = svc("zz");
        s.spec.selector = Some([("/x".to_string(), "v".to_string())].into());
        assert_eq!(
            err(&s),
            "Service \"zz\" is invalid: spec.selector: Invalid value: \"/x\": prefix part must be non-empty"
        );
    }

    #[test]
    fn namespace_must_be_dns1123_label() {
        let mut s = svc("web");
        s.metadata.namespace = Some("Kube_System".into());
        assert!(err(&s).contains("metadata.namespace: Invalid value: \"Kube_System\": a lowercase RFC 1123 label"));
        s.metadata.namespace = Some("kube-system".into());
        ok(&s);
    }

    #[test]
    fn ports_required_except_headless_and_external_name() {
        let mut s = svc("web");
        s.spec.ports.clear();
        assert_eq!(err(&s), "Service \"web\" is invalid: spec.ports: Required value");
        s.spec.cluster_ip = Some("None".into());
        ok(&s);
        let mut e = svc("ext");
        e.spec.ports.clear();
        e.spec.type_ = Some("ExternalName".into());
        e.spec.external_name = Some("db.example.com".into());
        ok(&e);
    }

    #[test]
    fn protocol_must_be_tcp_udp_or_sctp() {
        let mut s = svc("web");
        s.spec.ports[0].protocol = Some("ICMP".into());
        assert!(err(&s).contains(
            "spec.ports[0].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\""
        ));
        s.spec.ports[0].protocol = Some("SCTP".into());
        ok(&s);
    }

    #[test]
    fn several_ports_need_unique_names() {
        let mut s = svc("web");
        s.spec.ports = vec![port("http", 80), ServicePort { port: 443, ..Default::default() }];
        assert!(err(&s).contains("spec.ports[1].name: Required value"));
        s.spec.ports = vec![port("http", 80), port("http", 443)];
        assert!(err(&s).contains("spec.ports[1].name: Duplicate value: \"http\""));
        s.spec.ports = vec![port("http", 80), port("HTTPS", 443)];
        assert!(err(&s).contains("spec.ports[1].name: Invalid value: \"HTTPS\""));
        // kubectl create service names ports like this.
        s.spec.ports = vec![port("80-8080", 80), port("443-8443", 443)];
        ok(&s);
    }

    #[test]
    fn same_port_and_protocol_twice_is_a_duplicate() {
        let mut s = svc("dns");
        s.spec.ports = vec![port("a", 53), port("b", 53)];
        assert_eq!(
            err(&s),
            "Service \"dns\" is invalid: spec.ports[1]: Duplicate value: {\"Name\":\"\",\"Protocol\":\"TCP\",\"AppProtocol\":null,\"Port\":53,\"TargetPort\":0,\"NodePort\":0}"
        );
        s.spec.ports[1].protocol = Some("UDP".into());
        ok(&s);
    }

    #[test]
    fn target_port_number_or_iana_name() {
        let mut s = svc("web");
        s.spec.ports[0].target_port = Some(IntOrString::Int(70000));
        assert!(err(&s).contains("spec.ports[0].targetPort: Invalid value: 70000: must be between 1 and 65535"));
        s.spec.ports[0].target_port = Some(IntOrString::Str("8080".into()));
        assert!(err(&s).contains("spec.ports[0].targetPort: Invalid value: \"8080\": must contain at least one letter"));
        s.spec.ports[0].target_port = Some(IntOrString::Str("very-long-port-name".into()));
        assert!(err(&s).contains("must be no more than 15 characters"));
        s.spec.ports[0].target_port = Some(IntOrString::Str("http".into()));
        ok(&s);
        // 0 and "" default to `port`.
        s.spec.ports[0].target_port = Some(IntOrString::Int(0));
        ok(&s);
    }

    #[test]
    fn node_port_forbidden_on_cluster_ip_and_zero_means_allocate() {
        let mut s = svc("web");
        s.spec.ports[0].node_port = Some(30080);
        assert_eq!(
            err(&s),
            "Service \"web\" is invalid: spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"
        );
        s.spec.ports[0].node_port = Some(0);
        ok(&s);
        s.spec.type_ = Some("NodePort".into());
        ok(&s);
        // The range is the allocator's to check, as in the API server.
        s.spec.ports[0].node_port = Some(70000);
        ok(&s);
    }

    #[test]
    fn duplicate_node_port_within_a_service() {
        let mut s = svc("web");
        s.spec.type_ = Some("NodePort".into());
        s.spec.ports = vec![port("a", 80), port("b", 81)];
        s.spec.ports[0].node_port = Some(30080);
        s.spec.ports[1].node_port = Some(30080);
        // kube-apiserver 1.36: its allocator refuses the second one before validation.
        assert_eq!(
            err(&s),
            "Service \"web\" is invalid: spec.ports[1].nodePort: Invalid value: 30080: provided port is already allocated"
        );
        s.spec.ports[1].protocol = Some("UDP".into());
        ok(&s);
    }

    #[test]
    fn cluster_ip_formats() {
        let mut s = svc("web");
        s.spec.cluster_ip = Some("10.96.0.300".into());
        assert_eq!(
            err(&s),
            "Service \"web\" is invalid: spec.clusterIPs[0]: Invalid value: \"10.96.0.300\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
        );
        s.spec.cluster_ip = Some("10.96.0.10".into());
        ok(&s);
        s.spec.cluster_ips = vec!["10.96.0.11".into()];
        assert!(
            err(&s).contains("spec.clusterIPs: Invalid value: [\"10.96.0.11\"]: first value must match `clusterIP`")
        );
        s.spec.cluster_ips = vec!["10.96.0.10".into(), "10.96.0.12".into()];
        assert!(err(&s).contains(
            "spec.clusterIPs: Invalid value: [\"10.96.0.10\",\"10.96.0.12\"]: may specify no more than one IP for each IP family"
        ));
        s.spec.cluster_ips = vec!["10.96.0.10".into(), "fd00::10".into()];
        s.spec.ip_family_policy = Some("RequireDualStack".into());
        ok(&s);
        s.spec.cluster_ips.push("fd00::11".into());
        assert!(err(&s).contains("may only hold up to 2 values"));
    }

    #[test]
    fn cluster_ips_without_cluster_ip_are_refused() {
        let mut s = svc("web");
        s.spec.cluster_ips = vec!["10.96.0.10".into()];
        assert_eq!(
            err(&s),
            "Service \"web\" is invalid: spec.clusterIPs: Invalid value: [\"10.96.0.10\"]: must be empty when `clusterIP` is not specified"
        );
    }

    #[test]
    fn headless_rules() {
        let mut s = svc("web");
        s.spec.cluster_ip = Some("None".into());
        s.spec.cluster_ips = vec!["None".into()];
        ok(&s);
        // externalIPs on a headless Service: accepted, as by the API server.
        s.spec.external_ips = vec!["198.18.0.10".into()];
        ok(&s);
        s.spec.external_ips.clear();
        s.spec.type_ = Some("NodePort".into());
        assert!(err(&s)
            .contains("spec.clusterIPs[0]: Invalid value: \"None\": may not be set to 'None' for NodePort services"));
        s.spec.type_ = None;
        s.spec.cluster_ips = vec!["None".into(), "fd00::1".into()];
        assert!(err(&s).contains("'None' must be the first and only value"));
    }

    #[test]
    fn ip_families_and_policy() {
        let mut s = svc("web");
        s.spec.ip_families = vec!["IPv5".into()];
        assert!(
            err(&s).contains("spec.ipFamilies[0]: Unsupported value: \"IPv5\": supported values: \"IPv4\", \"IPv6\"")
        );
        s.spec.ip_families = vec!["IPv4".into(), "IPv4".into()];
        assert!(err(&s).contains("spec.ipFamilies[1]: Duplicate value: \"IPv4\""));
        s.spec.ip_families = vec!["IPv4".into(), "IPv6".into()];
        s.spec.ip_family_policy = Some("Dual".into());
        assert!(err(&s).contains(
            "spec.ipFamilyPolicy: Unsupported value: \"Dual\": supported values: \"PreferDualStack\", \"RequireDualStack\", \"SingleStack\""
        ));
        s.spec.ip_family_policy = None;
        s.spec.ip_families = vec!["IPv6".into()];
        s.spec.cluster_ip = Some("10.96.0.1".into());
        assert!(err(&s).contains(
            "spec.clusterIPs[0]: Invalid value: \"10.96.0.1\": expected an IPv6 value as indicated by `ipFamilies[0]`"
        ));
    }

    #[test]
    fn external_traffic_policy_only_for_external_services() {
        let mut s = svc("web");
        s.spec.external_traffic_policy = Some("Local".into());
        assert!(err(&s).contains(
            "spec.externalTrafficPolicy: Invalid value: \"Local\": may only be set for externally-accessible services"
        ));
        s.spec.type_ = Some("NodePort".into());
        ok(&s);
        s.spec.external_traffic_policy = Some("Nearest".into());
        assert!(err(&s).contains("spec.externalTrafficPolicy: Unsupported value: \"Nearest\""));
        s.spec.external_traffic_policy = Some("Cluster".into());
        s.spec.internal_traffic_policy = Some("Everywhere".into());
        assert!(err(&s).contains("spec.internalTrafficPolicy: Unsupported value: \"Everywhere\""));
    }

    #[test]
    fn session_affinity_and_timeout() {
        let mut s = svc("web");
        s.spec.session_affinity = Some("Cookie".into());
        assert!(err(&s)
            .contains("spec.sessionAffinity: Unsupported value: \"Cookie\": supported values: \"ClientIP\", \"None\""));
        s.spec.session_affinity = Some("ClientIP".into());
        s.spec.session_affinity_config =
            Some(SessionAffinityConfig { client_ip: Some(ClientIpConfig { timeout_seconds: Some(0) }) });
        assert!(err(&s).contains("spec.sessionAffinityConfig.clientIP.timeoutSeconds: Invalid value: 0: must be greater than 0 and less than 86400"));
        s.spec.session_affinity_config =
            Some(SessionAffinityConfig { client_ip: Some(ClientIpConfig { timeout_seconds: Some(86401) }) });
        assert!(err(&s).contains("timeoutSeconds: Invalid value: 86401"));
        s.spec.session_affinity_config =
            Some(SessionAffinityConfig { client_ip: Some(ClientIpConfig { timeout_seconds: Some(10800) }) });
        ok(&s);
        // With None the API server's defaulting drops the config: accepted.
        s.spec.session_affinity = Some("None".into());
        ok(&s);
        // Validation proper (after defaulting) still forbids it.
        let mut p = s.clone();
        prepare_service(&mut p, None);
        assert_eq!(p.spec.session_affinity_config, None);
        p.spec.session_affinity_config = s.spec.session_affinity_config.clone();
        assert_eq!(
            validate_service(&p).unwrap_err().message,
            "Service \"web\" is invalid: spec.sessionAffinityConfig: Forbidden: must not be set when session affinity is None"
        );
    }

    #[test]
    fn external_ips_and_source_ranges() {
        let mut s = svc("web");
        s.spec.external_ips = vec!["198.18.0.10".into(), "nope".into()];
        assert!(err(&s).contains(
            "spec.externalIPs[1]: Invalid value: \"nope\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
        ));
        s.spec.external_ips = vec!["127.0.0.1".into()];
        assert!(err(&s).contains("spec.externalIPs[0]: Invalid value: \"127.0.0.1\": may not be in the loopback range"));
        s.spec.external_ips = vec!["198.18.0.10".into()];
        ok(&s);
        s.spec.load_balancer_source_ranges = vec!["198.18.0.0/15".into()];
        assert!(err(&s)
            .contains("spec.LoadBalancerSourceRanges: Forbidden: may only be used when `type` is 'LoadBalancer'"));
        s.spec.type_ = Some("LoadBalancer".into());
        ok(&s);
        s.spec.load_balancer_source_ranges = vec!["198.18.0.0/33".into()];
        assert_eq!(
            err(&s),
            "Service \"web\" is invalid: spec.LoadBalancerSourceRanges[0]: Invalid value: \"198.18.0.0/33\": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"
        );
    }

    #[test]
    fn external_name_rules() {
        let mut s = svc("ext");
        s.spec.type_ = Some("ExternalName".into());
        assert!(err(&s).contains("spec.externalName: Required value"));
        s.spec.external_name = Some("DB.example".into());
        assert!(err(&s).contains("spec.externalName: Invalid value: \"DB.example\""));
        s.spec.external_name = Some("db.example.com.".into());
        ok(&s);
        s.spec.cluster_ip = Some("10.96.0.1".into());
        assert!(err(&s).contains("spec.clusterIPs: Forbidden: may not be set for ExternalName services"));
        // externalName on a ClusterIP Service: accepted and kept, as by the API server.
        let mut c = svc("web");
        c.spec.external_name = Some("db.example.com".into());
        ok(&c);
    }

    #[test]
    fn load_balancer_only_fields() {
        let mut s = svc("web");
        s.spec.type_ = Some("NodePort".into());
        s.spec.health_check_node_port = Some(31000);
        assert!(err(&s).contains("spec.healthCheckNodePort: Invalid value: 31000: may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"));
        s.spec.type_ = Some("LoadBalancer".into());
        s.spec.external_traffic_policy = Some("Local".into());
        ok(&s);
        s.spec.health_check_node_port = Some(0);
        ok(&s);
        s.spec.health_check_node_port = Some(70000);
        assert!(err(&s).contains("spec.healthCheckNodePort: Invalid value: 70000: must be between 1 and 65535"));
        s.spec.health_check_node_port = None;
        s.spec.type_ = Some("NodePort".into());
        s.spec.allocate_load_balancer_node_ports = Some(false);
        assert!(err(&s).contains("spec.allocateLoadBalancerNodePorts: Forbidden"));
        s.spec.allocate_load_balancer_node_ports = None;
        s.spec.load_balancer_class = Some("example.com/lb".into());
        assert!(err(&s).contains("spec.loadBalancerClass: Forbidden"));
        s.spec.type_ = Some("LoadBalancer".into());
        ok(&s);
        s.spec.load_balancer_class = Some("-bad".into());
        assert!(err(&s).contains("spec.loadBalancerClass: Invalid value: \"-bad\""));
        s.spec.load_balancer_class = None;
        // Not validated by the API server: accepted and stored.
        s.spec.load_balancer_ip = Some("198.18.0.300".into());
        ok(&s);
        // 1.36 no longer refuses the kubelet's port on a LoadBalancer.
        s.spec.ports[0].port = 10250;
        ok(&s);
    }

    #[test]
    fn selector_and_labels_are_label_syntax() {
        let mut s = svc("web");
        s.spec.selector = Some([("app".to_string(), "web server".to_string())].into());
        assert!(err(&s).contains("spec.selector: Invalid value: \"web server\": a valid label"));
        s.spec.selector = Some([("app.kubernetes.io/name".to_string(), "web".to_string())].into());
        ok(&s);
        s.metadata.labels = [("-bad".to_string(), "x".to_string())].into();
        assert!(err(&s).contains("metadata.labels: Invalid value: \"-bad\""));
    }

    #[test]
    fn traffic_distribution_values() {
        let mut s = svc("web");
        s.spec.traffic_distribution = Some("PreferClose".into());
        ok(&s);
        s.spec.traffic_distribution = Some("Anywhere".into());
        assert_eq!(
            err(&s),
            "Service \"web\" is invalid: spec.trafficDistribution: Unsupported value: \"Anywhere\": supported values: \"PreferClose\", \"PreferSameZone\", \"PreferSameNode\""
        );
    }

    #[test]
    fn defaults_are_the_api_servers() {
        let mut s = svc("web");
        s.spec.type_ = Some("LoadBalancer".into());
        s.spec.session_affinity = Some("ClientIP".into());
        prepare_service(&mut s, None);
        assert_eq!(s.spec.type_.as_deref(), Some("LoadBalancer"));
        assert_eq!(s.spec.allocate_load_balancer_node_ports, Some(true));
        assert_eq!(
            s.spec.session_affinity_config,
            Some(SessionAffinityConfig { client_ip: Some(ClientIpConfig { timeout_seconds: Some(10800) }) })
        );
        assert_eq!(s.spec.external_traffic_policy.as_deref(), Some("Cluster"));
        assert_eq!(s.spec.internal_traffic_policy.as_deref(), Some("Cluster"));
        assert_eq!(s.spec.ports[0].protocol.as_deref(), Some("TCP"));
        assert_eq!(s.spec.ports[0].target_port, Some(IntOrString::Int(80)));
        let mut c = svc("web");
        prepare_service(&mut c, None);
        assert_eq!(c.spec.type_.as_deref(), Some("ClusterIP"));
        assert_eq!(c.spec.session_affinity.as_deref(), Some("None"));
        assert_eq!(c.spec.external_traffic_policy, None);
        assert_eq!(c.spec.allocate_load_balancer_node_ports, None);
    }

    fn endpoints(name: &str, ip: &str, port: i64) -> Endpoints {
        let mut e = Endpoints::default();
        e.metadata.name = name.into();
        e.subsets = vec![EndpointSubset {
            addresses: vec![EndpointAddress { ip: ip.into(), ..Default::default() }],
            ports: vec![EndpointPort { port: Some(port), ..Default::default() }],
            ..Default::default()
        }];
        e
    }

    #[test]
    fn endpoints_rules() {
        validate_endpoints(&endpoints("web", "198.18.1.2", 8080)).unwrap();
        let e = validate_endpoints(&endpoints("web", "198.18.1.300", 8080)).unwrap_err().message;
        assert_eq!(
            e,
            "Endpoints \"web\" is invalid: [subsets[0].addresses[0].ip: Invalid value: \"198.18.1.300\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff), subsets[0].addresses[0].ip: Invalid value: \"198.18.1.300\": must be a valid IP address]"
        );
        let e = validate_endpoints(&endpoints("web", "198.18.1.2", 0)).unwrap_err().message;
        assert!(e.contains("subsets[0].ports[0].port: Invalid value: 0"));
        let e = validate_endpoints(&endpoints("Web", "198.18.1.2", 80)).unwrap_err().message;
        assert!(e.contains("metadata.name: Invalid value: \"Web\": a lowercase RFC 1123 subdomain"));
        let mut two = endpoints("web", "198.18.1.2", 80);
        two.subsets[0].ports.push(EndpointPort { port: Some(81), name: Some("b".into()), ..Default::default() });
        assert!(validate_endpoints(&two).unwrap_err().message.contains("subsets[0].ports[0].name: Required value"));
        two.subsets[0].ports[1].protocol = Some("ICMP".into());
        two.subsets[0].ports[0].name = Some("a".into());
        assert!(validate_endpoints(&two)
            .unwrap_err()
            .message
            .contains("subsets[0].ports[1].protocol: Unsupported value: \"ICMP\""));
    }

    fn slice(name: &str, ty: &str, addr: &str) -> EndpointSlice {
        EndpointSlice {
            metadata: crate::model::ObjectMeta { name: name.into(), ..Default::default() },
            address_type: ty.into(),
            endpoints: vec![SliceEndpoint { addresses: vec![addr.into()], ..Default::default() }],
            ports: vec![EndpointPort { name: Some("http".into()), port: Some(8080), ..Default::default() }],
            ..Default::default()
        }
    }

    #[test]
    fn endpoint_slice_rules() {
        validate_endpoint_slice(&slice("web-abc12", "IPv4", "198.18.1.2")).unwrap();
        validate_endpoint_slice(&slice("web-abc12", "IPv6", "2001:db8::2")).unwrap();
        let e = validate_endpoint_slice(&slice("web-abc12", "IPv4", "2001:db8::2")).unwrap_err().message;
        assert_eq!(
            e,
            "EndpointSlice.discovery.k8s.io \"web-abc12\" is invalid: endpoints[0].addresses: Invalid value: \"2001:db8::2\": must be an IPv4 address"
        );
        // Both checks run: the family names the list, the special range the address.
        let e = validate_endpoint_slice(&slice("zz", "IPv4", "::1")).unwrap_err().message;
        assert_eq!(
            e,
            "EndpointSlice.discovery.k8s.io \"zz\" is invalid: [endpoints[0].addresses: Invalid value: \"::1\": must be an IPv4 address, endpoints[0].addresses[0]: Invalid value: \"::1\": may not be in the loopback range (127.0.0.0/8, ::1/128)]"
        );
        let e = validate_endpoint_slice(&slice("web-abc12", "FQDN", "db.example.com")).unwrap_err().message;
        assert!(e.contains("addressType: Unsupported value: \"FQDN\"") && e.contains("cannot DNAT to names"), "{e}");
        let e = validate_endpoint_slice(&slice("web-abc12", "", "198.18.1.2")).unwrap_err().message;
        assert!(e.contains("addressType: Required value"));
        let mut s = slice("web-abc12", "IPv4", "198.18.1.2");
        s.endpoints[0].addresses.clear();
        assert!(validate_endpoint_slice(&s)
            .unwrap_err()
            .message
            .contains("endpoints[0].addresses: Required value: must contain at least 1 address"));
        // No range check on slice ports (the data plane skips what it cannot use).
        let mut s = slice("web-abc12", "IPv4", "198.18.1.2");
        s.ports[0].port = Some(70000);
        validate_endpoint_slice(&s).unwrap();
        s.ports[0].port = None;
        validate_endpoint_slice(&s).unwrap();
        let mut s = slice("web-abc12", "IPv4", "198.18.1.2");
        s.ports.push(s.ports[0].clone());
        assert!(validate_endpoint_slice(&s).unwrap_err().message.contains("ports[1].name: Duplicate value: \"http\""));
    }
}
