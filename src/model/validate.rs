//! Validation of Services, Endpoints and EndpointSlices as the API server does it.
//!
//! Pure: no I/O, no allocator state (range checks for nodePorts and clusterIPs belong to
//! the allocators). The first error is returned, worded as the API server words it,
//! with the field path and the value.
//!
//! Fields that matter to a cluster but not to a single node are accepted and stored:
//! - `trafficDistribution` (`PreferClose`, `PreferSameZone`, `PreferSameNode`): every
//!   endpoint nodeportd forwards to is equally "close" from the router's point of view.
//! - `loadBalancerClass`, `loadBalancerIP`: no load-balancer controller runs here; the
//!   NodePorts of a LoadBalancer Service are programmed as for any other.
//! - `publishNotReadyAddresses`, `appProtocol`, `selector`: stored; endpoints come
//!   through the API, never from a selector.
//!
//! Refused by name: `addressType: FQDN` EndpointSlices (nodeportd DNATs to addresses and
//! cannot resolve names), and `externalName` on a Service that is not `ExternalName`.

use std::collections::HashSet;
use std::fmt::Display;
use std::net::IpAddr;

use super::names;
use super::{
    ApiError, EndpointAddress, EndpointPort, EndpointSlice, Endpoints, IntOrString, Protocol, Reason, Service,
    ServiceType,
};

const SUPPORTED_TYPES: &[&str] = &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
const SUPPORTED_PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];
const PORT_RANGE: &str = "must be between 1 and 65535, inclusive";

/// A JSON-quoted string, as the API server prints string values (Go's `%q`).
pub(crate) fn q(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

fn q_list(v: &[String]) -> String {
    let items: Vec<String> = v.iter().map(|s| q(s)).collect();
    format!("[{}]", items.join(","))
}

/// Builds errors for one object: `Kind "name" is invalid: field: ...`.
struct Ctx<'a> {
    kind: &'a str,
    name: &'a str,
}

impl Ctx<'_> {
    fn invalid(&self, field: &str, value: impl Display, detail: &str) -> ApiError {
        ApiError::invalid(self.kind, self.name, field, value, detail)
    }
    fn invalid_str(&self, field: &str, value: &str, detail: &str) -> ApiError {
        self.invalid(field, q(value), detail)
    }
    fn unsupported(&self, field: &str, value: &str, supported: &[&str]) -> ApiError {
        ApiError::unsupported(self.kind, self.name, field, q(value), supported)
    }
    fn required(&self, field: &str) -> ApiError {
        ApiError::required(self.kind, self.name, field)
    }
    fn forbidden(&self, field: &str, detail: &str) -> ApiError {
        self.other(field, &format!("Forbidden: {detail}"))
    }
    fn duplicate(&self, field: &str, value: impl Display) -> ApiError {
        self.other(field, &format!("Duplicate value: {value}"))
    }
    fn other(&self, field: &str, rest: &str) -> ApiError {
        ApiError::new(Reason::Invalid, format!("{} {} is invalid: {field}: {rest}", self.kind, q(self.name)))
    }

    fn meta_name(&self, check: fn(&str) -> Result<(), String>) -> Result<(), ApiError> {
        if self.name.is_empty() {
            return Err(self.other("metadata.name", "Required value: name or generateName is required"));
        }
        check(self.name).map_err(|e| self.invalid_str("metadata.name", self.name, &e))
    }

    fn namespace(&self, ns: Option<&str>) -> Result<(), ApiError> {
        match ns {
            None => Ok(()),
            Some(ns) => names::dns1123_label(ns).map_err(|e| self.invalid_str("metadata.namespace", ns, &e)),
        }
    }

    /// Label keys and values, of `metadata.labels` or a selector.
    fn labels(&self, field: &str, labels: &std::collections::BTreeMap<String, String>) -> Result<(), ApiError> {
        for (k, v) in labels {
            names::qualified_name(k).map_err(|e| self.invalid_str(field, k, &e))?;
            names::label_value(v).map_err(|e| self.invalid_str(&format!("{field}[{k}]"), v, &e))?;
        }
        Ok(())
    }

    fn port_number(&self, field: &str, port: i64) -> Result<(), ApiError> {
        if !(1..=65535).contains(&port) {
            return Err(self.invalid(field, port, PORT_RANGE));
        }
        Ok(())
    }

    fn protocol(&self, field: &str, p: Option<&str>) -> Result<Protocol, ApiError> {
        match p {
            None => Ok(Protocol::Tcp),
            Some(s) => Protocol::parse(s).ok_or_else(|| self.unsupported(field, s, SUPPORTED_PROTOCOLS)),
        }
    }
}

