//! Allocation semantics of a Service apply, following the Kubernetes API server:
//!
//! * A `nodePort`, `healthCheckNodePort` or `clusterIP(s)` present on the applied object
//!   is a *static* request: honoured anywhere in the range, or refused.
//! * An update that omits them keeps what the stored object holds (node ports are
//!   matched by port name, or by port number and protocol for unnamed ports); naming a
//!   different nodePort moves it (the old one is released only after success).
//! * Ports with the same `port` number and different protocols share one nodePort.
//! * Type `ClusterIP` and `ExternalName` hold no node ports (a type change releases
//!   them); `ExternalName` holds no cluster IP either. `healthCheckNodePort` exists for
//!   `LoadBalancer` with `externalTrafficPolicy: Local`. `allocateLoadBalancerNodePorts:
//!   false` gives a LoadBalancer no new dynamic node ports (named or kept ones stay).
//! * `clusterIPs` follow `ipFamilyPolicy` (SingleStack by default) and `ipFamilies`
//!   (the first configured family by default); `None` is headless. Once set they may
//!   not change, except that a dual-stack policy can add the second family and going
//!   back to SingleStack drops it.
//!
//! Every value taken is recorded in `Taken` so the caller can undo a failed request.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::{Held, Registry, Taken};
use crate::alloc::AllocError;
use crate::model::{ApiError, IntOrString, Protocol, Reason, Service, ServicePort, ServiceType};

const SINGLE: &str = "SingleStack";
const PREFER: &str = "PreferDualStack";
const REQUIRE: &str = "RequireDualStack";

/// The node port fields an object carries, with their field paths.
pub(super) fn node_port_values(svc: &Service) -> Vec<(String, i64)> {
    let mut out: Vec<(String, i64)> = svc
        .spec
        .ports
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.node_port.map(|v| (format!("spec.ports[{i}].nodePort"), v)))
        .collect();
    if let Some(v) = svc.spec.health_check_node_port {
        out.push(("spec.healthCheckNodePort".into(), v));
    }
    out
}

fn family_name(v4: bool) -> &'static str {
    if v4 {
        "IPv4"
    } else {
        "IPv6"
    }
}

fn json_list(v: &[String]) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

fn forbidden(name: &str, field: &str, detail: &str) -> ApiError {
    ApiError::new(Reason::Invalid, format!("Service \"{name}\" is invalid: {field}: Forbidden: {detail}"))
}

/// Defaults the API server fills in, so objects read back look like Kubernetes'.
fn apply_defaults(svc: &mut Service) {
    let ty = svc.service_type();
    for p in &mut svc.spec.ports {
        if p.protocol.is_none() {
            p.protocol = Some("TCP".into());
        }
        if p.target_port.is_none() && ty != ServiceType::ExternalName {
            p.target_port = Some(IntOrString::Int(p.port));
        }
    }
    if svc.spec.session_affinity.is_none() {
        svc.spec.session_affinity = Some("None".into());
    }
    if ty == ServiceType::ExternalName {
        return;
    }
    if svc.spec.internal_traffic_policy.is_none() {
        svc.spec.internal_traffic_policy = Some("Cluster".into());
    }
    if matches!(ty, ServiceType::NodePort | ServiceType::LoadBalancer) && svc.spec.external_traffic_policy.is_none() {
        svc.spec.external_traffic_policy = Some("Cluster".into());
    }
}

/// The stored port an unchanged port of an update corresponds to.
fn match_old<'a>(old: &'a [ServicePort], p: &ServicePort) -> Option<&'a ServicePort> {
    match p.name.as_deref().filter(|n| !n.is_empty()) {
        Some(n) => old.iter().find(|o| o.name.as_deref() == Some(n)),
        None => old
            .iter()
            .find(|o| o.name.as_deref().is_none_or(str::is_empty) && o.port == p.port && o.proto() == p.proto()),
    }
}

/// Cluster IPs an object carries: `clusterIPs`, else `clusterIP`.
fn carried_ips(svc: &Service) -> Vec<String> {
    if !svc.spec.cluster_ips.is_empty() {
        return svc.spec.cluster_ips.clone();
    }
    svc.spec.cluster_ip.iter().filter(|s| !s.is_empty()).cloned().collect()
}

