//! Node addresses: where NodePorts answer, followed live with rtnetlink.
//!
//! `select` is the pure part (snapshot + selectors → address set). This module reads
//! the links, addresses and default routes over rtnetlink, subscribes to their change
//! groups, and republishes the set after each burst of events.
//!
//! Netlink events are used as triggers only: after a short quiet period the state is
//! dumped again and the set recomputed. That is race-free (a dump started after the
//! last event reflects it) and also covers the IPv4 routes the kernel removes without
//! any RTM_DELROUTE (routes flushed when their interface goes down).

pub mod select;

use std::io;
use std::net::IpAddr;
use std::time::Duration;

use futures::stream::{StreamExt, TryStreamExt};
use netlink_packet_core::NetlinkPayload;
use netlink_packet_route::address::{AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage, State};
use netlink_packet_route::route::{RouteAttribute, RouteHeader, RouteMessage, RouteNextHopFlags, RouteType};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use rtnetlink::{Handle, MulticastGroup};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::config::AddrSelector;
pub use select::{describe_change, select, Addr, DefaultRoute, Link, NodeAddresses, Picked, Snapshot};

/// Wait this long after the last event before recomputing: a DHCP renew or a PPPoE
/// reconnect arrives as a burst of link/address/route messages.
pub const QUIET: Duration = Duration::from_millis(20);
/// ...but never longer than this after the first event of a burst, so a link that
/// keeps flapping still gets its state published (the 100 ms budget).
pub const MAX_DELAY: Duration = Duration::from_millis(50);
/// After a failed dump, try again this much later.
const RETRY: Duration = Duration::from_secs(1);

pub(crate) const GROUPS: [MulticastGroup; 5] = [
    MulticastGroup::Link,
    MulticastGroup::Ipv4Ifaddr,
    MulticastGroup::Ipv6Ifaddr,
    MulticastGroup::Ipv4Route,
    MulticastGroup::Ipv6Route,
];

/// rtnetlink's own Display prints an unexpected message with `{:?}`, which links the Debug
/// code of every rtnetlink message type (~120 KB on mipsel). Only its kind is worth a log line.
pub(crate) fn nl_err(what: &str, e: rtnetlink::Error) -> io::Error {
    match e {
        rtnetlink::Error::NetlinkError(m) => {
            io::Error::new(m.to_io().kind(), format!("rtnetlink {what}: {}", m.to_io()))
        }
        rtnetlink::Error::UnexpectedMessage(m) => {
            io::Error::other(format!("rtnetlink {what}: unexpected message type {}", m.header.message_type))
        }
        rtnetlink::Error::RequestFailed => io::Error::other(format!("rtnetlink {what}: request failed")),
        _ => io::Error::other(format!("rtnetlink {what}: malformed reply")),
    }
}

/// Read the node's links, addresses and main-table default routes.
pub async fn dump(handle: &Handle) -> io::Result<Snapshot> {
    let mut snap = Snapshot::default();
    let mut links = handle.link().get().execute();
    while let Some(m) = links.try_next().await.map_err(|e| nl_err("link dump", e))? {
        snap.links.push(link_from(&m));
    }
    let mut addrs = handle.address().get().execute();
    while let Some(m) = addrs.try_next().await.map_err(|e| nl_err("address dump", e))? {
        if let Some(a) = addr_from(&m) {
            snap.addrs.push(a);
        }
    }
    for family in [AddressFamily::Inet, AddressFamily::Inet6] {
        let mut req = RouteMessage::default();
        req.header.address_family = family;
        let mut routes = handle.route().get(req).execute();
        while let Some(m) = routes.try_next().await.map_err(|e| nl_err("route dump", e))? {
            if let Some(r) = default_route_from(&m) {
                snap.default_routes.push(r);
            }
        }
    }
    Ok(snap)
}

fn link_from(m: &LinkMessage) -> Link {
    let mut name = String::new();
    let mut oper_up = false;
    for a in &m.attributes {
        match a {
            LinkAttribute::IfName(n) => name = n.clone(),
            LinkAttribute::OperState(s) => oper_up = matches!(s, State::Up | State::Unknown),
            _ => {}
        }
    }
    Link { index: m.header.index, name, up: m.header.flags.contains(LinkFlags::Up), oper_up }
}