fn family(ip: &IpAddr) -> &'static str {
    if ip.is_ipv4() {
        "IPv4"
    } else {
        "IPv6"
    }
}

/// Validates a Service as `kubectl apply` would find it validated by an API server.
pub fn validate_service(svc: &Service) -> Result<(), ApiError> {
    let c = Ctx { kind: "Service", name: &svc.metadata.name };
    let spec = &svc.spec;
    c.meta_name(names::dns1035_label)?;
    c.namespace(svc.metadata.namespace.as_deref())?;
    c.labels("metadata.labels", &svc.metadata.labels)?;
    if let Some(sel) = &spec.selector {
        c.labels("spec.selector", sel)?;
    }

    let ty = match spec.type_.as_deref() {
        None => ServiceType::ClusterIP,
        Some(t) if SUPPORTED_TYPES.contains(&t) => svc.service_type(),
        Some(t) => return Err(c.unsupported("spec.type", t, SUPPORTED_TYPES)),
    };
    let type_name = spec.type_.as_deref().unwrap_or("ClusterIP");

    validate_cluster_ips(&c, svc, ty, type_name)?;
    validate_ports(&c, svc, ty, type_name)?;

    // externalName
    match (ty, spec.external_name.as_deref()) {
        (ServiceType::ExternalName, None) | (ServiceType::ExternalName, Some("")) => {
            return Err(c.required("spec.externalName"));
        }
        (ServiceType::ExternalName, Some(n)) => {
            // The API server accepts a fully qualified name with its trailing dot.
            let bare = n.strip_suffix('.').unwrap_or(n);
            names::dns1123_subdomain(bare).map_err(|e| c.invalid_str("spec.externalName", n, &e))?;
        }
        (_, Some(n)) if !n.is_empty() => {
            return Err(c.invalid_str("spec.externalName", n, "may only be set when `type` is 'ExternalName'"));
        }
        _ => {}
    }

    // LoadBalancer ingress as the cluster's load-balancer controller reported it: the IPs
    // this node answers on for the service (`status` of other types is ignored).
    if ty == ServiceType::LoadBalancer {
        if let Some(st) = &svc.status {
            for (i, ing) in st.load_balancer.ingress.iter().enumerate() {
                if let Some(ip) = ing.ip.as_deref() {
                    if ip.parse::<std::net::IpAddr>().is_err() {
                        let field = format!("status.loadBalancer.ingress[{i}].ip");
                        return Err(c.invalid_str(&field, ip, "must be a valid IP address"));
                    }
                }
            }
        }
    }

    // Traffic policies.
    let externally_accessible = matches!(ty, ServiceType::NodePort | ServiceType::LoadBalancer)
        || (ty == ServiceType::ClusterIP && !spec.external_ips.is_empty());
    let local = match spec.external_traffic_policy.as_deref() {
        None => false,
        Some(p @ ("Cluster" | "Local")) => {
            if !externally_accessible {
                return Err(c.invalid_str(
                    "spec.externalTrafficPolicy",
                    p,
                    "may only be set for externally-accessible services",
                ));
            }
            p == "Local"
        }
        Some(p) => return Err(c.unsupported("spec.externalTrafficPolicy", p, &["Cluster", "Local"])),
    };
    if let Some(p) = spec.internal_traffic_policy.as_deref() {
        if !matches!(p, "Cluster" | "Local") {
            return Err(c.unsupported("spec.internalTrafficPolicy", p, &["Cluster", "Local"]));
        }
    }

    // Session affinity.
    let client_ip = match spec.session_affinity.as_deref() {
        None | Some("None") => false,
        Some("ClientIP") => true,
        Some(s) => return Err(c.unsupported("spec.sessionAffinity", s, &["ClientIP", "None"])),
    };
    if client_ip && ty == ServiceType::ExternalName {
        return Err(c.invalid_str("spec.sessionAffinity", "ClientIP", "may not be set for ExternalName services"));
    }
    if let Some(cfg) = &spec.session_affinity_config {
        if !client_ip {
            return Err(c.forbidden("spec.sessionAffinityConfig", "must not be set when session affinity is None"));
        }
        let field = "spec.sessionAffinityConfig.clientIP.timeoutSeconds";
        if let Some(t) = cfg.client_ip.as_ref().and_then(|ip| ip.timeout_seconds) {
            if !(1..=86400).contains(&t) {
                return Err(c.invalid(field, t, "must be greater than 0 and less than 86400"));
            }
        }
    }

    // Addresses traffic arrives on.
    for (i, ip) in spec.external_ips.iter().enumerate() {
        names::non_special_ip(ip).map_err(|e| c.invalid_str(&format!("spec.externalIPs[{i}]"), ip, &e))?;
    }
    let lb = ty == ServiceType::LoadBalancer;
    for (i, r) in spec.load_balancer_source_ranges.iter().enumerate() {
        if !lb {
            return Err(c.forbidden("spec.loadBalancerSourceRanges", "may only be used when `type` is 'LoadBalancer'"));
        }
        if r.trim().parse::<ipnet::IpNet>().is_err() {
            return Err(c.invalid_str(
                &format!("spec.loadBalancerSourceRanges[{i}]"),
                r,
                "must be a valid CIDR, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            ));
        }
    }
    if let Some(ip) = spec.load_balancer_ip.as_deref().filter(|s| !s.is_empty()) {
        if !lb {
            return Err(c.forbidden("spec.loadBalancerIP", "may only be used when `type` is 'LoadBalancer'"));
        }
        names::parse_ip(ip).map_err(|e| c.invalid_str("spec.loadBalancerIP", ip, &e))?;
    }
    if let Some(class) = spec.load_balancer_class.as_deref() {
        if !lb {
            return Err(c.forbidden("spec.loadBalancerClass", "may only be used when `type` is 'LoadBalancer'"));
        }
        names::qualified_name(class).map_err(|e| c.invalid_str("spec.loadBalancerClass", class, &e))?;
    }
    if spec.allocate_load_balancer_node_ports.is_some() && !lb {
        return Err(c.forbidden("spec.allocateLoadBalancerNodePorts", "may only be used when `type` is 'LoadBalancer'"));
    }
    if let Some(hc) = spec.health_check_node_port.filter(|&p| p != 0) {
        if !(lb && local) {
            return Err(c.invalid(
                "spec.healthCheckNodePort",
                hc,
                "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
            ));
        }
        c.port_number("spec.healthCheckNodePort", hc)?;
    }
    if let Some(td) = spec.traffic_distribution.as_deref() {
        const TD: &[&str] = &["PreferClose", "PreferSameNode", "PreferSameZone"];
        if !TD.contains(&td) {
            return Err(c.unsupported("spec.trafficDistribution", td, TD));
        }
    }
    Ok(())
}

fn validate_cluster_ips(c: &Ctx, svc: &Service, ty: ServiceType, type_name: &str) -> Result<(), ApiError> {
    let spec = &svc.spec;
    let cip = spec.cluster_ip.as_deref().unwrap_or("");
    let ips = &spec.cluster_ips;

    if ty == ServiceType::ExternalName {
        if !cip.is_empty() {
            return Err(c.forbidden("spec.clusterIP", "may not be set for ExternalName services"));
        }
        if !ips.is_empty() {
            return Err(c.forbidden("spec.clusterIPs", "may not be set for ExternalName services"));
        }
        if !spec.ip_families.is_empty() {
            return Err(c.forbidden("spec.ipFamilies", "may not be set for ExternalName services"));
        }
        if spec.ip_family_policy.is_some() {
            return Err(c.forbidden("spec.ipFamilyPolicy", "may not be set for ExternalName services"));
        }
        return Ok(());
    }

    if !cip.is_empty() && !ips.is_empty() && ips[0] != cip {
        return Err(c.invalid("spec.clusterIPs", q_list(ips), "first value must match `clusterIP`"));
    }
    if ips.len() > 2 {
        return Err(c.invalid("spec.clusterIPs", q_list(ips), "may only hold up to 2 values"));
    }
    // clusterIP alone stands for clusterIPs [clusterIP].
    let all: Vec<&str> =
        if ips.is_empty() && !cip.is_empty() { vec![cip] } else { ips.iter().map(String::as_str).collect() };
    let headless = all.first() == Some(&"None");
    let mut families: Vec<&'static str> = Vec::new();
    for (i, ip) in all.iter().enumerate() {
        let field = if ips.is_empty() { "spec.clusterIP".to_string() } else { format!("spec.clusterIPs[{i}]") };
        if *ip == "None" {
            if i > 0 || all.len() > 1 {
                return Err(c.invalid(
                    "spec.clusterIPs",
                    q_list(ips),
                    "must not have more than one value when `None` is specified",
                ));
            }
            if matches!(ty, ServiceType::NodePort | ServiceType::LoadBalancer) {
                return Err(c.invalid_str(&field, ip, &format!("may not be set to 'None' for {type_name} services")));
            }
            continue;
        }
        let addr = names::parse_ip(ip).map_err(|e| c.invalid_str(&field, ip, &e))?;
        let fam = family(&addr);
        if families.contains(&fam) {
            return Err(c.invalid_str(&field, ip, "may specify no more than one IP for each IP family"));
        }
        families.push(fam);
    }

    if spec.ip_families.len() > 2 {
        return Err(c.invalid("spec.ipFamilies", q_list(&spec.ip_families), "may only hold up to 2 values"));
    }
    let mut seen = HashSet::new();
    for (i, f) in spec.ip_families.iter().enumerate() {
        let field = format!("spec.ipFamilies[{i}]");
        if !matches!(f.as_str(), "IPv4" | "IPv6") {
            return Err(c.unsupported(&field, f, &["IPv4", "IPv6"]));
        }
        if !seen.insert(f.as_str()) {
            return Err(c.duplicate(&field, q(f)));
        }
        // A family given for an IP that is given too must agree with it.
        if let Some(fam) = families.get(i) {
            if *fam != f {
                return Err(c.invalid(
                    &format!("spec.clusterIPs[{i}]"),
                    q(all.get(i).copied().unwrap_or("")),
                    &format!("expected an {f} value as indicated by `ipFamilies[{i}]`"),
                ));
            }
        }
    }

    match spec.ip_family_policy.as_deref() {
        None => {
            if families.len() > 1 || spec.ip_families.len() > 1 {
                // The API server defaults to RequireDualStack here; nodeportd reads the absence
                // the same way, so nothing is refused.
            }
        }
        Some("SingleStack") => {
            if families.len() > 1 || spec.ip_families.len() > 1 {
                return Err(c.invalid_str(
                    "spec.ipFamilyPolicy",
                    "SingleStack",
                    "must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified",
                ));
            }
        }
        Some("PreferDualStack" | "RequireDualStack") => {}
        Some(p) => {
            return Err(c.unsupported(
                "spec.ipFamilyPolicy",
                p,
                &["PreferDualStack", "RequireDualStack", "SingleStack"],
            ))
        }
    }
    if headless && !svc.spec.external_ips.is_empty() {
        return Err(c.forbidden("spec.externalIPs", "may not be set when `clusterIP` is 'None'"));
    }
    Ok(())
}

fn validate_ports(c: &Ctx, svc: &Service, ty: ServiceType, type_name: &str) -> Result<(), ApiError> {
    let ports = &svc.spec.ports;
    if ports.is_empty() && !(svc.is_headless() || ty == ServiceType::ExternalName) {
        return Err(c.required("spec.ports"));
    }
    let several = ports.len() > 1;
    let mut names = HashSet::new();
    let mut port_protos = HashSet::new();
    let mut node_ports = HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        let f = |leaf: &str| format!("spec.ports[{i}].{leaf}");
        match p.name.as_deref().filter(|n| !n.is_empty()) {
            None if several => return Err(c.required(&f("name"))),
            None => {}
            Some(n) => {
                names::dns1123_label(n).map_err(|e| c.invalid_str(&f("name"), n, &e))?;
                if !names.insert(n) {
                    return Err(c.duplicate(&f("name"), q(n)));
                }
            }
        }
        c.port_number(&f("port"), p.port)?;
        let proto = c.protocol(&f("protocol"), p.protocol.as_deref())?;
        if !port_protos.insert((p.port, proto)) {
            return Err(c.duplicate(&format!("spec.ports[{i}]"), q(&format!("{}/{}", p.port, proto.as_str()))));
        }
        match &p.target_port {
            // 0 and "" are what the API server defaults to `port`.
            None | Some(IntOrString::Int(0)) => {}
            Some(IntOrString::Int(t)) => c.port_number(&f("targetPort"), *t)?,
            Some(IntOrString::Str(s)) if s.is_empty() => {}
            Some(IntOrString::Str(s)) => {
                names::iana_svc_name(s).map_err(|e| c.invalid_str(&f("targetPort"), s, &e))?;
            }
        }
        if let Some(np) = p.node_port.filter(|&n| n != 0) {
            if matches!(ty, ServiceType::ClusterIP | ServiceType::ExternalName) {
                return Err(c.forbidden(&f("nodePort"), &format!("may not be used when `type` is '{type_name}'")));
            }
            c.port_number(&f("nodePort"), np)?;
            if !node_ports.insert((np, proto)) {
                return Err(c.duplicate(&f("nodePort"), np));
            }
        }
    }
    Ok(())
}

/// Validates a core/v1 Endpoints object.
pub fn validate_endpoints(ep: &Endpoints) -> Result<(), ApiError> {
    let c = Ctx { kind: "Endpoints", name: &ep.metadata.name };
    c.meta_name(names::dns1123_subdomain)?;
    c.namespace(ep.metadata.namespace.as_deref())?;
    c.labels("metadata.labels", &ep.metadata.labels)?;
    for (s, subset) in ep.subsets.iter().enumerate() {
        let addr_lists = [("addresses", &subset.addresses), ("notReadyAddresses", &subset.not_ready_addresses)];
        for (list, addrs) in addr_lists {
            for (a, addr) in addrs.iter().enumerate() {
                endpoint_address(&c, &format!("subsets[{s}].{list}[{a}]"), addr)?;
            }
        }
        validate_endpoint_ports(&c, &format!("subsets[{s}].ports"), &subset.ports, true)?;
    }
    Ok(())
}

fn endpoint_address(c: &Ctx, field: &str, a: &EndpointAddress) -> Result<(), ApiError> {
    names::non_special_ip(&a.ip).map_err(|e| c.invalid_str(&format!("{field}.ip"), &a.ip, &e))?;
    if let Some(h) = a.hostname.as_deref().filter(|h| !h.is_empty()) {
        names::dns1123_label(h).map_err(|e| c.invalid_str(&format!("{field}.hostname"), h, &e))?;
    }
    if let Some(n) = a.node_name.as_deref().filter(|n| !n.is_empty()) {
        names::dns1123_subdomain(n).map_err(|e| c.invalid_str(&format!("{field}.nodeName"), n, &e))?;
    }
    Ok(())
}

/// Endpoints need a name on every port when there are several; an EndpointSlice may leave
/// one unnamed. A port without a number ("all ports" in an EndpointSlice) is refused by
/// name: nodeportd DNATs to one port number per service port.
fn validate_endpoint_ports(c: &Ctx, field: &str, ports: &[EndpointPort], names_required: bool) -> Result<(), ApiError> {
    let several = ports.len() > 1;
    let mut seen = HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        let f = |leaf: &str| format!("{field}[{i}].{leaf}");
        match p.name.as_deref().filter(|n| !n.is_empty()) {
            None if several && names_required => return Err(c.required(&f("name"))),
            None => {
                if !seen.insert("") {
                    return Err(c.duplicate(&f("name"), q("")));
                }
            }
            Some(n) => {
                names::dns1123_label(n).map_err(|e| c.invalid_str(&f("name"), n, &e))?;
                if !seen.insert(n) {
                    return Err(c.duplicate(&f("name"), q(n)));
                }
            }
        }
        match p.port {
            None => {
                return Err(
                    c.other(&f("port"), "Required value: nodeportd forwards to one port number per endpoint port")
                )
            }
            Some(n) => c.port_number(&f("port"), n)?,
        }
        c.protocol(&f("protocol"), p.protocol.as_deref())?;
    }
    Ok(())
}

