use super::*;

/// The data plane's test fixtures: `svc`, `be` (`"198.18.2.11:8443 ready node=router-1"`)
/// and `NODE`.
#[allow(dead_code)]
mod cases {
    use crate::dataplane::{Input, ServiceInput};
    use crate::model::{Backend, Service};
    use std::collections::BTreeMap;
    include!("../dataplane/cases.rs");
}
use cases::{be, svc, NODE};

fn lb_local(ns: &str, name: &str, hc: u16) -> Service {
    svc(&format!(
        r#"{{"metadata":{{"name":"{name}","namespace":"{ns}"}},
        "spec":{{"type":"LoadBalancer","clusterIP":"198.19.0.20","externalTrafficPolicy":"Local",
        "healthCheckNodePort":{hc},
        "ports":[{{"name":"https","port":443,"nodePort":30443}},{{"name":"http","port":80,"nodePort":30080}}]}}}}"#
    ))
}

fn bes(specs: &[&str]) -> Vec<Backend> {
    specs.iter().map(|s| be(s)).collect()
}

fn count(ports: &[Vec<Backend>], pnr: bool) -> usize {
    local_endpoints(ports.iter().map(Vec::as_slice), NODE, pnr)
}

#[test]
fn only_loadbalancer_local_with_a_port_has_a_health_check() {
    assert_eq!(port_of(&lb_local("edge", "ingress", 32000)), Some(32000));
    let cluster = svc(r#"{"metadata":{"name":"a","namespace":"d"},
        "spec":{"type":"LoadBalancer","externalTrafficPolicy":"Cluster","healthCheckNodePort":32000,
        "ports":[{"port":80}]}}"#);
    assert_eq!(port_of(&cluster), None);
    let nodeport = svc(r#"{"metadata":{"name":"a","namespace":"d"},
        "spec":{"type":"NodePort","externalTrafficPolicy":"Local","healthCheckNodePort":32000,
        "ports":[{"port":80}]}}"#);
    assert_eq!(port_of(&nodeport), None);
    let unset = svc(r#"{"metadata":{"name":"a","namespace":"d"},
        "spec":{"type":"LoadBalancer","externalTrafficPolicy":"Local","ports":[{"port":80}]}}"#);
    assert_eq!(port_of(&unset), None);
    for bad in ["0", "-1", "65536"] {
        let s = svc(&format!(
            r#"{{"metadata":{{"name":"a","namespace":"d"}},
            "spec":{{"type":"LoadBalancer","externalTrafficPolicy":"Local","healthCheckNodePort":{bad},
            "ports":[{{"port":80}}]}}}}"#
        ));
        assert_eq!(port_of(&s), None, "healthCheckNodePort {bad}");
    }
}

#[test]
fn counts_ready_endpoints_on_this_node_only() {
    let ports = vec![bes(&["198.18.2.11:8443 ready node=router-1", "198.18.2.12:8443 ready node=node-2"])];
    assert_eq!(count(&ports, false), 1);
    let none_here = vec![bes(&["198.18.2.12:8443 ready node=node-2", "198.18.2.13:8443 ready"])];
    assert_eq!(count(&none_here, false), 0);
    assert_eq!(count(&[], false), 0);
}

#[test]
fn a_pod_with_several_ports_or_families_is_counted_by_address() {
    // Two ports of the same pod: one endpoint. Another local pod: two.
    let ports = vec![
        bes(&["198.18.2.11:8443 ready node=router-1", "198.18.2.14:8443 ready node=router-1"]),
        bes(&["198.18.2.11:8080 ready node=router-1"]),
    ];
    assert_eq!(count(&ports, false), 2);
    // The same endpoint listed twice (two slices) is still one.
    let dup = vec![bes(&["198.18.2.11:8443 ready node=router-1", "198.18.2.11:8443 ready node=router-1"])];
    assert_eq!(count(&dup, false), 1);
    // Dual-stack: each address family's endpoint is an address of its own (kube-proxy
    // counts endpoint IPs).
    let dual = vec![bes(&["198.18.2.11:8443 ready node=router-1", "[2001:db8:2::11]:8443 ready node=router-1"])];
    assert_eq!(count(&dual, false), 2);
}

