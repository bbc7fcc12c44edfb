//! Allocation semantics of a Service apply, following the Kubernetes 1.36 API server's
//! service REST storage, in its order:
//!
//! 1. Defaults, and on an update the values the request omits patched in from the
//!    stored object, then the values the new type or policy makes obsolete dropped
//!    ([`crate::model::strategy::prepare_service`]).
//! 2. Validation ([`crate::model::validate::validate_service`]), every error listed.
//! 3. Allocation and release in one step: everything the Service holds afterwards is
//!    taken (recorded in `Taken`, so the caller can undo a failed request), and what it
//!    no longer holds is freed only when the request succeeds.
//!
//! * A `nodePort`, `healthCheckNodePort` or `clusterIP(s)` present on the applied object
//!   is a *static* request: honoured anywhere in the range, or refused. `0` means
//!   "allocate one".
//! * An update that omits them keeps what the stored object holds (node ports are
//!   matched by port name, the empty name for an unnamed port, so a single unnamed port
//!   keeps its nodePort when its number changes); naming a different nodePort moves it.
//! * Ports with the same `port` number and different protocols share one nodePort.
//! * Type `ClusterIP` and `ExternalName` hold no node ports (a type change releases
//!   them); `ExternalName` holds no cluster IP either. `healthCheckNodePort` exists for
//!   `LoadBalancer` with `externalTrafficPolicy: Local`. `allocateLoadBalancerNodePorts:
//!   false` gives a LoadBalancer no dynamic node ports: ports that do not name one have
//!   none (an update turning it off frees them).
//! * `clusterIPs` follow `ipFamilyPolicy` (the stored one on an update, else
//!   SingleStack, else RequireDualStack for a headless Service without selector) and
//!   `ipFamilies` (the first configured family by default). Once set they may not
//!   change, except that a dual-stack policy can add the second family and going back
//!   to SingleStack drops it.
//! * The first address of the primary service CIDR is reserved for `default/kubernetes`
//!   (docs/extensions.md).

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::{Held, Registry, Taken};
use crate::alloc::AllocError;
use crate::model::names;
use crate::model::strategy::prepare_service;
use crate::model::validate::{validate_service, validate_service_update, Errs};
use crate::model::{ApiError, Protocol, Reason, Service, ServiceType};

