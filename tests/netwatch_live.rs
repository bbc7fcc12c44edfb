//! Node addresses against the real kernel: every selector, the seed's examples and the
//! DHCP story, in network namespaces made by the test (198.18.0.0/15, 2001:db8::/32
//! and fd00::/8 only). Needs root (CI runs as root).

mod addr;

use std::net::IpAddr;
use std::time::Duration;

use addr::{in_netns, ips, wait_for, Netns};
use nodeportd::config::AddrSelector;
use nodeportd::netwatch::NetWatch;

/// Generous: the requirement is 100 ms; CI machines are shared and slow.
const LIMIT: Duration = Duration::from_secs(3);

fn sels(list: &[&str]) -> Vec<AddrSelector> {
    list.iter().map(|s| AddrSelector::parse(s).unwrap()).collect()
}

/// A small router: `br-lan` (LAN), `wan` holding both default routes, `wg0` (a tunnel
/// stand-in), `lo`.
fn router(tag: &str) -> Netns {
    let ns = Netns::new(tag);
    for (name, cmds) in [
        ("br-lan", ["198.18.1.1/24", "fd00:1::1/64"]),
        ("wan", ["198.19.7.20/24", "2001:db8:7::20/64"]),
        ("wg0", ["198.18.200.1/24", "fd00:200::1/64"]),
    ] {
        ns.add_iface(name);
        for a in cmds {
            ns.ip(&format!("addr add {a} dev {name} nodad"));
        }
        ns.ip(&format!("link set {name} up"));
    }
    ns.ip("route add default via 198.19.7.1 dev wan");
    ns.ip("-6 route add default via 2001:db8:7::1 dev wan");
    ns
}

#[test]
fn each_selector_alone_and_combined() {
    let ns = router("sel");
    let cases: Vec<(Vec<&str>, Vec<&str>, Vec<&str>)> = vec![
        // The seed's examples (198.18.0.0/16 stands in for 192.168.0.0/16).
        (vec!["0.0.0.0/0"], vec!["198.18.1.1", "198.18.200.1", "198.19.7.20"], vec![]),
        (vec!["127.0.0.0/8"], vec!["127.0.0.1"], vec![]),
        (vec!["default-route"], vec!["198.19.7.20", "2001:db8:7::20"], vec![]),
        (vec!["127.0.0.1/32", "default-route"], vec!["127.0.0.1", "198.19.7.20", "2001:db8:7::20"], vec![]),
        (vec!["127.0.0.0/8", "198.18.0.0/16"], vec!["127.0.0.1", "198.18.1.1", "198.18.200.1"], vec![]),
        // The default (every address but loopback and link-local).
        (
            vec!["0.0.0.0/0", "::/0"],
            vec!["198.18.1.1", "198.18.200.1", "198.19.7.20", "2001:db8:7::20", "fd00:1::1", "fd00:200::1"],
            vec![],
        ),
        (vec!["primary"], vec!["198.19.7.20", "2001:db8:7::20"], vec![]),
        (vec!["localhost"], vec!["127.0.0.1", "::1"], vec![]),
        (vec!["iface:br-lan"], vec!["198.18.1.1", "fd00:1::1"], vec![]),
        (vec!["iface:wg*"], vec!["198.18.200.1", "fd00:200::1"], vec![]),
        (vec!["2001:db8::/32"], vec!["2001:db8:7::20"], vec![]),
        (vec!["iface:pppoe-wan", "iface:br-lan"], vec!["198.18.1.1", "fd00:1::1"], vec!["iface:pppoe-wan"]),
        (
            vec!["iface:wg*", "198.19.0.0/16", "localhost"],
            vec!["127.0.0.1", "198.18.200.1", "198.19.7.20", "::1", "fd00:200::1"],
            vec![],
        ),
    ];
    let name = ns.name.clone();
    in_netns(&ns, move || async move {
        for (list, want, unmatched) in cases {
            let (initial, _h, rx) = NetWatch::start(sels(&list), vec![]).await.expect("start");
            assert_eq!(ips(&initial), want, "{list:?}");
            assert_eq!(initial.unmatched, unmatched, "{list:?}");
            assert_eq!(*rx.borrow(), initial);
            // Every picked address names the selector(s) that picked it.
            for p in &initial.picked_by {
                assert!(!p.selectors.is_empty() && p.selectors.iter().all(|s| list.contains(&s.as_str())), "{p:?}");
            }
        }
        // A loopback selector turned route_localnet on in this namespace only.
        let v = addr::run(&["ip", "netns", "exec", &name, "cat", "/proc/sys/net/ipv4/conf/all/route_localnet"]);
        assert_eq!(v.trim(), "1", "route_localnet in {name}");
    });
}