#[test]
fn not_ready_and_terminating_endpoints_do_not_count() {
    let not_ready = vec![bes(&["198.18.2.11:8443 node=router-1"])];
    assert_eq!(count(&not_ready, false), 0);
    // Terminating but serving: the data plane drains to it, the health check fails so
    // that the load balancer moves new connections elsewhere.
    let draining = vec![bes(&["198.18.2.11:8443 serving terminating node=router-1"])];
    assert_eq!(count(&draining, false), 0);
    let mixed =
        vec![bes(&["198.18.2.11:8443 serving terminating node=router-1", "198.18.2.14:8443 ready node=router-1"])];
    assert_eq!(count(&mixed, false), 1);
    // A ready endpoint elsewhere does not make a local terminating one count.
    let elsewhere =
        vec![bes(&["198.18.2.11:8443 serving terminating node=router-1", "198.18.2.12:8443 ready node=n2"])];
    assert_eq!(count(&elsewhere, false), 0);
}

#[test]
fn publish_not_ready_counts_every_local_endpoint() {
    let ports = vec![bes(&["198.18.2.11:8443 node=router-1", "198.18.2.12:8443 node=node-2"])];
    assert_eq!(count(&ports, true), 1);
    let s = svc(r#"{"metadata":{"name":"a","namespace":"d"},
        "spec":{"type":"LoadBalancer","externalTrafficPolicy":"Local","healthCheckNodePort":32001,
        "publishNotReadyAddresses":true,"ports":[{"port":80}]}}"#);
    let (port, hc) = for_service(&s, ports.iter().map(Vec::as_slice), NODE).unwrap();
    assert_eq!((port, hc.local_endpoints), (32001, 1));
}

#[test]
fn endpoints_without_a_port_do_not_count() {
    // The data plane skips them (no target port resolved).
    let ports = vec![bes(&["198.18.2.11:0 ready node=router-1"])];
    assert_eq!(count(&ports, false), 0);
}

#[test]
fn desired_maps_ports_to_services() {
    let a = lb_local("edge", "ingress", 32000);
    let b = lb_local("default", "web", 32001);
    let plain = svc(r#"{"metadata":{"name":"p","namespace":"d"},"spec":{"type":"ClusterIP","ports":[{"port":80}]}}"#);
    let a_ports = vec![bes(&["198.18.2.11:8443 ready node=router-1"]), bes(&["198.18.2.11:8080 ready node=router-1"])];
    let b_ports = vec![bes(&["198.18.2.12:8443 ready node=node-2"])];
    let p_ports = vec![bes(&["198.18.2.13:80 ready node=router-1"])];
    let d = desired([(&a, a_ports.as_slice()), (&b, b_ports.as_slice()), (&plain, p_ports.as_slice())], NODE);
    assert_eq!(
        d,
        vec![
            (32000, HealthCheck { namespace: "edge".into(), name: "ingress".into(), local_endpoints: 1 }),
            (32001, HealthCheck { namespace: "default".into(), name: "web".into(), local_endpoints: 0 }),
        ]
    );
    // Another node name sees the other picture; the order of the input does not matter.
    let d2 = desired([(&b, b_ports.as_slice()), (&a, a_ports.as_slice())], "node-2");
    assert_eq!(d2.iter().map(|(p, h)| (*p, h.local_endpoints)).collect::<Vec<_>>(), vec![(32000, 0), (32001, 1)]);
}

#[test]
fn a_port_claimed_twice_goes_to_the_first_service_by_name_in_any_order() {
    let a = lb_local("a", "x", 32000);
    let b = lb_local("b", "x", 32000);
    let none: Vec<Vec<Backend>> = Vec::new();
    for order in [[(&a, none.as_slice()), (&b, none.as_slice())], [(&b, none.as_slice()), (&a, none.as_slice())]] {
        let d = desired(order, NODE);
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].0, d[0].1.namespace.as_str()), (32000, "a"));
    }
}

