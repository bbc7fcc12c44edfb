// The golden cases: representative services and their backends. Shared by the
// builder's golden tests (src/dataplane/tests.rs) and the kernel test
// (tests/nft_dataplane.rs), which `include!` it after importing `BTreeMap`, `Backend`,
// `Service`, `Input` and `ServiceInput`.

pub(crate) const NODE: &str = "router-1";

fn input<'a>(services: Vec<ServiceInput<'a>>) -> Input<'a> {
    Input {
        table: "nodeportd".into(),
        node_name: NODE.into(),
        masquerade_mark: 0x4000,
        ct_mark: 0x8000,
        nodeport_ips_v4: vec!["198.18.1.1".parse().unwrap(), "198.18.2.1".parse().unwrap()],
        nodeport_ips_v6: vec!["2001:db8:1::1".parse().unwrap()],
        services,
    }
}

pub(crate) fn svc(json: &str) -> Service {
    serde_json::from_str(json).unwrap_or_else(|e| panic!("fixture {json}: {e}"))
}

/// `"198.18.2.11:8080 ready node=router-1"`; flags: ready, serving, terminating.
pub(crate) fn be(spec: &str) -> Backend {
    let mut parts = spec.split_whitespace();
    let addr: std::net::SocketAddr = parts.next().unwrap().parse().unwrap();
    let mut b =
        Backend { ip: addr.ip(), port: addr.port(), ready: false, serving: false, terminating: false, node_name: None };
    for p in parts {
        match p {
            "ready" => {
                b.ready = true;
                b.serving = true;
            }
            "serving" => b.serving = true,
            "terminating" => b.terminating = true,
            n if n.starts_with("node=") => b.node_name = Some(n[5..].to_string()),
            other => panic!("bad backend flag {other}"),
        }
    }
    b
}

fn ports(list: &[(&str, &[&str])]) -> BTreeMap<String, Vec<Backend>> {
    list.iter().map(|(name, bs)| (name.to_string(), bs.iter().map(|s| be(s)).collect())).collect()
}

struct Case {
    name: &'static str,
    service: &'static str,
    backends: &'static [(&'static str, &'static [&'static str])],
}