impl Registry {
    pub(super) fn plan_service(
        &mut self,
        svc: &mut Service,
        old: Option<&Service>,
        prev: &Held,
        taken: &mut Taken,
    ) -> Result<Held, ApiError> {
        apply_defaults(svc);
        let mut held = Held::default();
        if svc.service_type() == ServiceType::ExternalName {
            let req = carried_ips(svc);
            let old_ips = old.map(carried_ips).unwrap_or_default();
            if !req.is_empty() && req != old_ips {
                return Err(ApiError::invalid(
                    "Service",
                    svc.name(),
                    "spec.clusterIPs",
                    json_list(&req),
                    "must be empty when `type` is 'ExternalName'",
                ));
            }
            svc.spec.cluster_ip = None;
            svc.spec.cluster_ips.clear();
            svc.spec.ip_families.clear();
            svc.spec.ip_family_policy = None;
        } else {
            self.plan_cluster_ips(svc, old, prev, taken, &mut held)?;
        }
        self.plan_node_ports(svc, old, prev, taken, &mut held)?;
        self.plan_health_check(svc, old, prev, taken, &mut held)?;
        Ok(held)
    }

    fn plan_cluster_ips(
        &mut self,
        svc: &mut Service,
        old: Option<&Service>,
        prev: &Held,
        taken: &mut Taken,
        held: &mut Held,
    ) -> Result<(), ApiError> {
        let name = svc.name().to_string();
        let invalid =
            |field: &str, value: &str, detail: &str| ApiError::invalid("Service", &name, field, value, detail);
        let old = old.filter(|o| o.service_type() != ServiceType::ExternalName);
        let old_ips = old.map(carried_ips).unwrap_or_default();

        if let (Some(ip), Some(first)) = (svc.spec.cluster_ip.as_deref(), svc.spec.cluster_ips.first()) {
            if !ip.is_empty() && ip != first {
                return Err(invalid(
                    "spec.clusterIPs",
                    &json_list(&svc.spec.cluster_ips),
                    "first value must match `clusterIP`",
                ));
            }
        }
        // As the API server does: an update without `clusterIPs` whose `clusterIP` is
        // absent or the stored primary keeps all stored IPs (the secondary included).
        let inherit = svc.spec.cluster_ips.is_empty()
            && !old_ips.is_empty()
            && svc
                .spec
                .cluster_ip
                .as_deref()
                .is_none_or(|c| c.is_empty() || Some(c) == old_ips.first().map(String::as_str));
        let req = if inherit { old_ips.clone() } else { carried_ips(svc) };
        for (i, (new, was)) in req.iter().zip(&old_ips).enumerate() {
            if new != was {
                return Err(invalid(&format!("spec.clusterIPs[{i}]"), &json_list(&req), "may not change once set"));
            }
        }

        let given_families: Vec<String> = svc.spec.ip_families.clone();
        let mut fams: Vec<bool> = Vec::new();
        for (i, f) in given_families.iter().enumerate() {
            let v4 = match f.as_str() {
                "IPv4" => true,
                "IPv6" => false,
                _ => {
                    return Err(ApiError::unsupported(
                        "Service",
                        &name,
                        &format!("spec.ipFamilies[{i}]"),
                        quoted(f),
                        &["IPv4", "IPv6"],
                    ))
                }
            };
            if fams.contains(&v4) {
                return Err(ApiError::new(
                    Reason::Invalid,
                    format!("Service \"{name}\" is invalid: spec.ipFamilies[{i}]: Duplicate value: {}", quoted(f)),
                ));
            }
            fams.push(v4);
        }

        let headless = req.first().map(String::as_str) == Some("None")
            || (req.is_empty() && old_ips.first().map(String::as_str) == Some("None"));
        let mut ips: Vec<IpAddr> = Vec::new();
        if !headless {
            let source = if req.is_empty() { &old_ips } else { &req };
            for (i, s) in source.iter().enumerate() {
                let ip: IpAddr = s
                    .parse()
                    .map_err(|_| invalid(&format!("spec.clusterIPs[{i}]"), &quoted(s), "must be a valid IP address"))?;
                ips.push(ip);
            }
        }
        if ips.len() > 2 {
            return Err(invalid("spec.clusterIPs", &json_list(&req), "may contain at most 2 IPs"));
        }
        if ips.len() == 2 && ips[0].is_ipv4() == ips[1].is_ipv4() {
            return Err(invalid(
                "spec.clusterIPs",
                &json_list(&req),
                "may specify no more than one IP for each IP family",
            ));
        }
        if fams.is_empty() {
            if !ips.is_empty() {
                fams = ips.iter().map(IpAddr::is_ipv4).collect();
            } else if let Some(o) = old.filter(|_| req.is_empty()) {
                fams = o.spec.ip_families.iter().map(|f| f == "IPv4").collect();
            }
        }
        for (i, ip) in ips.iter().enumerate() {
            if let Some(&v4) = fams.get(i) {
                if ip.is_ipv4() != v4 {
                    return Err(invalid(
                        &format!("spec.clusterIPs[{i}]"),
                        &quoted(&ip.to_string()),
                        &format!("expected an {} value as indicated by `ipFamilies[{i}]`", family_name(v4)),
                    ));
                }
            }
        }
        let asked_two = given_families.len() == 2 || svc.spec.cluster_ips.len() == 2;
        let policy: String = match svc.spec.ip_family_policy.clone() {
            Some(p) => p,
            None if asked_two => REQUIRE.into(),
            None => old.and_then(|o| o.spec.ip_family_policy.clone()).unwrap_or_else(|| SINGLE.into()),
        };
        let configured: Vec<bool> = self.cluster_ips.iter().map(|a| a.is_ipv4()).collect();
        let Some(&primary) = configured.first() else {
            return Err(ApiError::internal("no service CIDR is configured"));
        };
        if fams.is_empty() {
            fams.push(primary);
        }
        match policy.as_str() {
            SINGLE => {
                if asked_two {
                    return Err(invalid(
                        "spec.ipFamilyPolicy",
                        &quoted(SINGLE),
                        "must be RequireDualStack or PreferDualStack when multiple IPFamilies are specified",
                    ));
                }
                // A downgrade from dual-stack keeps the primary family only.
                fams.truncate(1);
                ips.truncate(1);
            }
            PREFER | REQUIRE => {
                if configured.len() < 2 && policy == REQUIRE {
                    return Err(invalid(
                        "spec.ipFamilyPolicy",
                        &quoted(REQUIRE),
                        "this cluster is not configured for dual-stack services",
                    ));
                }
                if fams.len() == 1 && configured.len() == 2 {
                    fams.push(!fams[0]);
                }
            }
            other => {
                return Err(ApiError::unsupported(
                    "Service",
                    &name,
                    "spec.ipFamilyPolicy",
                    quoted(other),
                    &[SINGLE, PREFER, REQUIRE],
                ))
            }
        }
        for (i, &v4) in fams.iter().enumerate() {
            if !configured.contains(&v4) {
                return Err(invalid(
                    &format!("spec.ipFamilies[{i}]"),
                    &quoted(family_name(v4)),
                    "not configured on this cluster",
                ));
            }
        }

        let mut out: Vec<String> = Vec::new();
        if headless {
            out.push("None".into());
        } else {
            let shown: Vec<String> = ips.iter().map(ToString::to_string).collect();
            for (i, &v4) in fams.iter().enumerate() {
                let Some(a) = self.cluster_ips.iter_mut().find(|a| a.is_ipv4() == v4) else {
                    return Err(ApiError::internal(format!("no {} service CIDR", family_name(v4))));
                };
                let ip = match ips.get(i) {
                    Some(&ip) if prev.ips.contains(&ip) => ip,
                    Some(&ip) => {
                        a.allocate(ip).map_err(|e| {
                            let why = match e {
                                AllocError::AlreadyAllocated => "provided IP is already allocated".to_string(),
                                _ => format!(
                                    "the provided IP ({ip}) is not in the valid range. The range of valid IPs is {}",
                                    a.net()
                                ),
                            };
                            let mut err = invalid(
                                "spec.clusterIPs",
                                &json_list(&shown),
                                &format!("failed to allocate IP {ip}: {why}"),
                            );
                            if e == AllocError::AlreadyAllocated {
                                err.reason = Reason::AlreadyAllocated;
                            }
                            err
                        })?;
                        taken.ips.push(ip);
                        ip
                    }
                    None => {
                        let ip = a.allocate_next().map_err(|_| {
                            ApiError::new(Reason::RangeFull, "failed to allocate a serviceIP: range is full")
                        })?;
                        taken.ips.push(ip);
                        ip
                    }
                };
                held.ips.insert(ip);
                out.push(ip.to_string());
            }
        }
        svc.spec.cluster_ip = out.first().cloned();
        svc.spec.cluster_ips = out;
        svc.spec.ip_families = fams.iter().map(|&v4| family_name(v4).to_string()).collect();
        svc.spec.ip_family_policy = Some(policy);
        Ok(())
    }