fn hc(n: usize) -> HealthCheck {
    HealthCheck { namespace: "edge".into(), name: "ingress".into(), local_endpoints: n }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[test]
fn get_with_local_endpoints_is_200_with_kube_proxy_headers_and_body() {
    let r = text(&response(Method::Get, &hc(2), true));
    let body = r#"{"service":{"namespace":"edge","name":"ingress"},"localEndpoints":2,"serviceProxyHealthy":true}"#;
    assert_eq!(
        r,
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Content-Type-Options: nosniff\r\n\
             X-Load-Balancing-Endpoint-Weight: 2\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    );
}

#[test]
fn no_local_endpoints_is_503() {
    let r = text(&response(Method::Get, &hc(0), true));
    assert!(r.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{r}");
    assert!(r.contains("\r\nX-Load-Balancing-Endpoint-Weight: 0\r\n"), "{r}");
    assert!(r.ends_with(r#""localEndpoints":0,"serviceProxyHealthy":true}"#), "{r}");
}

#[test]
fn an_unhealthy_proxy_is_503_even_with_endpoints() {
    let r = text(&response(Method::Get, &hc(3), false));
    assert!(r.starts_with("HTTP/1.1 503 "), "{r}");
    assert!(r.contains("\r\nX-Load-Balancing-Endpoint-Weight: 3\r\n"), "{r}");
    assert!(r.ends_with(r#""localEndpoints":3,"serviceProxyHealthy":false}"#), "{r}");
    assert_eq!(status_of(&hc(3), true), Status::Ok);
    assert_eq!(status_of(&hc(0), false), Status::ServiceUnavailable);
}

#[test]
fn head_has_the_headers_and_the_length_but_no_body() {
    let get = text(&response(Method::Get, &hc(1), true));
    let head = text(&response(Method::Head, &hc(1), true));
    let (get_head, get_body) = get.split_once("\r\n\r\n").unwrap();
    assert_eq!(head, format!("{get_head}\r\n\r\n"));
    assert!(head.contains(&format!("Content-Length: {}\r\n", get_body.len())));
}

#[test]
fn other_methods_are_405_with_allow() {
    let r = text(&response(Method::Other, &hc(1), true));
    assert!(r.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"), "{r}");
    assert!(r.contains("\r\nAllow: GET, HEAD\r\n"), "{r}");
    let (h, b) = r.split_once("\r\n\r\n").unwrap();
    assert!(h.contains(&format!("Content-Length: {}", b.len())));
}

#[test]
fn names_are_json_escaped() {
    // Names are DNS labels after validation; the body must stay JSON whatever it holds.
    let odd = HealthCheck { namespace: "a\"b".into(), name: "c\\d".into(), local_endpoints: 1 };
    let v: serde_json::Value = serde_json::from_str(&body(&odd, true)).unwrap();
    assert_eq!(v["service"]["namespace"], "a\"b");
    assert_eq!(v["service"]["name"], "c\\d");
}

#[test]
fn parses_probe_requests() {
    let cases: &[(&[u8], Parsed)] = &[
        (b"GET / HTTP/1.1\r\nHost: 198.18.1.1:32000\r\nUser-Agent: kube-probe\r\n\r\n", Parsed::Request(Method::Get)),
        (b"GET /healthz?x=1 HTTP/1.0\r\n\r\n", Parsed::Request(Method::Get)),
        (b"HEAD /anything HTTP/1.1\r\nHost: x\r\n\r\n", Parsed::Request(Method::Head)),
        (b"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", Parsed::Request(Method::Other)),
        (b"OPTIONS * HTTP/1.1\r\n\r\n", Parsed::Request(Method::Other)),
        (b"get / HTTP/1.1\r\n\r\n", Parsed::Request(Method::Other)),
        // Bare LF and leading empty lines are tolerated.
        (b"GET / HTTP/1.1\nHost: x\n\n", Parsed::Request(Method::Get)),
        (b"\r\n\r\nGET / HTTP/1.1\r\n\r\n", Parsed::Request(Method::Get)),
    ];
    for (input, want) in cases {
        assert_eq!(parse_request(input), *want, "{:?}", String::from_utf8_lossy(input));
    }
}

#[test]
fn waits_for_the_whole_head() {
    let full = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    for cut in 0..full.len() {
        assert_eq!(parse_request(&full[..cut]), Parsed::Incomplete, "cut at {cut}");
    }
    assert_eq!(parse_request(full), Parsed::Request(Method::Get));
}

#[test]
fn refuses_malformed_requests() {
    let cases: &[(&[u8], Status)] = &[
        (b"GET /\r\n\r\n", Status::BadRequest),
        (b"GET  / HTTP/1.1\r\n\r\n", Status::BadRequest),
        (b"GET / HTTP/1.1 x\r\n\r\n", Status::BadRequest),
        (b"G(T / HTTP/1.1\r\n\r\n", Status::BadRequest),
        (b"GET / FTP/1.1\r\n\r\n", Status::BadRequest),
        (b"GET / HTTP/2.0\r\n\r\n", Status::VersionNotSupported),
        (b"GET / HTTP/1.1\r\nno colon here\r\n\r\n", Status::BadRequest),
        (b"GET / HTTP/1.1\r\nHost : x\r\n\r\n", Status::BadRequest),
        (b"GET / HTTP/1.1\r\n: x\r\n\r\n", Status::BadRequest),
        (b"GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", Status::BadRequest),
        (b"GET /\x7f HTTP/1.1\r\n\r\n", Status::BadRequest),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\n", Status::BadRequest),
    ];
    for (input, want) in cases {
        assert_eq!(parse_request(input), Parsed::Error(*want), "{:?}", String::from_utf8_lossy(input));
    }
}

#[test]
fn a_broken_request_line_is_refused_before_the_head_ends() {
    assert_eq!(parse_request(b"BREW /pot HTCPCP/1.0\r\nAccept-Additions: milk"), Parsed::Error(Status::BadRequest));
    assert_eq!(parse_request(b"GET / HTTP/1.1\r\nHost"), Parsed::Incomplete);
}

#[test]
fn a_head_over_the_limit_is_431() {
    let mut big = b"GET / HTTP/1.1\r\n".to_vec();
    while big.len() < MAX_REQUEST_BYTES {
        big.extend_from_slice(b"X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    assert_eq!(parse_request(&big), Parsed::Error(Status::HeaderTooLarge));
    let mut complete = big.clone();
    complete.extend_from_slice(b"\r\n");
    assert_eq!(parse_request(&complete), Parsed::Error(Status::HeaderTooLarge));
    // Just under the limit is fine.
    let mut fits = b"GET / HTTP/1.1\r\nX: ".to_vec();
    fits.resize(MAX_REQUEST_BYTES - 4, b'a');
    fits.extend_from_slice(b"\r\n\r\n");
    assert_eq!(fits.len(), MAX_REQUEST_BYTES);
    assert_eq!(parse_request(&fits), Parsed::Request(Method::Get));
}

#[test]
fn error_responses_are_complete() {
    for s in [Status::BadRequest, Status::HeaderTooLarge, Status::VersionNotSupported, Status::MethodNotAllowed] {
        let r = text(&error_response(s));
        assert!(r.starts_with(&format!("HTTP/1.1 {} {}\r\n", s.code(), s.reason())), "{r}");
        let (h, b) = r.split_once("\r\n\r\n").unwrap();
        assert!(h.contains(&format!("\r\nContent-Length: {}\r\n", b.len())), "{r}");
        assert!(h.ends_with("Connection: close"), "{r}");
        assert_eq!(h.contains("Allow: GET, HEAD"), s == Status::MethodNotAllowed, "{r}");
    }
}

mod prop {
    use super::super::*;
    use proptest::prelude::*;

    fn request_bytes() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..600),
            // Mostly well-formed: a request line and headers from a small alphabet.
            (
                prop_oneof![Just("GET"), Just("HEAD"), Just("POST"), Just("G T"), Just("")],
                "[ -~]{0,20}",
                prop_oneof![Just("HTTP/1.1"), Just("HTTP/1.0"), Just("HTTP/2.0"), Just("")],
                proptest::collection::vec("[A-Za-z-]{0,8}: ?[ -~]{0,12}", 0..5),
                prop_oneof![Just("\r\n"), Just("\n")],
            )
                .prop_map(|(m, t, v, hs, nl)| {
                    let mut s = format!("{m} /{t} {v}{nl}");
                    for h in hs {
                        s.push_str(&h);
                        s.push_str(nl);
                    }
                    s.push_str(nl);
                    s.into_bytes()
                }),
        ]
    }

    proptest! {
        /// Whatever arrives, in whatever pieces: no panic, and once the parser has
        /// decided, more bytes do not change its mind (the reader stops at a decision).
        #[test]
        fn more_bytes_never_undo_a_decision(req in request_bytes(), extra in proptest::collection::vec(any::<u8>(), 0..64)) {
            for cut in 0..=req.len() {
                let first = parse_request(&req[..cut]);
                if first == Parsed::Incomplete {
                    continue;
                }
                let mut longer = req[..cut].to_vec();
                longer.extend_from_slice(&extra);
                let later = parse_request(&longer);
                match first {
                    Parsed::Request(m) => prop_assert_eq!(later, Parsed::Request(m)),
                    _ => prop_assert!(matches!(later, Parsed::Error(_)), "{:?} became {:?}", first, later),
                }
            }
        }

        /// The reader never needs more than the limit to decide.
        #[test]
        fn decides_within_the_limit(req in proptest::collection::vec(any::<u8>(), MAX_REQUEST_BYTES..MAX_REQUEST_BYTES + 100)) {
            prop_assert_ne!(parse_request(&req), Parsed::Incomplete);
        }
    }
}

/// Found by fuzz/fuzz_targets/health_http.rs: a request line ending in two CRs was a 400
/// while the head was incomplete and a 505 once complete. One answer, however it arrives.
#[test]
fn a_request_line_with_two_crs_gets_one_answer_however_it_arrives() {
    let data = b"GET / HTTP/2.0\r\r\n\n";
    let full = parse_request(data);
    assert_eq!(full, Parsed::Error(Status::BadRequest));
    for cut in 0..data.len() {
        let p = parse_request(&data[..cut]);
        assert!(p == Parsed::Incomplete || p == full, "prefix {cut}: {p:?}");
    }
}