fn addr_from(m: &AddressMessage) -> Option<Addr> {
    let mut address = None;
    let mut local = None;
    let mut flags = AddressFlags::from_bits_retain(u32::from(m.header.flags.bits()));
    for a in &m.attributes {
        match a {
            AddressAttribute::Address(ip) => address = Some(*ip),
            AddressAttribute::Local(ip) => local = Some(*ip),
            AddressAttribute::Flags(f) => flags = *f,
            _ => {}
        }
    }
    // On point-to-point links (PPPoE) IFA_ADDRESS is the peer; IFA_LOCAL is ours.
    let ip = local.or(address)?;
    Some(Addr {
        ifindex: m.header.index,
        ip,
        prefix: m.header.prefix_len,
        tentative: flags.intersects(AddressFlags::Tentative | AddressFlags::Dadfailed),
        secondary: flags.contains(AddressFlags::Secondary) || m.header.flags.contains(AddressHeaderFlags::Secondary),
    })
}

fn default_route_from(m: &RouteMessage) -> Option<DefaultRoute> {
    let h: &RouteHeader = &m.header;
    if h.destination_prefix_length != 0 || h.kind != RouteType::Unicast {
        return None;
    }
    let v6 = match h.address_family {
        AddressFamily::Inet => false,
        AddressFamily::Inet6 => true,
        _ => return None,
    };
    let mut table = u32::from(h.table);
    let mut metric = 0;
    let mut ifindexes = Vec::new();
    for a in &m.attributes {
        match a {
            RouteAttribute::Table(t) => table = *t,
            RouteAttribute::Priority(p) => metric = *p,
            RouteAttribute::Oif(i) => ifindexes.push(*i),
            RouteAttribute::MultiPath(hops) => {
                for nh in hops {
                    // A dead nexthop carries no traffic (its interface is down).
                    if !nh.flags.intersects(RouteNextHopFlags::Dead | RouteNextHopFlags::Linkdown) {
                        ifindexes.push(nh.interface_index);
                    }
                }
            }
            _ => {}
        }
    }
    (table == u32::from(RouteHeader::RT_TABLE_MAIN) && !ifindexes.is_empty()).then_some(DefaultRoute {
        v6,
        metric,
        ifindexes,
    })
}

/// Commands the owner can send to a running watcher.
enum Command {
    Reconfigure(Vec<AddrSelector>, Vec<IpAddr>),
    Refresh,
}

/// Control of a running watcher (cheap to clone).
#[derive(Clone)]
pub struct NetWatchHandle {
    tx: mpsc::UnboundedSender<Command>,
}

impl NetWatchHandle {
    /// New selectors / node IPs (SIGHUP): recomputed and published at once.
    pub fn reconfigure(&self, selectors: Vec<AddrSelector>, node_ips: Vec<IpAddr>) -> io::Result<()> {
        self.tx
            .send(Command::Reconfigure(selectors, node_ips))
            .map_err(|_| io::Error::other("the netwatch task has stopped"))
    }

    /// Dump and recompute now, even without an event.
    pub fn refresh(&self) -> io::Result<()> {
        self.tx.send(Command::Refresh).map_err(|_| io::Error::other("the netwatch task has stopped"))
    }
}

/// The address watcher.
pub struct NetWatch;

type Messages = futures::channel::mpsc::UnboundedReceiver<(
    netlink_packet_core::NetlinkMessage<RouteNetlinkMessage>,
    netlink_sys::SocketAddr,
)>;

fn connect() -> io::Result<(Handle, Messages)> {
    let (conn, handle, messages) = rtnetlink::new_multicast_connection(&GROUPS)?;
    tokio::spawn(conn);
    Ok((handle, messages))
}

impl NetWatch {
    /// Read the current state, compute the set, and keep following the kernel on a
    /// task of the current runtime. The receiver always holds the newest set; the
    /// task stops when every receiver and handle is dropped.
    ///
    /// Sockets are opened in the calling thread's network namespace.
    pub async fn start(
        selectors: Vec<AddrSelector>,
        node_ips: Vec<IpAddr>,
    ) -> io::Result<(NodeAddresses, NetWatchHandle, watch::Receiver<NodeAddresses>)> {
        // Subscribe before the first dump, so nothing between the two is missed.
        let (handle, messages) = connect()?;
        let snap = dump(&handle).await?;
        let initial = select(&snap, &selectors, &node_ips);
        log::info!("nodeport addresses: {initial}");
        let mut localnet = RouteLocalnet::default();
        localnet.apply(&initial);
        let (tx, rx) = watch::channel(initial.clone());
        let (ctl_tx, ctl_rx) = mpsc::unbounded_channel();
        let task = Task { handle, messages, selectors, node_ips, tx, ctl: ctl_rx, localnet };
        tokio::spawn(task.run());
        Ok((initial, NetWatchHandle { tx: ctl_tx }, rx))
    }
}

struct Task {
    handle: Handle,
    messages: Messages,
    selectors: Vec<AddrSelector>,
    node_ips: Vec<IpAddr>,
    tx: watch::Sender<NodeAddresses>,
    ctl: mpsc::UnboundedReceiver<Command>,
    localnet: RouteLocalnet,
}

