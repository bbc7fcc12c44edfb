//! What the API server does to a Service between decoding it and validating it, in its
//! order (Kubernetes 1.36: `pkg/apis/core/v1/defaults.go`, then the service REST
//! storage and strategy in `pkg/registry/core/service`):
//!
//! 1. [`default_service`]: the v1 defaults (`type: ClusterIP`, `protocol: TCP`,
//!    `targetPort: port`, `sessionAffinity: None` and the 10800 s ClientIP timeout,
//!    traffic policies, `allocateLoadBalancerNodePorts: true`), and `0` in `nodePort`
//!    or `healthCheckNodePort` read as "not set" (both mean "allocate one").
//! 2. On an update, [`patch_allocated_values`]: values the server allocated and the
//!    request omits are kept.
//! 3. [`normalize_cluster_ips`]: `clusterIP` and `clusterIPs` kept in step.
//! 4. On an update, [`drop_type_dependent_fields`]: values the new type or policy
//!    makes obsolete are dropped, so they are freed, not refused.
//!
//! Validation ([`super::validate::validate_service`]) comes after these, and
//! allocation after validation (the registry).
//!
//! Pure: no allocator state.

use super::{EndpointPort, EndpointSlice, Endpoints, IntOrString, Service, ServiceType};

/// `v1.DefaultClientIPServiceAffinitySeconds`: 3 hours.
pub const DEFAULT_CLIENT_IP_TIMEOUT: i64 = 10800;

fn externally_accessible(svc: &Service) -> bool {
    match svc.service_type() {
        ServiceType::NodePort | ServiceType::LoadBalancer => true,
        ServiceType::ClusterIP => !svc.spec.external_ips.is_empty(),
        ServiceType::ExternalName => false,
    }
}

fn needs_cluster_ip(svc: &Service) -> bool {
    svc.service_type() != ServiceType::ExternalName
}

fn needs_node_port(svc: &Service) -> bool {
    matches!(svc.service_type(), ServiceType::NodePort | ServiceType::LoadBalancer)
}

/// `LoadBalancer` with `externalTrafficPolicy: Local`.
pub fn needs_health_check(svc: &Service) -> bool {
    svc.service_type() == ServiceType::LoadBalancer && svc.spec.external_traffic_policy.as_deref() == Some("Local")
}

/// The v1 defaults (`SetDefaults_Service`), plus `0` read as "allocate one" for node
/// ports. Only fills what is absent; unknown values are left for validation.
pub fn default_service(svc: &mut Service) {
    let spec = &mut svc.spec;
    if spec.session_affinity.as_deref().is_none_or(str::is_empty) {
        spec.session_affinity = Some("None".into());
    }
    match spec.session_affinity.as_deref() {
        // The API server drops a config that has nothing to configure.
        Some("None") => spec.session_affinity_config = None,
        Some("ClientIP") => {
            let has_timeout = spec
                .session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .is_some_and(|c| c.timeout_seconds.is_some());
            if !has_timeout {
                spec.session_affinity_config = Some(super::SessionAffinityConfig {
                    client_ip: Some(super::ClientIpConfig { timeout_seconds: Some(DEFAULT_CLIENT_IP_TIMEOUT) }),
                });
            }
        }
        _ => {}
    }
    if spec.type_.as_deref().is_none_or(str::is_empty) {
        spec.type_ = Some("ClusterIP".into());
    }
    for p in &mut spec.ports {
        if p.protocol.as_deref().is_none_or(str::is_empty) {
            p.protocol = Some("TCP".into());
        }
        let unset = match &p.target_port {
            None => true,
            Some(IntOrString::Int(0)) => true,
            Some(IntOrString::Str(s)) => s.is_empty(),
            Some(IntOrString::Int(_)) => false,
        };
        if unset {
            p.target_port = Some(IntOrString::Int(p.port));
        }
        if p.node_port == Some(0) {
            p.node_port = None;
        }
    }
    if spec.health_check_node_port == Some(0) {
        spec.health_check_node_port = None;
    }
    if spec.cluster_ip.as_deref() == Some("") {
        spec.cluster_ip = None;
    }
    let ty = svc.service_type();
    // The API server drops internalTrafficPolicy from an ExternalName Service when it
    // reads it back (`defaultOnReadInternalTrafficPolicy`), so it is never served; a
    // value it would refuse is left for validation.
    if ty == ServiceType::ExternalName
        && matches!(svc.spec.internal_traffic_policy.as_deref(), Some("Cluster" | "Local"))
    {
        svc.spec.internal_traffic_policy = None;
    }
    if externally_accessible(svc) && svc.spec.external_traffic_policy.as_deref().is_none_or(str::is_empty) {
        svc.spec.external_traffic_policy = Some("Cluster".into());
    }
    let spec = &mut svc.spec;
    if spec.internal_traffic_policy.is_none() && ty != ServiceType::ExternalName {
        spec.internal_traffic_policy = Some("Cluster".into());
    }
    if ty == ServiceType::LoadBalancer && spec.allocate_load_balancer_node_ports.is_none() {
        spec.allocate_load_balancer_node_ports = Some(true);
    }
}

