//! Stale UDP conntrack deletion against the real kernel: client → router (nft DNAT)
//! → backends, in three network namespaces (198.18.0.0/15 and 2001:db8::/32 only).
//! The endpoint behind a NodePort goes away, the client keeps sending from the same
//! port and is black-holed by the old entry until `delete_udp_flows` removes it.

mod addr;

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use addr::Netns;
use nodeportd::conntrack::{delete_udp_flows, Conntrack, UdpFlowFilter};

fn enter(ns: &str) {
    let f = std::fs::File::open(format!("/var/run/netns/{ns}")).expect("netns file");
    // SAFETY: a valid fd for the call; only the calling thread changes namespace.
    let rc = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&f), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns {ns}: {}", std::io::Error::last_os_error());
}

/// Run `f` on a thread inside `ns` and wait for its result.
fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        enter(&ns);
        f()
    })
    .join()
    .unwrap_or_else(|p| std::panic::resume_unwind(p))
}

/// A UDP server on `bind` inside `ns` that answers every datagram with its own address.
struct Echo {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Echo {
    fn start(ns: &str, bind: &str) -> Echo {
        let stop = Arc::new(AtomicBool::new(false));
        let (ns, bind, s2) = (ns.to_string(), bind.to_string(), stop.clone());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            enter(&ns);
            let sock = UdpSocket::bind(&bind).unwrap_or_else(|e| panic!("bind {bind}: {e}"));
            sock.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            ready_tx.send(()).unwrap();
            let mut buf = [0u8; 512];
            while !s2.load(Ordering::SeqCst) {
                if let Ok((_, peer)) = sock.recv_from(&mut buf) {
                    let _ = sock.send_to(bind.as_bytes(), peer);
                }
            }
        });
        ready_rx.recv_timeout(Duration::from_secs(5)).expect("echo server ready");
        Echo { stop, thread: Some(thread) }
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Send one datagram from `from` (inside `ns`) to `to`; the answer, or None after 1 s.
fn ask(ns: &str, from: &str, to: &str) -> Option<String> {
    let (from, to) = (from.to_string(), to.parse::<SocketAddr>().unwrap());
    in_ns(ns, move || {
        let sock = UdpSocket::bind(&from).unwrap_or_else(|e| panic!("bind {from}: {e}"));
        sock.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        sock.send_to(b"ping", to).unwrap();
        let mut buf = [0u8; 512];
        sock.recv_from(&mut buf).ok().map(|(n, _)| String::from_utf8_lossy(&buf[..n]).into_owned())
    })
}

fn nft(ns: &Netns, rules: &str) {
    let path = std::env::temp_dir().join(format!("{}.nft", ns.name));
    std::fs::write(&path, rules).unwrap();
    ns.exec(&["nft", "-f", &path.to_string_lossy()]);
    let _ = std::fs::remove_file(&path);
}

/// The DNAT rules: NodePort 30053 and ClusterIP 198.18.12.10:53 to `v4_ep`, and
/// [2001:db8:10::1]:30053 to `v6_ep`.
fn dnat_rules(v4_ep: &str, v6_ep: &str) -> String {
    format!(
        "table inet nwtest {{\n  chain pre {{\n    type nat hook prerouting priority dstnat; policy accept;\n    \
         ip daddr 198.18.10.1 udp dport 30053 dnat ip to {v4_ep}\n    \
         ip daddr 198.18.12.10 udp dport 53 dnat ip to {v4_ep}\n    \
         ip6 daddr 2001:db8:10::1 udp dport 30053 dnat ip6 to {v6_ep}\n  }}\n}}\n"
    )
}

struct Lab {
    client: Netns,
    router: Netns,
    backend: Netns,
}

fn lab() -> Lab {
    let client = Netns::new("ctc");
    let router = Netns::new("ctr");
    let backend = Netns::new("ctb");
    // Without DAD the veths' link-local addresses are usable at once; a router whose
    // link-local is still tentative sends no neighbour solicitation when forwarding.
    for ns in [&client, &router, &backend] {
        ns.exec(&["sysctl", "-q", "-w", "net.ipv6.conf.default.accept_dad=0", "net.ipv6.conf.all.accept_dad=0"]);
    }
    router.ip(&format!("link add r-c type veth peer name c-r netns {}", client.name));
    router.ip(&format!("link add r-b type veth peer name b-r netns {}", backend.name));
    for (ns, dev, addrs) in [
        (&client, "c-r", &["198.18.10.2/24", "2001:db8:10::2/64"][..]),
        (&router, "r-c", &["198.18.10.1/24", "2001:db8:10::1/64"][..]),
        (&router, "r-b", &["198.18.11.1/24", "2001:db8:11::1/64"][..]),
        (&backend, "b-r", &["198.18.11.2/24", "198.18.11.3/24", "2001:db8:11::2/64", "2001:db8:11::3/64"][..]),
    ] {
        for a in addrs {
            ns.ip(&format!("addr add {a} dev {dev} nodad"));
        }
        ns.ip(&format!("link set {dev} up"));
    }
    client.ip("route add 198.18.12.0/24 via 198.18.10.1");
    // Removing endpoint .2 (the interface's first address) must not take .3 with it.
    backend.exec(&["sysctl", "-q", "-w", "net.ipv4.conf.b-r.promote_secondaries=1"]);
    backend.ip("route add default via 198.18.11.1");
    backend.ip("-6 route add default via 2001:db8:11::1");
    router.exec(&["sysctl", "-q", "-w", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"]);
    nft(&router, &dnat_rules("198.18.11.2:5353", "[2001:db8:11::2]:5353"));
    // Resolve the IPv6 neighbours on both links first (the router answers port 9 with
    // ICMPv6 unreachable): a veth's very first forwarded IPv6 datagram can otherwise be
    // lost while neighbour discovery settles, which is not what this test is about.
    let _ = ask(&client.name, "[2001:db8:10::2]:9", "[2001:db8:10::1]:9");
    let _ = ask(&backend.name, "[2001:db8:11::2]:9", "[2001:db8:11::1]:9");
    Lab { client, router, backend }
}

fn conntrack_list(router: &Netns) -> String {
    // conntrack -L prints its summary on stderr; stdout has one line per entry.
    router.exec(&["conntrack", "-L", "-p", "udp"])
}

#[test]
fn stale_udp_entries_of_a_removed_endpoint_are_deleted() {
    let lab = lab();
    let r = lab.router.name.clone();
    let old4 = Echo::start(&lab.backend.name, "198.18.11.2:5353");
    let new4 = Echo::start(&lab.backend.name, "198.18.11.3:5353");
    let old6 = Echo::start(&lab.backend.name, "[2001:db8:11::2]:5353");
    let new6 = Echo::start(&lab.backend.name, "[2001:db8:11::3]:5353");
    let c = lab.client.name.clone();

    // Traffic through the NodePort (v4 and v6) and the ClusterIP stand-in.
    assert_eq!(ask(&c, "198.18.10.2:40000", "198.18.10.1:30053").as_deref(), Some("198.18.11.2:5353"));
    assert_eq!(ask(&c, "198.18.10.2:40001", "198.18.12.10:53").as_deref(), Some("198.18.11.2:5353"));
    let a6 = ask(&c, "[2001:db8:10::2]:40000", "[2001:db8:10::1]:30053");
    assert_eq!(a6.as_deref(), Some("[2001:db8:11::2]:5353"));
    let before = conntrack_list(&lab.router);
    assert!(before.contains("dport=30053") && before.contains("src=198.18.11.2"), "{before}");
    assert!(before.contains("dst=2001:db8:10::1"), "{before}");

    // Our own dump sees the same entries, parsed (addresses and ports in host order).
    let seen = in_ns(&r, || {
        Conntrack::open().expect("ctnetlink").dump(|f| f.orig.dport == 30053 || f.orig.dport == 53).expect("dump")
    });
    assert_eq!(seen.len(), 3, "{seen:?}");
    let v4 = seen.iter().find(|f| f.orig.dst.to_string() == "198.18.10.1").expect("v4 nodeport flow");
    assert_eq!((v4.orig.sport, v4.reply.src.to_string(), v4.reply.sport), (40000, "198.18.11.2".into(), 5353));

    // The endpoints move: 198.18.11.2 / 2001:db8:11::2 go away, .3 / ::3 take over.
    drop(old4);
    drop(old6);
    lab.backend.ip("addr del 198.18.11.2/24 dev b-r");
    lab.backend.ip("addr del 2001:db8:11::2/64 dev b-r");
    lab.router.exec(&["nft", "delete", "table", "inet", "nwtest"]);
    nft(&lab.router, &dnat_rules("198.18.11.3:5353", "[2001:db8:11::3]:5353"));

    // The client keeps its source port, as UDP clients do: the old entry black-holes it.
    assert_eq!(ask(&c, "198.18.10.2:40000", "198.18.10.1:30053"), None, "expected the stale entry to black-hole");

    // Delete what points at the removed endpoints (NodePort on any address, v4 + v6).
    let n = in_ns(&r, || {
        delete_udp_flows(&[
            UdpFlowFilter::endpoint_of_node_port(30053, "198.18.11.2".parse().unwrap(), Some(5353)),
            UdpFlowFilter::endpoint_of_node_port(30053, "2001:db8:11::2".parse().unwrap(), None),
        ])
        .expect("delete")
    });
    assert_eq!(n, 2);
    let after = conntrack_list(&lab.router);
    assert!(!after.contains("dport=30053"), "{after}");
    // The ClusterIP flow (another service) is untouched.
    assert!(after.contains("dst=198.18.12.10"), "{after}");

    // Same client port again: now it reaches the new endpoint.
    assert_eq!(ask(&c, "198.18.10.2:40000", "198.18.10.1:30053").as_deref(), Some("198.18.11.3:5353"));
    assert_eq!(ask(&c, "[2001:db8:10::2]:40000", "[2001:db8:10::1]:30053").as_deref(), Some("[2001:db8:11::3]:5353"));

    // The service itself is deleted: its entries go, the NodePort's new one stays.
    let n = in_ns(&r, || delete_udp_flows(&[UdpFlowFilter::service("198.18.12.10".parse().unwrap(), 53)]).unwrap());
    assert_eq!(n, 1);
    let last = conntrack_list(&lab.router);
    assert!(!last.contains("dst=198.18.12.10"), "{last}");
    assert!(last.contains("src=198.18.11.3"), "{last}");
    // Nothing left to delete: deleting again is a no-op, not an error.
    let n = in_ns(&r, || delete_udp_flows(&[UdpFlowFilter::service("198.18.12.10".parse().unwrap(), 53)]).unwrap());
    assert_eq!(n, 0);
    drop(new4);
    drop(new6);
}