    /// Takes one node port for a field: already ours, or a static request.
    fn claim_port(
        &mut self,
        name: &str,
        field: &str,
        value: i64,
        prev: &Held,
        taken: &mut Taken,
    ) -> Result<u16, ApiError> {
        let range = self.node_ports.range();
        let not_in_range = || {
            ApiError::invalid(
                "Service",
                name,
                field,
                value,
                &format!("provided port is not in the valid range. The range of valid ports is {range}"),
            )
        };
        let port = u16::try_from(value).map_err(|_| not_in_range())?;
        if prev.ports.contains(&port) {
            return Ok(port);
        }
        match self.node_ports.allocate(port) {
            Ok(()) => {
                taken.ports.push(port);
                Ok(port)
            }
            Err(AllocError::AlreadyAllocated) => {
                let mut e = ApiError::invalid("Service", name, field, value, "provided port is already allocated");
                e.reason = Reason::AlreadyAllocated;
                Err(e)
            }
            Err(_) => Err(not_in_range()),
        }
    }

    fn next_port(&mut self, taken: &mut Taken) -> Result<u16, ApiError> {
        let p = self
            .node_ports
            .allocate_next()
            .map_err(|_| ApiError::new(Reason::RangeFull, "failed to allocate a nodePort: range is full"))?;
        taken.ports.push(p);
        Ok(p)
    }