impl Task {
    async fn run(mut self) {
        // When a burst started, and when to act on it.
        let mut pending: Option<(Instant, Instant)> = None;
        let mut ctl_open = true;
        loop {
            let deadline = pending.map(|(_, at)| at);
            tokio::select! {
                msg = self.messages.next() => match msg {
                    Some((m, _)) => {
                        if matches!(m.payload, NetlinkPayload::Overrun(_)) {
                            log::warn!("netwatch: netlink overrun, resyncing");
                        }
                        let now = Instant::now();
                        let first = pending.map_or(now, |(f, _)| f);
                        pending = Some((first, (now + QUIET).min(first + MAX_DELAY)));
                    }
                    None => {
                        // The socket died (e.g. ENOBUFS under an event storm): reconnect
                        // and resync, since events may have been lost.
                        log::warn!("netwatch: rtnetlink socket closed, reconnecting");
                        match connect() {
                            Ok((h, m)) => {
                                self.handle = h;
                                self.messages = m;
                                pending = Some((Instant::now(), Instant::now()));
                            }
                            Err(e) => {
                                log::error!("netwatch: cannot reopen rtnetlink: {e}");
                                tokio::time::sleep(RETRY).await;
                            }
                        }
                    }
                },
                cmd = self.ctl.recv(), if ctl_open => match cmd {
                    Some(Command::Reconfigure(s, n)) => {
                        self.selectors = s;
                        self.node_ips = n;
                        pending = Some((Instant::now(), Instant::now()));
                    }
                    Some(Command::Refresh) => pending = Some((Instant::now(), Instant::now())),
                    None => ctl_open = false,
                },
                _ = sleep_until_opt(deadline) => {
                    pending = None;
                    if let Err(e) = self.recompute().await {
                        log::warn!("netwatch: {e}; retrying in {RETRY:?}");
                        let now = Instant::now();
                        pending = Some((now, now + RETRY));
                    }
                },
                _ = self.tx.closed() => return,
            }
        }
    }

    async fn recompute(&mut self) -> io::Result<()> {
        let snap = dump(&self.handle).await?;
        let new = select(&snap, &self.selectors, &self.node_ips);
        let old = self.tx.borrow().clone();
        if new == old {
            return Ok(());
        }
        if let Some(d) = describe_change(&old, &new) {
            log::info!("nodeport addresses: {d}");
        }
        if new.unmatched != old.unmatched && !new.unmatched.is_empty() {
            log::info!("nodeport_addresses selectors matching nothing now: {}", new.unmatched.join(", "));
        }
        // Before publishing: the rules for 127/8 must not go live before the sysctl.
        self.localnet.apply(&new);
        self.tx.send_replace(new);
        Ok(())
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// `net.ipv4.conf.all.route_localnet` while IPv4 loopback addresses are NodePort
/// addresses. "all" rather than one interface: the kernel ORs the `all` and the
/// per-device value, the check is made on the interface the DNAT'd packet leaves by,
/// and endpoints may sit behind any interface, including ones that appear later.
/// The previous value is put back when loopback is no longer selected.
#[derive(Default)]
struct RouteLocalnet {
    previous: Option<String>,
}

const ROUTE_LOCALNET: &str = "/proc/sys/net/ipv4/conf/all/route_localnet";

impl RouteLocalnet {
    fn apply(&mut self, set: &NodeAddresses) {
        let want = set.needs_route_localnet();
        match (want, &self.previous) {
            (true, None) => {
                let before = std::fs::read_to_string(ROUTE_LOCALNET).unwrap_or_default().trim().to_string();
                if before == "1" {
                    return;
                }
                match std::fs::write(ROUTE_LOCALNET, "1") {
                    Ok(()) => {
                        log::info!(
                            "set net.ipv4.conf.all.route_localnet=1 (was {before}): IPv4 loopback NodePorts are selected"
                        );
                        self.previous = Some(before);
                    }
                    Err(e) => log::warn!(
                        "cannot set net.ipv4.conf.all.route_localnet=1 ({ROUTE_LOCALNET}: {e}); NodePorts on 127.0.0.0/8 will not reach remote endpoints"
                    ),
                }
            }
            (false, Some(before)) => {
                match std::fs::write(ROUTE_LOCALNET, before) {
                    Ok(()) => log::info!(
                        "restored net.ipv4.conf.all.route_localnet={before}: no IPv4 loopback NodePorts any more"
                    ),
                    Err(e) => log::warn!("cannot restore {ROUTE_LOCALNET} to {before}: {e}"),
                }
                self.previous = None;
            }
            _ => {}
        }
    }
}