#[test]
fn node_ip_is_the_primary_when_configured() {
    let ns = router("nodeip");
    in_netns(&ns, || async {
        let node_ips: Vec<IpAddr> = vec!["198.18.1.1".parse().unwrap()];
        let (initial, _h, _rx) = NetWatch::start(sels(&["primary"]), node_ips).await.expect("start");
        assert_eq!(ips(&initial), ["198.18.1.1", "2001:db8:7::20"]);
        assert_eq!(initial.primary_v4, Some("198.18.1.1".parse().unwrap()));
    });
}

/// The seed's DHCP story, live: 198.18.0.0/16 plays the seed's 172.10.0.0/16, and
/// 198.19.3.4 the seed's 192.168.3.4 outside it.
#[test]
fn dhcp_story_follows_live() {
    let ns = Netns::new("dhcp");
    ns.add_iface("eth0");
    ns.add_iface("eth1");
    ns.ip("addr add 198.18.1.2/24 dev eth0");
    ns.ip("addr add 198.19.9.9/24 dev eth1");
    ns.ip("link set eth0 up");
    ns.ip("link set eth1 up");
    ns.ip("route add default via 198.19.9.1 dev eth1");
    let n = ns.name.clone();
    in_netns(&ns, move || async move {
        let ip = |args: &str| {
            let mut v = vec!["ip", "-n", n.as_str()];
            v.extend(args.split_whitespace());
            addr::run(&v);
        };
        let (initial, h, mut rx) = NetWatch::start(sels(&["198.18.0.0/16"]), vec![]).await.expect("start");
        assert_eq!(ips(&initial), ["198.18.1.2"]);

        // The lease moves inside the range: new in, old out.
        ip("addr add 198.18.2.100/24 dev eth0");
        ip("addr del 198.18.1.2/24 dev eth0");
        let (s, took) = wait_for(&mut rx, LIMIT, "renew inside the CIDR", |s| ips(s) == ["198.18.2.100"]).await;
        assert_eq!(s.picked_by[0].selectors, ["198.18.0.0/16"]);
        eprintln!("renew inside the CIDR published after {took:?}");

        // The lease moves outside the range: no NodePort there, and the selector is
        // reported as matching nothing.
        ip("addr add 198.19.3.4/24 dev eth0");
        ip("addr del 198.18.2.100/24 dev eth0");
        let (s, _) = wait_for(&mut rx, LIMIT, "lease outside the CIDR", |s| s.v4.is_empty()).await;
        assert_eq!(s.unmatched, ["198.18.0.0/16"]);

        // ... unless default-route selects the interface (SIGHUP with a new list).
        h.reconfigure(sels(&["198.18.0.0/16", "default-route"]), vec![]).expect("reconfigure");
        wait_for(&mut rx, LIMIT, "default-route on eth1", |s| ips(s) == ["198.19.9.9"]).await;

        // The default route moves to eth0: default-route follows.
        ip("route replace default via 198.19.3.1 dev eth0");
        let (s, _) = wait_for(&mut rx, LIMIT, "default route moved", |s| ips(s) == ["198.19.3.4"]).await;
        assert_eq!(s.picked_by[0].selectors, ["default-route"]);
        assert_eq!(s.primary_v4, Some("198.19.3.4".parse().unwrap()));

        // The route goes away entirely (WAN down): nothing, not an error.
        ip("route del default");
        let (s, _) = wait_for(&mut rx, LIMIT, "no default route", |s| s.v4.is_empty()).await;
        assert_eq!(s.unmatched, ["198.18.0.0/16", "default-route"]);
    });
}

