//! Stale UDP conntrack entries, deleted over ctnetlink as kube-proxy does.
//!
//! UDP has no connection end: once a flow has a conntrack entry, later packets follow
//! that entry's NAT even after its endpoint or service is gone, so the client is
//! black-holed until the entry times out (typically 120 s for a stream). After a UDP
//! endpoint or service goes away the daemon deletes the entries still pointing at it.

pub mod wire;

use std::io;
use std::net::IpAddr;
use std::ops::ControlFlow;

use netlink_packet_core::{NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST};
use netlink_sys::{protocols::NETLINK_NETFILTER, Socket};

use crate::nft::recv::{receive_blocking, Incoming};
use crate::nft::wire::{emit, NfMsg};
use crate::nft::NftError;
use wire::IPPROTO_UDP;
pub use wire::{Flow, Tuple};

/// Which UDP entries to delete. Build it with the constructors, which name the
/// kube-proxy situations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpFlowFilter {
    /// The original destination address; `None` for a NodePort (any node address).
    pub dst: Option<IpAddr>,
    /// The original destination port (service port or NodePort).
    pub port: u16,
    /// The reply source, i.e. the endpoint the flow was DNAT'd to; `None` = any.
    pub endpoint: Option<IpAddr>,
    /// The endpoint's port (targetPort); `None` = any.
    pub endpoint_port: Option<u16>,
}

impl UdpFlowFilter {
    /// A UDP service port is gone (service deleted, or it had no endpoints and now
    /// has some): every entry sent to `ip:port` (ClusterIP, external or LB IP).
    pub fn service(ip: IpAddr, port: u16) -> Self {
        UdpFlowFilter { dst: Some(ip), port, endpoint: None, endpoint_port: None }
    }

    /// A UDP NodePort is gone: entries sent to `port` on any address that were
    /// DNAT'd (a local program on that port is not ours to disturb).
    pub fn node_port(port: u16) -> Self {
        UdpFlowFilter { dst: None, port, endpoint: None, endpoint_port: None }
    }

    /// A UDP endpoint left a service: entries sent to `ip:port` and DNAT'd to it.
    pub fn endpoint_of_service(ip: IpAddr, port: u16, endpoint: IpAddr, endpoint_port: Option<u16>) -> Self {
        UdpFlowFilter { dst: Some(ip), port, endpoint: Some(endpoint), endpoint_port }
    }

    /// A UDP endpoint left a NodePort service: entries sent to the NodePort on any
    /// address and DNAT'd to it.
    pub fn endpoint_of_node_port(port: u16, endpoint: IpAddr, endpoint_port: Option<u16>) -> Self {
        UdpFlowFilter { dst: None, port, endpoint: Some(endpoint), endpoint_port }
    }

    pub fn matches(&self, f: &Flow) -> bool {
        let dnatted = f.reply.src != f.orig.dst || f.reply.sport != f.orig.dport;
        f.orig.proto == IPPROTO_UDP
            && f.orig.dport == self.port
            && match self.dst {
                Some(ip) => f.orig.dst == ip,
                None => dnatted,
            }
            && self.endpoint.is_none_or(|ep| dnatted && f.reply.src == ep)
            && self.endpoint_port.is_none_or(|p| f.reply.sport == p)
    }
}

/// A ctnetlink socket in the calling thread's network namespace.
pub struct Conntrack {
    sock: Socket,
    seq: u32,
}

fn ctx(what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("conntrack {what}: {e}"))
}

/// An error of the shared receive loop, told as a conntrack one.
fn ct_err(what: &str, e: NftError) -> io::Error {
    match e {
        NftError::Io { source, .. } => ctx(what, source),
        e => io::Error::other(format!("conntrack {what}: {e}")),
    }
}

fn errno(e: i32) -> NftError {
    NftError::Io { op: "ctnetlink", source: io::Error::from_raw_os_error(e) }
}

impl Conntrack {
    pub fn open() -> io::Result<Conntrack> {
        let mut sock = Socket::new(NETLINK_NETFILTER).map_err(|e| ctx("socket(NETLINK_NETFILTER)", e))?;
        sock.bind_auto().map_err(|e| ctx("bind", e))?;
        Ok(Conntrack { sock, seq: 1 })
    }

    fn send(&mut self, msg: NfMsg, flags: u16, what: &str) -> io::Result<u32> {
        self.seq = self.seq.wrapping_add(1);
        let mut buf = Vec::new();
        emit(&mut buf, msg, flags, self.seq);
        self.sock.send(&buf, 0).map_err(|e| ctx(what, e))?;
        Ok(self.seq)
    }

    /// Every conntrack entry (all families) for which `keep` is true. Only the kept
    /// entries are held in memory, not the whole table.
    pub fn dump(&mut self, keep: impl Fn(&Flow) -> bool) -> io::Result<Vec<Flow>> {
        let seq = self.send(wire::dump_request(), NLM_F_REQUEST | NLM_F_DUMP, "send dump request")?;
        let mut out = Vec::new();
        receive_blocking(&mut self.sock, &mut |m| {
            match m {
                Incoming::Msg(h, m) if h.sequence_number == seq => {
                    if let Some(f) = wire::parse_flow(&m).filter(|f| keep(f)) {
                        out.push(f);
                    }
                }
                Incoming::Done { seq: s, .. } | Incoming::Ack(s) if s == seq => return Ok(ControlFlow::Break(())),
                Incoming::Refused { seq: s, errno: e, .. } if s == seq => return Err(errno(e)),
                Incoming::Overrun => return Err(errno(libc::ENOBUFS)),
                _ => {}
            }
            Ok(ControlFlow::Continue(()))
        })
        .map_err(|e| ct_err("dump", e))?;
        Ok(out)
    }