const CASES: &[Case] = &[
    Case {
        name: "nodeport",
        service: r#"{"metadata":{"name":"web","namespace":"default"},
            "spec":{"type":"NodePort","clusterIP":"198.19.0.10","clusterIPs":["198.19.0.10"],
            "ports":[{"port":80,"targetPort":8080,"protocol":"TCP","nodePort":30080}]}}"#,
        backends: &[("", &["198.18.2.11:8080 ready node=router-1", "198.18.2.12:8080 ready node=node-2"])],
    },
    Case {
        name: "clusterip",
        service: r#"{"metadata":{"name":"dns","namespace":"kube-system"},
            "spec":{"clusterIP":"198.19.0.53",
            "ports":[{"name":"dns","port":53,"protocol":"UDP"},{"name":"dns-tcp","port":53,"protocol":"TCP"}]}}"#,
        backends: &[
            ("dns", &["198.18.2.11:53 ready", "198.18.2.12:53 ready"]),
            ("dns-tcp", &["198.18.2.11:53 ready", "198.18.2.12:53 ready"]),
        ],
    },
    Case {
        name: "loadbalancer-local",
        service: r#"{"metadata":{"name":"ingress","namespace":"edge"},
            "spec":{"type":"LoadBalancer","clusterIP":"198.19.0.20","externalTrafficPolicy":"Local",
            "healthCheckNodePort":32000,
            "ports":[{"name":"https","port":443,"targetPort":8443,"nodePort":30443}]},
            "status":{"loadBalancer":{"ingress":[{"ip":"198.18.3.100"}]}}}"#,
        backends: &[("https", &["198.18.2.11:8443 ready node=router-1", "198.18.2.12:8443 ready node=node-2"])],
    },
    Case {
        name: "local-without-local-endpoints",
        service: r#"{"metadata":{"name":"far","namespace":"default"},
            "spec":{"type":"NodePort","clusterIP":"198.19.0.21","externalTrafficPolicy":"Local",
            "externalIPs":["198.18.3.21"],
            "ports":[{"port":80,"nodePort":30021}]}}"#,
        backends: &[("", &["198.18.2.12:80 ready node=node-2"])],
    },
    Case {
        name: "affinity",
        service: r#"{"metadata":{"name":"sticky","namespace":"default"},
            "spec":{"type":"NodePort","clusterIP":"198.19.0.30",
            "sessionAffinity":"ClientIP","sessionAffinityConfig":{"clientIP":{"timeoutSeconds":600}},
            "ports":[{"port":80,"nodePort":30030}]}}"#,
        backends: &[("", &["198.18.2.11:80 ready", "198.18.2.12:80 ready"])],
    },
    Case {
        name: "no-endpoints",
        service: r#"{"metadata":{"name":"empty","namespace":"default"},
            "spec":{"type":"NodePort","clusterIP":"198.19.0.40","externalIPs":["198.18.3.40"],
            "ports":[{"port":80,"nodePort":30040},{"name":"dns","port":53,"protocol":"UDP","nodePort":30053}]}}"#,
        backends: &[],
    },
    Case {
        name: "dual-stack",
        service: r#"{"metadata":{"name":"web6","namespace":"default"},
            "spec":{"type":"NodePort","clusterIP":"198.19.0.60","clusterIPs":["198.19.0.60","2001:db8:96::60"],
            "ipFamilies":["IPv4","IPv6"],"ipFamilyPolicy":"RequireDualStack",
            "ports":[{"name":"http","port":80,"nodePort":30060}]}}"#,
        backends: &[(
            "http",
            &["198.18.2.11:80 ready", "198.18.2.12:80 ready", "[2001:db8:2::11]:80 ready", "[2001:db8:2::12]:80 ready"],
        )],
    },
    Case {
        name: "udp",
        service: r#"{"metadata":{"name":"echo","namespace":"default"},
            "spec":{"type":"NodePort","clusterIP":"198.19.0.70",
            "ports":[{"port":7,"protocol":"UDP","nodePort":30007}]}}"#,
        backends: &[("", &["198.18.2.11:7 ready", "198.18.2.12:7 ready"])],
    },
    Case {
        name: "sctp",
        service: r#"{"metadata":{"name":"signal","namespace":"telco"},
            "spec":{"clusterIP":"198.19.0.80","ports":[{"port":3868,"protocol":"SCTP"}]}}"#,
        backends: &[("", &["198.18.2.11:3868 ready"])],
    },
    Case {
        name: "terminating",
        service: r#"{"metadata":{"name":"rollout","namespace":"default"},
            "spec":{"clusterIP":"198.19.0.90","ports":[{"port":80}]}}"#,
        backends: &[("", &["198.18.2.11:80 serving terminating", "198.18.2.12:80 terminating", "198.18.2.13:80"])],
    },
    Case {
        name: "internal-local",
        service: r#"{"metadata":{"name":"node-local-dns","namespace":"kube-system"},
            "spec":{"clusterIP":"198.19.0.110","internalTrafficPolicy":"Local",
            "ports":[{"port":53,"protocol":"UDP"}]}}"#,
        backends: &[("", &["198.18.2.11:53 ready node=router-1", "198.18.2.12:53 ready node=node-2"])],
    },
    Case {
        name: "source-ranges",
        service: r#"{"metadata":{"name":"admin","namespace":"default"},
            "spec":{"type":"LoadBalancer","clusterIP":"198.19.0.100",
            "loadBalancerSourceRanges":["198.18.1.0/24","2001:db8:1::/64","198.18.9.7/32"],
            "ports":[{"port":22,"nodePort":30022}]},
            "status":{"loadBalancer":{"ingress":[{"ip":"198.18.3.101"}]}}}"#,
        backends: &[("", &["198.18.2.11:22 ready"])],
    },
];
