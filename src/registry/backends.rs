//! Resolving a Service's ports to backends from stored endpoint objects.
//!
//! The rules, as kube-proxy applies them:
//! * EndpointSlices in the Service's namespace labelled `kubernetes.io/service-name:
//!   <service>` are the source when any exist; otherwise the Endpoints object with the
//!   Service's name is.
//! * A service port matches an endpoint port with the same name and protocol; an
//!   unnamed service port matches an unnamed endpoint port (the usual single-port case).
//! * The backend port is the endpoint port's number; only when a name-matched endpoint
//!   port carries no number does a numeric `targetPort` serve as the fallback. A
//!   service port with no matching endpoint port has no backends.
//! * A slice's `conditions`: absent `ready` means ready, absent `serving` means the
//!   value of `ready`, absent `terminating` means false; the first address of each
//!   endpoint is used. Addresses of the wrong family for the slice's `addressType`,
//!   FQDN slices and unparsable addresses are ignored.
//! * Endpoints: `addresses` are ready and serving, `notReadyAddresses` neither.
//! * The result per port is sorted and without duplicates.

use std::net::IpAddr;

use super::Registry;
use crate::model::{Backend, EndpointPort, IntOrString, Key, Protocol, Service, ServicePort};

/// One service port with its backends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortBackends {
    pub name: Option<String>,
    pub protocol: Protocol,
    pub port: u16,
    pub node_port: Option<u16>,
    pub backends: Vec<Backend>,
}

fn port_name(n: &Option<String>) -> &str {
    n.as_deref().unwrap_or("")
}

/// The backend port for `sp` from an endpoint port list, if one matches.
fn target(sp: &ServicePort, eports: &[EndpointPort]) -> Option<u16> {
    let proto = sp.proto();
    let ep = eports.iter().find(|e| {
        port_name(&e.name) == port_name(&sp.name)
            && e.protocol.as_deref().and_then(Protocol::parse).unwrap_or(Protocol::Tcp) == proto
    })?;
    let n = match (ep.port, &sp.target_port) {
        (Some(p), _) => p,
        (None, Some(IntOrString::Int(p))) => *p,
        (None, _) => return None,
    };
    u16::try_from(n).ok().filter(|&p| p != 0)
}

impl Registry {
    pub fn backends(&self, svc: &Service) -> Vec<PortBackends> {
        let ns = svc.namespace();
        let slices = self.slices_for(ns, svc.name());
        let endpoints = self.endpoints.get(&Key::new(ns, svc.name()));
        svc.spec
            .ports
            .iter()
            .map(|sp| {
                let mut backends = Vec::new();
                if !slices.is_empty() {
                    for s in &slices {
                        let want_v4 = match s.address_type.as_str() {
                            "IPv4" => true,
                            "IPv6" => false,
                            _ => continue,
                        };
                        let Some(port) = target(sp, &s.ports) else { continue };
                        for e in &s.endpoints {
                            let Some(ip) = e.addresses.first().and_then(|a| a.parse::<IpAddr>().ok()) else {
                                continue;
                            };
                            if ip.is_ipv4() != want_v4 {
                                continue;
                            }
                            let ready = e.conditions.ready.unwrap_or(true);
                            backends.push(Backend {
                                ip,
                                port,
                                ready,
                                serving: e.conditions.serving.unwrap_or(ready),
                                terminating: e.conditions.terminating.unwrap_or(false),
                                node_name: e.node_name.clone(),
                            });
                        }
                    }
                } else if let Some(ep) = endpoints {
                    for sub in &ep.subsets {
                        let Some(port) = target(sp, &sub.ports) else { continue };
                        let all = sub
                            .addresses
                            .iter()
                            .map(|a| (a, true))
                            .chain(sub.not_ready_addresses.iter().map(|a| (a, false)));
                        for (a, ready) in all {
                            let Ok(ip) = a.ip.parse::<IpAddr>() else { continue };
                            backends.push(Backend {
                                ip,
                                port,
                                ready,
                                serving: ready,
                                terminating: false,
                                node_name: a.node_name.clone(),
                            });
                        }
                    }
                }
                backends.sort();
                backends.dedup();
                PortBackends {
                    name: sp.name.clone(),
                    protocol: sp.proto(),
                    port: u16::try_from(sp.port).unwrap_or(0),
                    node_port: sp.node_port.and_then(|p| u16::try_from(p).ok()),
                    backends,
                }
            })
            .collect()
    }
}