#[test]
fn interface_down_up_and_rename() {
    let ns = router("link");
    let n = ns.name.clone();
    in_netns(&ns, move || async move {
        let ip = |args: &str| {
            let mut v = vec!["ip", "-n", n.as_str()];
            v.extend(args.split_whitespace());
            addr::run(&v);
        };
        let (initial, h, mut rx) =
            NetWatch::start(sels(&["iface:wan", "default-route", "0.0.0.0/0"]), vec![]).await.expect("start");
        assert!(ips(&initial).contains(&"198.19.7.20".to_string()));

        // WAN down: its IPv4 address stays configured but is no longer local; the
        // kernel also drops the default route silently (no RTM_DELROUTE for IPv4).
        ip("link set wan down");
        let (s, _) = wait_for(&mut rx, LIMIT, "wan down", |s| !ips(s).iter().any(|a| a.starts_with("198.19."))).await;
        assert_eq!(s.unmatched, ["iface:wan", "default-route"]);
        assert_eq!(ips(&s), ["198.18.1.1", "198.18.200.1"]);

        // Renamed while down, then up: the old name matches nothing, the new one does.
        ip("link set wan name wan2");
        ip("link set wan2 up");
        let (s, _) = wait_for(&mut rx, LIMIT, "wan2 up", |s| ips(s).contains(&"198.19.7.20".to_string())).await;
        assert_eq!(s.unmatched, ["iface:wan", "default-route"]);
        h.reconfigure(sels(&["iface:wan*"]), vec![]).expect("reconfigure");
        wait_for(&mut rx, LIMIT, "iface:wan* matches wan2", |s| ips(s) == ["198.19.7.20"] && s.unmatched.is_empty())
            .await;
    });
}

/// An address flapping quickly: whatever the bursts, the final state is published.
#[test]
fn flapping_never_loses_the_final_state() {
    let ns = Netns::new("flap");
    ns.add_iface("eth0");
    ns.ip("link set eth0 up");
    let n = ns.name.clone();
    in_netns(&ns, move || async move {
        let (initial, _h, mut rx) = NetWatch::start(sels(&["198.18.0.0/15"]), vec![]).await.expect("start");
        assert!(initial.v4.is_empty());
        // One `ip -batch` so the changes come faster than the quiet period.
        let mut batch = String::new();
        for _ in 0..40 {
            batch.push_str("addr add 198.18.5.1/24 dev eth0\naddr del 198.18.5.1/24 dev eth0\n");
        }
        batch.push_str("addr add 198.18.5.2/24 dev eth0\n");
        let path = std::env::temp_dir().join(format!("{n}.batch"));
        std::fs::write(&path, batch).unwrap();
        let p = path.to_string_lossy().into_owned();
        addr::run(&["ip", "-n", &n, "-batch", &p]);
        let _ = std::fs::remove_file(&path);
        wait_for(&mut rx, LIMIT, "final state after flapping", |s| ips(s) == ["198.18.5.2"]).await;
        // And it stays there: nothing older is published after it.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(ips(&rx.borrow()), ["198.18.5.2"]);
    });
}

#[test]
fn ipv6_dad_and_link_local() {
    let ns = Netns::new("dad");
    ns.add_iface("veth0");
    ns.ip("link set veth0 up");
    let n = ns.name.clone();
    in_netns(&ns, move || async move {
        let (initial, _h, mut rx) = NetWatch::start(sels(&["::/0"]), vec![]).await.expect("start");
        // veth links get fe80:: addresses: never NodePort addresses.
        assert!(initial.v6.is_empty(), "{initial}");
        // With DAD (about a second on veth) the address joins once it is usable.
        addr::run(&["ip", "-n", &n, "addr", "add", "fd00:5::1/64", "dev", "veth0"]);
        let (_, took) = wait_for(&mut rx, Duration::from_secs(6), "DAD done", |s| ips(s) == ["fd00:5::1"]).await;
        eprintln!("fd00:5::1 published {took:?} after being added (DAD)");
    });
}

/// PPPoE-style point-to-point address: ours is IFA_LOCAL, the peer's IFA_ADDRESS.
#[test]
fn point_to_point_address_is_ours_not_the_peers() {
    let ns = Netns::new("ptp");
    ns.add_iface("pppoe-wan");
    ns.ip("addr add 198.19.20.5 peer 198.19.20.1/32 dev pppoe-wan");
    ns.ip("link set pppoe-wan up");
    ns.ip("route add default via 198.19.20.1 dev pppoe-wan onlink");
    in_netns(&ns, || async {
        let (initial, _h, _rx) =
            NetWatch::start(sels(&["iface:pppoe-wan", "default-route"]), vec![]).await.expect("start");
        assert_eq!(ips(&initial), ["198.19.20.5"]);
        assert_eq!(initial.picked_by[0].selectors, ["iface:pppoe-wan", "default-route"]);
        assert_eq!(initial.primary_v4, Some("198.19.20.5".parse().unwrap()));
    });
}