fn default_ports(ports: &mut [EndpointPort], slice: bool) {
    for p in ports {
        if p.protocol.is_none() {
            p.protocol = Some("TCP".into());
        }
        if slice && p.name.is_none() {
            p.name = Some(String::new());
        }
    }
}

/// The v1 defaults of an Endpoints object: a port's `protocol: TCP`.
pub fn default_endpoints(ep: &mut Endpoints) {
    for s in &mut ep.subsets {
        default_ports(&mut s.ports, false);
    }
}

/// The discovery/v1 defaults of an EndpointSlice: a port's `protocol: TCP` and `name: ""`.
pub fn default_endpoint_slice(es: &mut EndpointSlice) {
    default_ports(&mut es.ports, true);
}

/// `NormalizeClusterIPs`: a request that names only `clusterIP` means `clusterIPs:
/// [clusterIP]`; on an update, an omitted `clusterIPs` with the stored `clusterIP`
/// keeps the stored list, and clearing or changing `clusterIP` alone clears or
/// replaces the list. A `clusterIPs` without `clusterIP` on a create is left for
/// validation to refuse.
pub fn normalize_cluster_ips(svc: &mut Service, old: Option<&Service>) {
    let spec = &mut svc.spec;
    let cip = spec.cluster_ip.clone().unwrap_or_default();
    let Some(old) = old else {
        if !cip.is_empty() && spec.cluster_ips.is_empty() {
            spec.cluster_ips = vec![cip];
        }
        return;
    };
    let old_cip = old.spec.cluster_ip.clone().unwrap_or_default();
    if !old.spec.cluster_ips.is_empty() && spec.cluster_ips.is_empty() && old_cip == cip {
        spec.cluster_ips = old.spec.cluster_ips.clone();
    }
    if old_cip != cip {
        if !old_cip.is_empty() && cip.is_empty() {
            if spec.cluster_ips == old.spec.cluster_ips {
                spec.cluster_ips.clear();
            }
        } else if spec.cluster_ips == old.spec.cluster_ips {
            spec.cluster_ips = vec![cip];
        }
    }
}

/// `patchAllocatedValues`: an update that omits values the server allocated keeps
/// them. Node ports are matched by port name (an unnamed port by the empty name), so a
/// single unnamed port keeps its nodePort when its port number changes. A port whose
/// stored nodePort another port of the request names is not patched. With
/// `allocateLoadBalancerNodePorts: false` ports without a nodePort stay without one
/// (the stored ones are freed).
pub fn patch_allocated_values(svc: &mut Service, old: &Service) {
    if needs_cluster_ip(old) && needs_cluster_ip(svc) {
        if svc.spec.cluster_ip.as_deref().is_none_or(str::is_empty) {
            svc.spec.cluster_ip = old.spec.cluster_ip.clone();
        }
        if svc.spec.cluster_ips.is_empty() && !old.spec.cluster_ips.is_empty() {
            svc.spec.cluster_ips = old.spec.cluster_ips.clone();
        }
    }
    let allocate_lb = svc.spec.allocate_load_balancer_node_ports != Some(false);
    if needs_node_port(old) && needs_node_port(svc) && allocate_lb {
        let named: Vec<i64> = svc.spec.ports.iter().filter_map(|p| p.node_port).collect();
        for p in &mut svc.spec.ports {
            if p.node_port.is_some() {
                continue;
            }
            let name = p.name.as_deref().unwrap_or("");
            let was = old.spec.ports.iter().find(|o| o.name.as_deref().unwrap_or("") == name).and_then(|o| o.node_port);
            if let Some(v) = was.filter(|v| !named.contains(v)) {
                p.node_port = Some(v);
            }
        }
    }
    if needs_health_check(old) && needs_health_check(svc) && svc.spec.health_check_node_port.is_none() {
        svc.spec.health_check_node_port = old.spec.health_check_node_port;
    }
}