const SINGLE: &str = "SingleStack";
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
        // Which node ports the request itself names (0 means "allocate").
        let asked: Vec<bool> = svc.spec.ports.iter().map(|p| p.node_port.is_some_and(|n| n != 0)).collect();
        let asked_hc = svc.spec.health_check_node_port.is_some_and(|n| n != 0);
        prepare_service(svc, old);
        let lost = |v: i64| u16::try_from(v).map_or(true, |v| !prev.ports.contains(&v));
        if !asked_hc && svc.spec.health_check_node_port.is_some_and(lost) {
            svc.spec.health_check_node_port = None;
        }
        // A value patched in from the stored object that this Service no longer holds
        // (lost to a conflict at restore) is allocated anew, not contested.
        for (p, asked) in svc.spec.ports.iter_mut().zip(asked) {
            if !asked && p.node_port.is_some_and(lost) {
                p.node_port = None;
            }
        }
        match old {
            Some(o) => validate_service_update(svc, o)?,
            None => validate_service(svc)?,
        }
        let mut held = Held::default();
        if svc.service_type() == ServiceType::ExternalName {
            svc.spec.cluster_ip = None;
            svc.spec.cluster_ips.clear();
            svc.spec.ip_families.clear();
            svc.spec.ip_family_policy = None;
        } else {
            self.plan_cluster_ips(svc, old, prev, taken, &mut held)?;
        }
        self.plan_node_ports(svc, prev, taken, &mut held)?;
        self.plan_health_check(svc, prev, taken, &mut held)?;
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

        // Validation has checked that `clusterIP` and `clusterIPs` agree and that an update
        // changes no address the Service holds (`validateUpgradeDowngradeClusterIPs`).
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

        // Validation has checked the families and the IPs' syntax.
        let given_families: Vec<String> = svc.spec.ip_families.clone();
        let mut fams: Vec<bool> = given_families.iter().map(|f| f == "IPv4").collect();
        let headless = req.first().map(String::as_str) == Some("None")
            || (req.is_empty() && old_ips.first().map(String::as_str) == Some("None"));
        let mut ips: Vec<IpAddr> = Vec::new();
        if !headless {
            let source = if req.is_empty() { &old_ips } else { &req };
            for (i, s) in source.iter().enumerate() {
                let ip: IpAddr =
                    s.parse().map_err(|_| invalid(&format!("spec.clusterIPs[{i}]"), &quoted(s), names::IP_ERR))?;
                ips.push(ip);
            }
        }
        if fams.is_empty() && ips.is_empty() {
            if let Some(o) = old.filter(|_| req.is_empty()) {
                fams = o.spec.ip_families.iter().map(|f| f == "IPv4").collect();
            }
        }
        let selectorless = svc.spec.selector.as_ref().is_none_or(|s| s.is_empty());
        // No policy given: the stored one on an update, else SingleStack, except that a
        // headless Service without selector is dual-stack (`initIPFamilyFields`).
        let policy: String = match svc.spec.ip_family_policy.clone() {
            Some(p) => p,
            None => match old.and_then(|o| o.spec.ip_family_policy.clone()) {
                Some(p) => p,
                None if headless && selectorless => REQUIRE.into(),
                None => SINGLE.into(),
            },
        };
        let configured: Vec<bool> = self.cluster_ips.iter().map(|a| a.is_ipv4()).collect();
        let Some(&primary) = configured.first() else {
            return Err(ApiError::internal("no service CIDR is configured"));
        };
        let mut errs = Errs::new("Service", &name);
        if policy == SINGLE {
            if svc.spec.cluster_ips.len() == 2 {
                errs.invalid(
                    "spec.ipFamilyPolicy",
                    quoted(SINGLE),
                    "must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified",
                );
            }
            if given_families.len() == 2 {
                errs.invalid(
                    "spec.ipFamilyPolicy",
                    quoted(SINGLE),
                    "must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified",
                );
            }
        }
        // Families of the IPs given without one.
        for (i, ip) in ips.iter().enumerate().skip(fams.len()) {
            if configured.contains(&ip.is_ipv4()) {
                fams.push(ip.is_ipv4());
            } else {
                errs.invalid(
                    &format!("spec.clusterIPs[{i}]"),
                    json_list(&svc.spec.cluster_ips),
                    &format!("{} is not configured on this cluster", family_name(ip.is_ipv4())),
                );
            }
        }
        errs.finish()?;
        let mut errs = Errs::new("Service", &name);
        if headless && selectorless {
            // Allowed on any cluster, dual-stack or not, as the API server allows it.
            if fams.is_empty() {
                fams.push(primary);
            }
            if fams.len() < 2 && policy != SINGLE {
                fams.push(!fams[0]);
            }
        } else {
            if policy == REQUIRE && configured.len() < 2 {
                errs.invalid(
                    "spec.ipFamilyPolicy",
                    quoted(REQUIRE),
                    "this cluster is not configured for dual-stack services",
                );
            }
            for (i, &v4) in fams.iter().enumerate() {
                if !configured.contains(&v4) {
                    errs.invalid(
                        &format!("spec.ipFamilies[{i}]"),
                        quoted(family_name(v4)),
                        "not configured on this cluster",
                    );
                }
            }
            errs.finish()?;
            if fams.is_empty() {
                fams.push(primary);
            }
            match policy.as_str() {
                SINGLE => {
                    // A downgrade from dual-stack keeps the primary family only.
                    fams.truncate(1);
                    ips.truncate(1);
                }
                _ => {
                    if fams.len() == 1 && configured.len() == 2 {
                        fams.push(!fams[0]);
                    }
                }
            }
        }

        let mut out: Vec<String> = Vec::new();
        if headless {
            out.push("None".into());
        } else {
            // As the API server shows `clusterIPs` then: "" for a family still to allocate.
            let shown: Vec<String> =
                (0..fams.len()).map(|i| ips.get(i).map(ToString::to_string).unwrap_or_default()).collect();
            let reserved = self.reserved.filter(|r| prev.ips.contains(r));
            for (i, &v4) in fams.iter().enumerate() {
                let Some(a) = self.cluster_ips.iter_mut().find(|a| a.is_ipv4() == v4) else {
                    return Err(ApiError::internal(format!("no {} service CIDR", family_name(v4))));
                };
                let ip = match ips.get(i) {
                    Some(&ip) if prev.ips.contains(&ip) => ip,
                    Some(&ip) => {
                        a.allocate(ip).map_err(|e| {
                            let why = match e {
                                AllocError::AlreadyAllocated => "provided IP is already allocated",
                                // Outside the range, or its network or broadcast address.
                                _ => "the provided network does not match the current range",
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
                    // `default/kubernetes` gets the address reserved for it.
                    None if reserved.is_some_and(|r| r.is_ipv4() == v4) => reserved.unwrap_or(IpAddr::from([0; 4])),
                    None => {
                        let ip = a.allocate_next().map_err(|_| {
                            ApiError::new(
                                Reason::RangeFull,
                                format!("failed to allocate a serviceIP for Service {}: range is full", quoted(&name)),
                            )
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
        prev: &Held,
        taken: &mut Taken,
        held: &mut Held,
    ) -> Result<(), ApiError> {
        let name = svc.name().to_string();
        let ty = svc.service_type();
        if !matches!(ty, ServiceType::NodePort | ServiceType::LoadBalancer) {
            // Validation refused node ports on ClusterIP (the strategy dropped unchanged
            // ones); ExternalName holds none.
            for p in &mut svc.spec.ports {
                p.node_port = None;
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
        prev: &Held,
        taken: &mut Taken,
        held: &mut Held,
    ) -> Result<(), ApiError> {
        if !crate::model::strategy::needs_health_check(svc) {
            // Validation refused a value here (the strategy dropped an unchanged one).
            svc.spec.health_check_node_port = None;
            return Ok(());
        }
        // The API server words these as internal errors, without a field path.
        let requested = |v: i64, why: &str, reason: Reason| {
            ApiError::new(reason, format!("failed to allocate requested HealthCheck NodePort {v}: {why}"))
        };
        let port = match svc.spec.health_check_node_port {
            Some(v) => {
                let range = self.node_ports.range();
                let not_in_range = || {
                    requested(
                        v,
                        &format!("provided port is not in the valid range. The range of valid ports is {range}"),
                        Reason::Invalid,
                    )
                };
                let p = u16::try_from(v).map_err(|_| not_in_range())?;
                if held.ports.contains(&p) {
                    return Err(requested(v, "provided port is already allocated", Reason::AlreadyAllocated));
                }
                if !prev.ports.contains(&p) {
                    match self.node_ports.allocate(p) {
                        Ok(()) => taken.ports.push(p),
                        Err(AllocError::AlreadyAllocated) => {
                            return Err(requested(v, "provided port is already allocated", Reason::AlreadyAllocated))
                        }
                        Err(_) => return Err(not_in_range()),
                    }
                }
                p
            }
            None => {
                let p = self.node_ports.allocate_next().map_err(|_| {
                    ApiError::new(Reason::RangeFull, "failed to allocate a HealthCheck NodePort 0: range is full")
                })?;
                taken.ports.push(p);
                p
            }
        };
        held.ports.insert(port);
        svc.spec.health_check_node_port = Some(i64::from(port));
        Ok(())
    }
}