    fn plan_node_ports(
        &mut self,
        svc: &mut Service,
        old: Option<&Service>,
        prev: &Held,
        taken: &mut Taken,
        held: &mut Held,
    ) -> Result<(), ApiError> {
        let name = svc.name().to_string();
        let ty = svc.service_type();
        let old_ports: &[ServicePort] = old.map_or(&[], |o| &o.spec.ports);
        if !matches!(ty, ServiceType::NodePort | ServiceType::LoadBalancer) {
            let ty_name = svc.spec.type_.clone().unwrap_or_else(|| "ClusterIP".into());
            for (i, p) in svc.spec.ports.iter_mut().enumerate() {
                if let Some(np) = p.node_port {
                    // A type change that still carries the old node ports drops them,
                    // as the API server does; a new value is an error.
                    if match_old(old_ports, p).and_then(|o| o.node_port) != Some(np) {
                        return Err(forbidden(
                            &name,
                            &format!("spec.ports[{i}].nodePort"),
                            &format!("may not be used when `type` is '{ty_name}'"),
                        ));
                    }
                    p.node_port = None;
                }
            }
            return Ok(());
        }
        let wants_all = ty == ServiceType::NodePort || svc.spec.allocate_load_balancer_node_ports != Some(false);
        // node port -> protocols using it in this Service.
        let mut used: BTreeMap<u16, Vec<Protocol>> = BTreeMap::new();
        let n = svc.spec.ports.len();
        let mut assigned: Vec<Option<u16>> = vec![None; n];
        // Static requests first, so their errors are the ones reported.
        for (i, slot) in assigned.iter_mut().enumerate() {
            let p = &svc.spec.ports[i];
            let Some(v) = p.node_port else { continue };
            let field = format!("spec.ports[{i}].nodePort");
            let proto = p.proto();
            if let Some(protos) = u16::try_from(v).ok().and_then(|x| used.get_mut(&x)) {
                if protos.contains(&proto) {
                    return Err(ApiError::new(
                        Reason::Invalid,
                        format!("Service \"{name}\" is invalid: {field}: Duplicate value: {v}"),
                    ));
                }
                protos.push(proto);
                *slot = u16::try_from(v).ok();
                continue;
            }
            let port = self.claim_port(&name, &field, v, prev, taken)?;
            used.insert(port, vec![proto]);
            held.ports.insert(port);
            *slot = Some(port);
        }
        // Then what an update keeps from the stored object. This holds with
        // `allocateLoadBalancerNodePorts: false` too: like Kubernetes, turning it off
        // does not take away node ports a Service already has.
        for (i, slot) in assigned.iter_mut().enumerate() {
            if slot.is_some() {
                continue;
            }
            let p = &svc.spec.ports[i];
            let kept = match_old(old_ports, p).and_then(|o| o.node_port).and_then(|v| u16::try_from(v).ok());
            let Some(np) = kept.filter(|np| prev.ports.contains(np)) else { continue };
            let protos = used.entry(np).or_default();
            if protos.contains(&p.proto()) {
                continue;
            }
            protos.push(p.proto());
            held.ports.insert(np);
            *slot = Some(np);
        }
        if wants_all {
            // Then new dynamic ones, shared between protocols of one port number.
            for i in 0..n {
                if assigned[i].is_some() {
                    continue;
                }
                let (port_no, proto) = (svc.spec.ports[i].port, svc.spec.ports[i].proto());
                let share = (0..n).find_map(|j| {
                    let np = assigned[j]?;
                    (svc.spec.ports[j].port == port_no && !used.get(&np).is_some_and(|ps| ps.contains(&proto)))
                        .then_some(np)
                });
                let np = match share {
                    Some(np) => np,
                    None => self.next_port(taken)?,
                };
                used.entry(np).or_default().push(proto);
                held.ports.insert(np);
                assigned[i] = Some(np);
            }
        }
        for (p, a) in svc.spec.ports.iter_mut().zip(assigned) {
            p.node_port = a.map(i64::from);
        }
        Ok(())
    }

