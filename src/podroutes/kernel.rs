//! Pod routes in the kernel over rtnetlink: read the main table's routes to the CIDRs
//! concerned, add, replace and delete routes of our protocol. Every change names our
//! protocol, so the kernel itself refuses to delete a route of another one.

use std::collections::BTreeSet;
use std::io;

use futures::stream::TryStreamExt;
use ipnet::IpNet;
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteType};
use netlink_packet_route::AddressFamily;
use rtnetlink::{Handle, RouteMessageBuilder};

use super::{Changes, KernelRoute, Wanted, RTPROT_NODEPORTD};

use crate::netwatch::nl_err;

fn addr_of(a: &RouteAddress) -> Option<std::net::IpAddr> {
    match a {
        RouteAddress::Inet(v4) => Some((*v4).into()),
        RouteAddress::Inet6(v6) => Some((*v6).into()),
        _ => None,
    }
}

fn route_from(m: &RouteMessage) -> Option<KernelRoute> {
    let h = &m.header;
    if h.kind != RouteType::Unicast {
        return None;
    }
    let mut table = u32::from(h.table);
    let (mut dst, mut via, mut ifindex, mut metric) = (None, None, None, 0);
    for a in &m.attributes {
        match a {
            RouteAttribute::Table(t) => table = *t,
            RouteAttribute::Destination(d) => dst = addr_of(d),
            RouteAttribute::Gateway(g) => via = addr_of(g),
            RouteAttribute::Oif(i) => ifindex = Some(*i),
            RouteAttribute::Priority(p) => metric = *p,
            _ => {}
        }
    }
    if table != u32::from(RouteHeader::RT_TABLE_MAIN) {
        return None;
    }
    let cidr = IpNet::new(dst?, h.destination_prefix_length).ok()?;
    Some(KernelRoute { cidr, via, ifindex, protocol: u8::from(h.protocol), metric })
}

/// The main table's unicast routes that are ours or go to one of `cidrs` exactly.
pub async fn dump(handle: &Handle, cidrs: &BTreeSet<IpNet>) -> io::Result<Vec<KernelRoute>> {
    let mut out = Vec::new();
    for family in [AddressFamily::Inet, AddressFamily::Inet6] {
        let mut req = RouteMessage::default();
        req.header.address_family = family;
        let mut routes = handle.route().get(req).execute();
        while let Some(m) = routes.try_next().await.map_err(|e| nl_err("route dump", e))? {
            if let Some(r) = route_from(&m) {
                if r.protocol == RTPROT_NODEPORTD || cidrs.contains(&r.cidr) {
                    out.push(r);
                }
            }
        }
    }
    Ok(out)
}

/// The route builder's only error: a destination and a gateway of different families
/// (the plan never makes one). Its Display would link netlink's Debug code.
fn bad<E>(_: E) -> io::Error {
    io::Error::other("the destination and the gateway are of different address families")
}

fn message(w: &Wanted) -> io::Result<RouteMessage> {
    Ok(RouteMessageBuilder::<std::net::IpAddr>::new()
        .destination_prefix(w.route.cidr.network(), w.route.cidr.prefix_len())
        .map_err(bad)?
        .gateway(w.route.via)
        .map_err(bad)?
        .output_interface(w.ifindex)
        .protocol(RouteProtocol::from(RTPROT_NODEPORTD))
        .build())
}

fn delete_message(r: &KernelRoute) -> io::Result<RouteMessage> {
    let mut b = RouteMessageBuilder::<std::net::IpAddr>::new()
        .destination_prefix(r.cidr.network(), r.cidr.prefix_len())
        .map_err(bad)?
        .protocol(RouteProtocol::from(RTPROT_NODEPORTD))
        .priority(r.metric);
    if let Some(via) = r.via {
        b = b.gateway(via).map_err(bad)?;
    }
    if let Some(i) = r.ifindex {
        b = b.output_interface(i);
    }
    Ok(b.build())
}

/// Programs `changes`: deletions first (a moved CIDR frees its place), then
/// replacements, then additions (exclusive: an existing route is never overwritten).
/// Returns the wanted routes the kernel refused, with its reason, and the deletions
/// that failed.
pub async fn apply(handle: &Handle, changes: &Changes) -> (Vec<(Wanted, String)>, Vec<String>) {
    let mut refused = Vec::new();
    let mut errors = Vec::new();
    for r in &changes.delete {
        let res = match delete_message(r) {
            Ok(m) => handle.route().del(m).execute().await.map_err(|e| nl_err("delete", e).to_string()),
            Err(e) => Err(e.to_string()),
        };
        match res {
            Ok(()) => log::info!("pod routes: removed {} via {}", r.cidr, r.via.map_or("-".into(), |v| v.to_string())),
            Err(e) => errors.push(format!("cannot remove the route to {}: {e}", r.cidr)),
        }
    }
    for (w, replace) in changes.replace.iter().map(|w| (w, true)).chain(changes.add.iter().map(|w| (w, false))) {
        let res = match message(w) {
            Ok(m) => {
                let req = handle.route().add(m);
                let req = if replace { req.replace() } else { req };
                req.execute().await.map_err(|e| nl_err("add", e).to_string())
            }
            Err(e) => Err(e.to_string()),
        };
        match res {
            Ok(()) => log::info!(
                "pod routes: {} {} via {} dev {} (node {})",
                if replace { "changed" } else { "added" },
                w.route.cidr,
                w.route.via,
                w.dev,
                w.route.node
            ),
            Err(e) => refused.push((w.clone(), e)),
        }
    }
    (refused, errors)
}