fn node_port_set(svc: &Service) -> Vec<i64> {
    svc.spec.ports.iter().filter_map(|p| p.node_port).collect()
}

/// `dropTypeDependentFields` (and the single-stack downgrade of `initIPFamilyFields`):
/// on an update, a field the new type or policy no longer uses is dropped when the
/// request carries it unchanged from the stored object; a changed value is left for
/// validation to refuse.
pub fn drop_type_dependent_fields(svc: &mut Service, old: &Service) {
    if needs_cluster_ip(old) && !needs_cluster_ip(svc) {
        if svc.spec.cluster_ip == old.spec.cluster_ip && svc.spec.cluster_ips == old.spec.cluster_ips {
            svc.spec.cluster_ip = None;
            svc.spec.cluster_ips.clear();
        }
        if svc.spec.ip_families == old.spec.ip_families {
            svc.spec.ip_families.clear();
        }
        if svc.spec.ip_family_policy == old.spec.ip_family_policy {
            svc.spec.ip_family_policy = None;
        }
    }
    if needs_node_port(old) && !needs_node_port(svc) {
        let was = node_port_set(old);
        if node_port_set(svc).iter().all(|p| was.contains(p)) {
            for p in &mut svc.spec.ports {
                p.node_port = None;
            }
        }
    }
    if needs_health_check(old)
        && !needs_health_check(svc)
        && svc.spec.health_check_node_port == old.spec.health_check_node_port
    {
        svc.spec.health_check_node_port = None;
    }
    let was_lb = old.service_type() == ServiceType::LoadBalancer;
    let is_lb = svc.service_type() == ServiceType::LoadBalancer;
    if was_lb && !is_lb {
        if svc.spec.allocate_load_balancer_node_ports.is_some()
            && svc.spec.allocate_load_balancer_node_ports == old.spec.allocate_load_balancer_node_ports
        {
            svc.spec.allocate_load_balancer_node_ports = None;
        }
        if svc.spec.load_balancer_class == old.spec.load_balancer_class {
            svc.spec.load_balancer_class = None;
        }
    }
    if externally_accessible(old)
        && !externally_accessible(svc)
        && svc.spec.external_traffic_policy == old.spec.external_traffic_policy
    {
        svc.spec.external_traffic_policy = None;
    }
    // RequireDualStack/PreferDualStack -> SingleStack with the stored IPs and families:
    // setting the policy is clear intent, the secondary is released.
    if svc.spec.ip_family_policy.as_deref() == Some("SingleStack") && needs_cluster_ip(svc) {
        if svc.spec.cluster_ips == old.spec.cluster_ips && svc.spec.cluster_ips.len() > 1 {
            svc.spec.cluster_ips.truncate(1);
        }
        if svc.spec.ip_families == old.spec.ip_families && svc.spec.ip_families.len() > 1 {
            svc.spec.ip_families.truncate(1);
        }
    }
}

/// Steps 1 to 4 above: what the registry validates and then allocates for.
pub fn prepare_service(svc: &mut Service, old: Option<&Service>) {
    default_service(svc);
    match old {
        None => normalize_cluster_ips(svc, None),
        Some(old) => {
            // The service REST storage's order: patch, then normalize.
            patch_allocated_values(svc, old);
            normalize_cluster_ips(svc, Some(old));
            drop_type_dependent_fields(svc, old);
        }
    }
}