    /// Delete one entry. `Ok(false)` when it was already gone (timed out meanwhile).
    pub fn delete(&mut self, flow: &Flow) -> io::Result<bool> {
        let seq = self.send(wire::delete_request(flow), NLM_F_REQUEST | NLM_F_ACK, "send delete request")?;
        let mut existed = false;
        receive_blocking(&mut self.sock, &mut |m| match m {
            Incoming::Ack(s) if s == seq => {
                existed = true;
                Ok(ControlFlow::Break(()))
            }
            Incoming::Refused { seq: s, errno: libc::ENOENT, .. } if s == seq => Ok(ControlFlow::Break(())),
            Incoming::Refused { seq: s, errno: e, .. } if s == seq => Err(errno(e)),
            Incoming::Overrun => Err(errno(libc::ENOBUFS)),
            _ => Ok(ControlFlow::Continue(())),
        })
        .map_err(|e| {
            let o = &flow.orig;
            ct_err(&format!("delete {}:{} -> {}:{}", o.src, o.sport, o.dst, o.dport), e)
        })?;
        Ok(existed)
    }
}

/// Delete the UDP entries matching any of `filters`; returns how many were deleted.
/// Blocking (one dump plus one request per entry); call it off the event loop
/// (`tokio::task::spawn_blocking`) on a busy router.
pub fn delete_udp_flows(filters: &[UdpFlowFilter]) -> io::Result<usize> {
    if filters.is_empty() {
        return Ok(0);
    }
    let mut ct = Conntrack::open()?;
    let stale = ct.dump(|f| filters.iter().any(|flt| flt.matches(f)))?;
    let mut deleted = 0;
    for f in &stale {
        if ct.delete(f)? {
            deleted += 1;
        }
    }
    if deleted > 0 {
        log::info!("conntrack: deleted {deleted} stale UDP entries");
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(src: &str, sport: u16, dst: &str, dport: u16) -> Tuple {
        Tuple { src: src.parse().unwrap(), dst: dst.parse().unwrap(), proto: IPPROTO_UDP, sport, dport }
    }

    /// client 198.18.0.2:40000 → node 198.18.0.1:30053, DNAT'd to 198.18.1.2:5353.
    fn nodeport_flow() -> Flow {
        Flow {
            family: wire::AF_INET,
            orig: t("198.18.0.2", 40000, "198.18.0.1", 30053),
            reply: t("198.18.1.2", 5353, "198.18.0.2", 40000),
            zone: 0,
            id: None,
        }
    }

    /// client → ClusterIP 10.96.0.10:53, DNAT'd to 198.18.1.2:5353.
    fn cluster_flow() -> Flow {
        Flow {
            family: wire::AF_INET,
            orig: t("198.18.0.2", 40001, "10.96.0.10", 53),
            reply: t("198.18.1.2", 5353, "198.18.0.2", 40001),
            zone: 0,
            id: None,
        }
    }

    /// A local DNS server on the router itself, not NAT'd.
    fn local_flow() -> Flow {
        Flow {
            family: wire::AF_INET,
            orig: t("198.18.0.2", 40002, "198.18.0.1", 30053),
            reply: t("198.18.0.1", 30053, "198.18.0.2", 40002),
            zone: 0,
            id: None,
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn service_gone_matches_its_ip_and_port_only() {
        let f = UdpFlowFilter::service(ip("10.96.0.10"), 53);
        assert!(f.matches(&cluster_flow()));
        assert!(!f.matches(&nodeport_flow()));
        assert!(!UdpFlowFilter::service(ip("10.96.0.10"), 54).matches(&cluster_flow()));
        // Flows that were never DNAT'd (sent while the service had no endpoints) too.
        let mut undnat = cluster_flow();
        undnat.reply.src = undnat.orig.dst;
        undnat.reply.sport = undnat.orig.dport;
        assert!(f.matches(&undnat));
    }

    #[test]
    fn node_port_gone_spares_local_programs() {
        let f = UdpFlowFilter::node_port(30053);
        assert!(f.matches(&nodeport_flow()));
        assert!(!f.matches(&local_flow()));
        assert!(!f.matches(&cluster_flow()));
    }

    #[test]
    fn endpoint_gone_matches_only_that_endpoint() {
        let f = UdpFlowFilter::endpoint_of_service(ip("10.96.0.10"), 53, ip("198.18.1.2"), Some(5353));
        assert!(f.matches(&cluster_flow()));
        let f2 = UdpFlowFilter::endpoint_of_service(ip("10.96.0.10"), 53, ip("198.18.1.3"), None);
        assert!(!f2.matches(&cluster_flow()));
        let f3 = UdpFlowFilter::endpoint_of_service(ip("10.96.0.10"), 53, ip("198.18.1.2"), Some(5354));
        assert!(!f3.matches(&cluster_flow()));
        let np = UdpFlowFilter::endpoint_of_node_port(30053, ip("198.18.1.2"), None);
        assert!(np.matches(&nodeport_flow()));
        assert!(!np.matches(&local_flow()));
        assert!(!np.matches(&cluster_flow()));
    }

    #[test]
    fn tcp_is_never_touched() {
        let mut f = cluster_flow();
        f.orig.proto = 6;
        assert!(!UdpFlowFilter::service(ip("10.96.0.10"), 53).matches(&f));
    }
}