    fn plan_health_check(
        &mut self,
        svc: &mut Service,
        old: Option<&Service>,
        prev: &Held,
        taken: &mut Taken,
        held: &mut Held,
    ) -> Result<(), ApiError> {
        let name = svc.name().to_string();
        let field = "spec.healthCheckNodePort";
        let needed = svc.service_type() == ServiceType::LoadBalancer
            && svc.spec.external_traffic_policy.as_deref() == Some("Local");
        let old_hc = old.and_then(|o| o.spec.health_check_node_port);
        if !needed {
            if let Some(v) = svc.spec.health_check_node_port {
                if Some(v) != old_hc {
                    return Err(ApiError::invalid(
                        "Service",
                        &name,
                        field,
                        v,
                        "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
                    ));
                }
            }
            svc.spec.health_check_node_port = None;
            return Ok(());
        }
        let port = match svc.spec.health_check_node_port {
            Some(v) => {
                if u16::try_from(v).is_ok_and(|p| held.ports.contains(&p)) {
                    let mut e = ApiError::invalid("Service", &name, field, v, "provided port is already allocated");
                    e.reason = Reason::AlreadyAllocated;
                    return Err(e);
                }
                self.claim_port(&name, field, v, prev, taken)?
            }
            None => match old_hc
                .and_then(|v| u16::try_from(v).ok())
                .filter(|p| prev.ports.contains(p) && !held.ports.contains(p))
            {
                Some(p) => p,
                None => self.next_port(taken)?,
            },
        };
        held.ports.insert(port);
        svc.spec.health_check_node_port = Some(i64::from(port));
        Ok(())
    }
}