/// Validates a discovery.k8s.io/v1 EndpointSlice.
pub fn validate_endpoint_slice(es: &EndpointSlice) -> Result<(), ApiError> {
    let c = Ctx { kind: "EndpointSlice", name: &es.metadata.name };
    c.meta_name(names::dns1123_subdomain)?;
    c.namespace(es.metadata.namespace.as_deref())?;
    c.labels("metadata.labels", &es.metadata.labels)?;
    let v6 = match es.address_type.as_str() {
        "IPv4" => false,
        "IPv6" => true,
        "" => return Err(c.required("addressType")),
        "FQDN" => {
            return Err(c.other(
                "addressType",
                "Unsupported value: \"FQDN\": supported values: \"IPv4\", \"IPv6\" (nodeportd forwards to addresses and cannot DNAT to names)",
            ))
        }
        t => return Err(c.unsupported("addressType", t, &["IPv4", "IPv6"])),
    };
    if es.endpoints.len() > 1000 {
        return Err(c.other("endpoints", &format!("Too many: {}: must have at most 1000 items", es.endpoints.len())));
    }
    if es.ports.len() > 100 {
        return Err(c.other("ports", &format!("Too many: {}: must have at most 100 items", es.ports.len())));
    }
    for (i, ep) in es.endpoints.iter().enumerate() {
        let f = format!("endpoints[{i}].addresses");
        if ep.addresses.is_empty() {
            return Err(c.other(&f, "Required value: must contain at least 1 address"));
        }
        if ep.addresses.len() > 100 {
            return Err(c.other(&f, &format!("Too many: {}: must have at most 100 items", ep.addresses.len())));
        }
        for (a, addr) in ep.addresses.iter().enumerate() {
            let af = format!("{f}[{a}]");
            let ip = names::non_special_ip(addr).map_err(|e| c.invalid_str(&af, addr, &e))?;
            if ip.is_ipv6() != v6 {
                let want = if v6 { "must be a valid IPv6 address" } else { "must be a valid IPv4 address" };
                return Err(c.invalid_str(&af, addr, want));
            }
        }
        if let Some(h) = ep.hostname.as_deref().filter(|h| !h.is_empty()) {
            names::dns1123_label(h).map_err(|e| c.invalid_str(&format!("endpoints[{i}].hostname"), h, &e))?;
        }
        if let Some(n) = ep.node_name.as_deref().filter(|n| !n.is_empty()) {
            names::dns1123_subdomain(n).map_err(|e| c.invalid_str(&format!("endpoints[{i}].nodeName"), n, &e))?;
        }
    }
    validate_endpoint_ports(&c, "ports", &es.ports, false)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
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
    fn err(s: &Service) -> String {
        validate_service(s).expect_err("should be refused").message
    }

    #[test]
    fn minimal_service_is_valid() {
        validate_service(&svc("web")).unwrap();
    }

    #[test]
    fn port_out_of_range_reads_like_the_api_server() {
        let mut s = svc("web");
        s.spec.ports[0].port = 0;
        assert_eq!(
            err(&s),
            "Service \"web\" is invalid: spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive"
        );
        s.spec.ports[0].port = 65536;
        assert!(err(&s).contains("spec.ports[0].port: Invalid value: 65536"));
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
    fn service_name_must_be_dns1035() {
        let e = err(&svc("Web"));
        assert!(
            e.starts_with("Service \"Web\" is invalid: metadata.name: Invalid value: \"Web\": a DNS-1035 label"),
            "{e}"
        );
        assert!(err(&svc("1web")).contains("metadata.name: Invalid value: \"1web\""));
        assert!(err(&svc("")).contains("metadata.name: Required value"));
        assert!(err(&svc(&"a".repeat(64))).contains("must be no more than 63 characters"));
    }

    #[test]
    fn namespace_must_be_dns1123_label() {
        let mut s = svc("web");
        s.metadata.namespace = Some("Kube_System".into());
        assert!(err(&s).contains("metadata.namespace: Invalid value: \"Kube_System\": a lowercase RFC 1123 label"));
        s.metadata.namespace = Some("kube-system".into());
        validate_service(&s).unwrap();
    }

    #[test]
    fn ports_required_except_headless_and_external_name() {
        let mut s = svc("web");
        s.spec.ports.clear();
        assert!(err(&s).contains("spec.ports: Required value"));
        s.spec.cluster_ip = Some("None".into());
        validate_service(&s).unwrap();
        let mut e = svc("ext");
        e.spec.ports.clear();
        e.spec.type_ = Some("ExternalName".into());
        e.spec.external_name = Some("db.example.com".into());
        validate_service(&e).unwrap();
    }

    #[test]
    fn protocol_must_be_tcp_udp_or_sctp() {
        let mut s = svc("web");
        s.spec.ports[0].protocol = Some("ICMP".into());
        assert!(err(&s).contains(
            "spec.ports[0].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\""
        ));
        s.spec.ports[0].protocol = Some("SCTP".into());
        validate_service(&s).unwrap();
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
        validate_service(&s).unwrap();
    }

    #[test]
    fn same_port_and_protocol_twice_is_a_duplicate() {
        let mut s = svc("dns");
        s.spec.ports = vec![port("a", 53), port("b", 53)];
        assert!(err(&s).contains("spec.ports[1]: Duplicate value: \"53/TCP\""));
        s.spec.ports[1].protocol = Some("UDP".into());
        validate_service(&s).unwrap();
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
        validate_service(&s).unwrap();
        s.spec.ports[0].target_port = Some(IntOrString::Int(0));
        validate_service(&s).unwrap();
    }

    #[test]
    fn node_port_forbidden_on_cluster_ip() {
        let mut s = svc("web");
        s.spec.ports[0].node_port = Some(30080);
        assert_eq!(
            err(&s),
            "Service \"web\" is invalid: spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"
        );
        s.spec.type_ = Some("NodePort".into());
        validate_service(&s).unwrap();
        s.spec.ports[0].node_port = Some(70000);
        assert!(err(&s).contains("spec.ports[0].nodePort: Invalid value: 70000"));
        // 0 means "allocate one".
        s.spec.ports[0].node_port = Some(0);
        validate_service(&s).unwrap();
    }

    #[test]
    fn duplicate_node_port_within_a_service() {
        let mut s = svc("web");
        s.spec.type_ = Some("NodePort".into());
        s.spec.ports = vec![port("a", 80), port("b", 81)];
        s.spec.ports[0].node_port = Some(30080);
        s.spec.ports[1].node_port = Some(30080);
        assert!(err(&s).contains("spec.ports[1].nodePort: Duplicate value: 30080"));
        s.spec.ports[1].protocol = Some("UDP".into());
        validate_service(&s).unwrap();
    }

    #[test]
    fn cluster_ip_formats() {
        let mut s = svc("web");
        s.spec.cluster_ip = Some("10.96.0.300".into());
        assert!(err(&s).contains("spec.clusterIP: Invalid value: \"10.96.0.300\": must be a valid IP address"));
        s.spec.cluster_ip = Some("10.96.0.10".into());
        validate_service(&s).unwrap();
        s.spec.cluster_ips = vec!["10.96.0.11".into()];
        assert!(
            err(&s).contains("spec.clusterIPs: Invalid value: [\"10.96.0.11\"]: first value must match `clusterIP`")
        );
        s.spec.cluster_ips = vec!["10.96.0.10".into(), "10.96.0.12".into()];
        assert!(err(&s).contains(
            "spec.clusterIPs[1]: Invalid value: \"10.96.0.12\": may specify no more than one IP for each IP family"
        ));
        s.spec.cluster_ips = vec!["10.96.0.10".into(), "fd00::10".into()];
        validate_service(&s).unwrap();
        s.spec.cluster_ips.push("fd00::11".into());
        assert!(err(&s).contains("may only hold up to 2 values"));
    }

    #[test]
    fn headless_rules() {
        let mut s = svc("web");
        s.spec.cluster_ip = Some("None".into());
        s.spec.cluster_ips = vec!["None".into()];
        validate_service(&s).unwrap();
        s.spec.type_ = Some("NodePort".into());
        assert!(err(&s)
            .contains("spec.clusterIPs[0]: Invalid value: \"None\": may not be set to 'None' for NodePort services"));
        s.spec.type_ = None;
        s.spec.cluster_ips = vec!["None".into(), "fd00::1".into()];
        assert!(err(&s).contains("must not have more than one value when `None` is specified"));
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
        s.spec.ip_family_policy = Some("SingleStack".into());
        assert!(err(&s).contains("spec.ipFamilyPolicy: Invalid value: \"SingleStack\""));
        s.spec.ip_family_policy = Some("RequireDualStack".into());
        validate_service(&s).unwrap();
        s.spec.ip_family_policy = Some("Dual".into());
        assert!(err(&s).contains("spec.ipFamilyPolicy: Unsupported value: \"Dual\""));
        s.spec.ip_family_policy = None;
        s.spec.ip_families = vec!["IPv6".into()];
        s.spec.cluster_ip = Some("10.96.0.1".into());
        assert!(err(&s).contains("spec.clusterIPs[0]: Invalid value: \"10.96.0.1\": expected an IPv6 value"));
    }

    #[test]
    fn external_traffic_policy_only_for_external_services() {
        let mut s = svc("web");
        s.spec.external_traffic_policy = Some("Local".into());
        assert!(err(&s).contains(
            "spec.externalTrafficPolicy: Invalid value: \"Local\": may only be set for externally-accessible services"
        ));
        s.spec.type_ = Some("NodePort".into());
        validate_service(&s).unwrap();
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
        assert!(err(&s).contains("spec.sessionAffinityConfig.clientIP.timeoutSeconds: Invalid value: 0"));
        s.spec.session_affinity_config =
            Some(SessionAffinityConfig { client_ip: Some(ClientIpConfig { timeout_seconds: Some(86401) }) });
        assert!(err(&s).contains("timeoutSeconds: Invalid value: 86401"));
        s.spec.session_affinity_config =
            Some(SessionAffinityConfig { client_ip: Some(ClientIpConfig { timeout_seconds: Some(10800) }) });
        validate_service(&s).unwrap();
        s.spec.session_affinity = Some("None".into());
        assert!(err(&s).contains("spec.sessionAffinityConfig: Forbidden"));
    }

    #[test]
    fn external_ips_and_source_ranges() {
        let mut s = svc("web");
        s.spec.external_ips = vec!["198.18.0.10".into(), "nope".into()];
        assert!(err(&s).contains("spec.externalIPs[1]: Invalid value: \"nope\": must be a valid IP address"));
        s.spec.external_ips = vec!["127.0.0.1".into()];
        assert!(err(&s).contains("spec.externalIPs[0]: Invalid value: \"127.0.0.1\": may not be in the loopback range"));
        s.spec.external_ips = vec!["198.18.0.10".into()];
        validate_service(&s).unwrap();
        s.spec.load_balancer_source_ranges = vec!["198.18.0.0/15".into()];
        assert!(err(&s).contains("spec.loadBalancerSourceRanges: Forbidden"));
        s.spec.type_ = Some("LoadBalancer".into());
        validate_service(&s).unwrap();
        s.spec.load_balancer_source_ranges = vec!["198.18.0.0/33".into()];
        assert!(err(&s).contains("spec.loadBalancerSourceRanges[0]: Invalid value: \"198.18.0.0/33\""));
    }

    #[test]
    fn external_name_rules() {
        let mut s = svc("ext");
        s.spec.type_ = Some("ExternalName".into());
        assert!(err(&s).contains("spec.externalName: Required value"));
        s.spec.external_name = Some("DB.example".into());
        assert!(err(&s).contains("spec.externalName: Invalid value: \"DB.example\""));
        s.spec.external_name = Some("db.example.com.".into());
        validate_service(&s).unwrap();
        s.spec.cluster_ip = Some("10.96.0.1".into());
        assert!(err(&s).contains("spec.clusterIP: Forbidden"));
        let mut c = svc("web");
        c.spec.external_name = Some("db.example.com".into());
        assert!(err(&c).contains(
            "spec.externalName: Invalid value: \"db.example.com\": may only be set when `type` is 'ExternalName'"
        ));
    }

    #[test]
    fn load_balancer_only_fields() {
        let mut s = svc("web");
        s.spec.type_ = Some("NodePort".into());
        s.spec.health_check_node_port = Some(31000);
        assert!(err(&s).contains("spec.healthCheckNodePort: Invalid value: 31000: may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"));
        s.spec.type_ = Some("LoadBalancer".into());
        s.spec.external_traffic_policy = Some("Local".into());
        validate_service(&s).unwrap();
        s.spec.health_check_node_port = None;
        s.spec.type_ = Some("NodePort".into());
        s.spec.allocate_load_balancer_node_ports = Some(false);
        assert!(err(&s).contains("spec.allocateLoadBalancerNodePorts: Forbidden"));
        s.spec.allocate_load_balancer_node_ports = None;
        s.spec.load_balancer_class = Some("example.com/lb".into());
        assert!(err(&s).contains("spec.loadBalancerClass: Forbidden"));
        s.spec.type_ = Some("LoadBalancer".into());
        validate_service(&s).unwrap();
        s.spec.load_balancer_class = Some("-bad".into());
        assert!(err(&s).contains("spec.loadBalancerClass: Invalid value: \"-bad\""));
        s.spec.load_balancer_class = None;
        s.spec.load_balancer_ip = Some("198.18.0.300".into());
        assert!(err(&s).contains("spec.loadBalancerIP: Invalid value: \"198.18.0.300\""));
    }

    #[test]
    fn selector_and_labels_are_label_syntax() {
        let mut s = svc("web");
        s.spec.selector = Some([("app".to_string(), "web server".to_string())].into());
        assert!(err(&s).contains("spec.selector[app]: Invalid value: \"web server\": a valid label"));
        s.spec.selector = Some([("app.kubernetes.io/name".to_string(), "web".to_string())].into());
        validate_service(&s).unwrap();
        s.metadata.labels = [("-bad".to_string(), "x".to_string())].into();
        assert!(err(&s).contains("metadata.labels: Invalid value: \"-bad\""));
    }

    #[test]
    fn traffic_distribution_values() {
        let mut s = svc("web");
        s.spec.traffic_distribution = Some("PreferClose".into());
        validate_service(&s).unwrap();
        s.spec.traffic_distribution = Some("Anywhere".into());
        assert!(err(&s).contains("spec.trafficDistribution: Unsupported value: \"Anywhere\""));
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
        assert!(
            e.starts_with("Endpoints \"web\" is invalid: subsets[0].addresses[0].ip: Invalid value: \"198.18.1.300\""),
            "{e}"
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
        assert!(
            e.contains("endpoints[0].addresses[0]: Invalid value: \"2001:db8::2\": must be a valid IPv4 address"),
            "{e}"
        );
        let e = validate_endpoint_slice(&slice("web-abc12", "FQDN", "db.example.com")).unwrap_err().message;
        assert!(e.contains("addressType: Unsupported value: \"FQDN\"") && e.contains("cannot DNAT to names"), "{e}");
        let e = validate_endpoint_slice(&slice("web-abc12", "", "198.18.1.2")).unwrap_err().message;
        assert!(e.contains("addressType: Required value"));
        let mut s = slice("web-abc12", "IPv4", "198.18.1.2");
        s.endpoints[0].addresses.clear();
        assert!(validate_endpoint_slice(&s).unwrap_err().message.contains("endpoints[0].addresses: Required value"));
        let mut s = slice("web-abc12", "IPv4", "198.18.1.2");
        s.ports[0].port = Some(70000);
        assert!(validate_endpoint_slice(&s).unwrap_err().message.contains("ports[0].port: Invalid value: 70000"));
        s.ports[0].port = None;
        assert!(validate_endpoint_slice(&s).unwrap_err().message.contains("ports[0].port: Required value"));
        let mut s = slice("web-abc12", "IPv4", "198.18.1.2");
        s.ports.push(s.ports[0].clone());
        assert!(validate_endpoint_slice(&s).unwrap_err().message.contains("ports[1].name: Duplicate value: \"http\""));
    }
}
