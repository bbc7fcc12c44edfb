//! kubectl-like tables, pure: objects and a fixed "now" in, text out.
//!
//! Column rules follow what `kubectl get` prints so people read them without thinking:
//! three spaces between columns, `<none>` for empty cells, AGE as kubectl shortens it.

use std::net::IpAddr;

use crate::model::{EndpointSlice, Endpoints, Node, Service, ServiceType};

/// One table: a header row and data rows, printed with kubectl's padding.
pub fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let header_row: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header_row).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < row.len() {
                let pad = widths.get(i).copied().unwrap_or(0) - cell.chars().count() + 3;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// kubectl's human duration: `45s`, `3m10s`, `15m`, `5h12m`, `20h`, `3d4h`, `30d`, `2y10d`.
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    let s = secs.max(0);
    if s < 120 {
        return format!("{s}s");
    }
    let minutes = s / 60;
    if minutes < 10 {
        return with_rest(minutes, "m", s % 60, "s");
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = s / 3600;
    if hours < 8 {
        return with_rest(hours, "h", minutes % 60, "m");
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        return with_rest(days, "d", hours % 24, "h");
    }
    if hours < 24 * 365 * 2 {
        return format!("{days}d");
    }
    if hours < 24 * 365 * 8 {
        return with_rest(days / 365, "y", days % 365, "d");
    }
    format!("{}y", days / 365)
}

fn with_rest(big: i64, big_unit: &str, small: i64, small_unit: &str) -> String {
    if small == 0 {
        format!("{big}{big_unit}")
    } else {
        format!("{big}{big_unit}{small}{small_unit}")
    }
}

/// Seconds since the epoch of an RFC 3339 timestamp as the API server writes them
/// (`2026-11-20T08:15:02Z`, optional fraction, `Z` or `±hh:mm`).
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> { s.get(r)?.parse().ok() };
    let (y, mo, d, h, mi, sec) = (num(0..4)?, num(5..7)?, num(8..10)?, num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first() {
                Some(b'+') => 1,
                Some(b'-') => -1,
                _ => return None,
            };
            if rest.len() != 6 || rest.as_bytes()[3] != b':' {
                return None;
            }
            let oh: i64 = rest.get(1..3)?.parse().ok()?;
            let om: i64 = rest.get(4..6)?.parse().ok()?;
            sign * (oh * 3600 + om * 60)
        }
    };
    Some(days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - offset)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn age(ts: Option<&str>, now: i64) -> String {
    match ts.and_then(parse_rfc3339) {
        Some(t) => human_duration(now - t),
        None => "<unknown>".into(),
    }
}

fn or_none(s: String) -> String {
    if s.is_empty() {
        "<none>".into()
    } else {
        s
    }
}

/// `80:30086/TCP,443/TCP`.
pub fn service_ports(svc: &Service) -> String {
    let ports: Vec<String> = svc
        .spec
        .ports
        .iter()
        .map(|p| match p.node_port.filter(|&n| n != 0) {
            Some(np) => format!("{}:{np}/{}", p.port, p.proto().as_str()),
            None => format!("{}/{}", p.port, p.proto().as_str()),
        })
        .collect();
    or_none(ports.join(","))
}

/// EXTERNAL-IP as kubectl computes it: ingress addresses and externalIPs for
/// LoadBalancers (`<pending>` without either), the name for ExternalName.
pub fn external_ip(svc: &Service, wide: bool) -> String {
    let ext = svc.spec.external_ips.join(",");
    match svc.service_type() {
        ServiceType::ClusterIP | ServiceType::NodePort => or_none(ext),
        ServiceType::ExternalName => or_none(svc.spec.external_name.clone().unwrap_or_default()),
        ServiceType::LoadBalancer => {
            let ingress: Vec<String> = svc
                .status
                .as_ref()
                .map(|s| {
                    s.load_balancer.ingress.iter().filter_map(|i| i.ip.clone().or_else(|| i.hostname.clone())).collect()
                })
                .unwrap_or_default();
            let mut lb = ingress.join(",");
            if !wide && lb.chars().count() > 16 {
                lb = format!("{}...", lb.chars().take(13).collect::<String>());
            }
            let all: Vec<String> = [lb, ext].into_iter().filter(|s| !s.is_empty()).collect();
            if all.is_empty() {
                "<pending>".into()
            } else {
                all.join(",")
            }
        }
    }
}

fn selector(sel: Option<&crate::model::SmallMap>) -> String {
    let parts: Vec<String> = sel.into_iter().flatten().map(|(k, v)| format!("{k}={v}")).collect();
    or_none(parts.join(","))
}

/// `get svc`: NAMESPACE only with `-A`, SELECTOR only with `-o wide`, as kubectl.
pub fn services_table(items: &[Service], all_namespaces: bool, wide: bool, now: i64) -> String {
    let mut headers = Vec::new();
    if all_namespaces {
        headers.push("NAMESPACE");
    }
    headers.extend(["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"]);
    if wide {
        headers.push("SELECTOR");
    }
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|s| {
            let mut row = Vec::new();
            if all_namespaces {
                row.push(s.namespace().to_string());
            }
            row.push(s.name().to_string());
            row.push(s.spec.type_.clone().unwrap_or_else(|| "ClusterIP".into()));
            row.push(or_none(s.spec.cluster_ip.clone().unwrap_or_default()));
            row.push(external_ip(s, wide));
            row.push(service_ports(s));
            row.push(age(s.metadata.creation_timestamp.as_deref(), now));
            if wide {
                row.push(selector(s.spec.selector.as_ref()));
            }
            row
        })
        .collect();
    render(&headers, &rows)
}

fn host_port(ip: &str, port: i64) -> String {
    match ip.parse::<IpAddr>() {
        Ok(IpAddr::V6(_)) => format!("[{ip}]:{port}"),
        _ => format!("{ip}:{port}"),
    }
}

/// At most three entries, then ` + N more...`, as kubectl abbreviates.
fn first_three(list: Vec<String>, empty: &str) -> String {
    if list.is_empty() {
        return empty.into();
    }
    let mut s = list.iter().take(3).cloned().collect::<Vec<_>>().join(",");
    if list.len() > 3 {
        s.push_str(&format!(" + {} more...", list.len() - 3));
    }
    s
}

/// ENDPOINTS of an Endpoints object: ready `ip:port` pairs.
pub fn endpoints_column(ep: &Endpoints) -> String {
    let mut list = Vec::new();
    for subset in &ep.subsets {
        if subset.ports.is_empty() {
            list.extend(subset.addresses.iter().map(|a| a.ip.clone()));
            continue;
        }
        for p in &subset.ports {
            for a in &subset.addresses {
                list.push(match p.port {
                    Some(n) => host_port(&a.ip, n),
                    None => a.ip.clone(),
                });
            }
        }
    }
    first_three(list, "<none>")
}

fn ns_name_rows(all_namespaces: bool, ns: &str, name: &str) -> Vec<String> {
    let mut row = Vec::new();
    if all_namespaces {
        row.push(ns.to_string());
    }
    row.push(name.to_string());
    row
}

pub fn endpoints_table(items: &[Endpoints], all_namespaces: bool, now: i64) -> String {
    let mut headers = Vec::new();
    if all_namespaces {
        headers.push("NAMESPACE");
    }
    headers.extend(["NAME", "ENDPOINTS", "AGE"]);
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|e| {
            let mut row = ns_name_rows(all_namespaces, e.metadata.ns(), &e.metadata.name);
            row.push(endpoints_column(e));
            row.push(age(e.metadata.creation_timestamp.as_deref(), now));
            row
        })
        .collect();
    render(&headers, &rows)
}

/// `get nodes`: what a router uses of a Node (kubectl's own columns are about kubelets).
pub fn nodes_table(items: &[Node], now: i64) -> String {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|n| {
            let ips: Vec<String> = n.internal_ips().iter().map(ToString::to_string).collect();
            let cidrs: Vec<String> = n.cidrs().iter().map(|c| c.to_string()).collect();
            vec![
                n.metadata.name.clone(),
                or_none(ips.join(",")),
                or_none(cidrs.join(",")),
                age(n.metadata.creation_timestamp.as_deref(), now),
            ]
        })
        .collect();
    render(&["NAME", "INTERNAL-IP", "POD-CIDRS", "AGE"], &rows)
}

pub fn endpoint_slices_table(items: &[EndpointSlice], all_namespaces: bool, now: i64) -> String {
    let mut headers = Vec::new();
    if all_namespaces {
        headers.push("NAMESPACE");
    }
    headers.extend(["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"]);
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|s| {
            let mut row = ns_name_rows(all_namespaces, s.metadata.ns(), &s.metadata.name);
            row.push(s.address_type.clone());
            let ports = s.ports.iter().map(|p| p.port.map_or("<unset>".to_string(), |n| n.to_string())).collect();
            row.push(first_three(ports, "<unset>"));
            let addrs = s.endpoints.iter().flat_map(|e| e.addresses.iter().cloned()).collect();
            row.push(first_three(addrs, "<unset>"));
            row.push(age(s.metadata.creation_timestamp.as_deref(), now));
            row
        })
        .collect();
    render(&headers, &rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        EndpointAddress, EndpointPort, EndpointSubset, LoadBalancerIngress, ServicePort, ServiceStatus, SliceEndpoint,
    };

    const NOW: i64 = 1_795_651_200; // 2026-11-26T00:00:00Z

    fn svc(name: &str, ty: Option<&str>, created: &str) -> Service {
        let mut s = Service::default();
        s.metadata.name = name.into();
        s.metadata.creation_timestamp = Some(created.into());
        s.spec.type_ = ty.map(Into::into);
        s
    }

    #[test]
    fn rfc3339_parses_what_the_api_server_writes() {
        assert_eq!(parse_rfc3339("2026-11-26T00:00:00Z"), Some(NOW));
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339("2026-11-26T01:00:00+01:00"), Some(NOW));
        assert_eq!(parse_rfc3339("2026-11-25T23:59:59.123456Z"), Some(NOW - 1));
        assert_eq!(parse_rfc3339("2000-02-29T00:00:00Z"), Some(951_782_400));
        assert_eq!(parse_rfc3339("yesterday"), None);
        assert_eq!(parse_rfc3339("2026-13-01T00:00:00Z"), None);
    }

    #[test]
    fn ages_shorten_like_kubectl() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (5, "5s"),
            (119, "119s"),
            (120, "2m"),
            (190, "3m10s"),
            (600, "10m"),
            (179 * 60, "179m"),
            (3 * 3600, "3h"),
            (5 * 3600 + 12 * 60, "5h12m"),
            (20 * 3600, "20h"),
            (2 * 86400, "2d"),
            (3 * 86400 + 4 * 3600, "3d4h"),
            (30 * 86400, "30d"),
            (2 * 365 * 86400 + 10 * 86400, "2y10d"),
            (9 * 365 * 86400, "9y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_duration(secs), want, "{secs}");
        }
    }

    #[test]
    fn service_table_like_kubectl() {
        let mut web = svc("web", Some("NodePort"), "2026-11-25T23:59:55Z");
        web.spec.cluster_ip = Some("10.96.120.7".into());
        web.spec.ports = vec![
            ServicePort { port: 80, node_port: Some(30086), ..Default::default() },
            ServicePort { port: 443, node_port: Some(30443), ..Default::default() },
        ];
        web.spec.selector = Some([("app".to_string(), "web".to_string())].into());
        let mut dns = svc("kube-dns", None, "2026-11-24T00:00:00Z");
        dns.metadata.namespace = Some("kube-system".into());
        dns.spec.cluster_ip = Some("10.96.0.10".into());
        dns.spec.ports = vec![
            ServicePort { port: 53, protocol: Some("UDP".into()), ..Default::default() },
            ServicePort { port: 53, ..Default::default() },
        ];
        let got = services_table(&[web.clone(), dns.clone()], false, false, NOW);
        let want = "\
NAME       TYPE        CLUSTER-IP    EXTERNAL-IP   PORT(S)                      AGE
web        NodePort    10.96.120.7   <none>        80:30086/TCP,443:30443/TCP   5s
kube-dns   ClusterIP   10.96.0.10    <none>        53/UDP,53/TCP                2d
";
        assert_eq!(got, want);
        let all = services_table(&[web, dns], true, true, NOW);
        let mut lines = all.lines();
        assert_eq!(
            lines.next().unwrap().split_whitespace().collect::<Vec<_>>(),
            ["NAMESPACE", "NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE", "SELECTOR"]
        );
        assert!(lines.next().unwrap().starts_with("default       web "));
        assert!(all.contains("app=web\n"));
        assert!(all.lines().nth(2).unwrap().ends_with("2d    <none>"));
    }

    #[test]
    fn external_ip_column() {
        let mut lb = svc("lb", Some("LoadBalancer"), "2026-11-25T00:00:00Z");
        assert_eq!(external_ip(&lb, false), "<pending>");
        lb.status = Some(ServiceStatus::default());
        lb.status.as_mut().unwrap().load_balancer.ingress =
            vec![LoadBalancerIngress { ip: Some("198.18.0.1".into()), hostname: None }];
        assert_eq!(external_ip(&lb, false), "198.18.0.1");
        lb.spec.external_ips = vec!["198.18.0.2".into()];
        assert_eq!(external_ip(&lb, false), "198.18.0.1,198.18.0.2");
        let mut c = svc("c", None, "x");
        assert_eq!(external_ip(&c, false), "<none>");
        c.spec.external_ips = vec!["198.18.0.3".into(), "2001:db8::3".into()];
        assert_eq!(external_ip(&c, false), "198.18.0.3,2001:db8::3");
        let mut e = svc("e", Some("ExternalName"), "x");
        e.spec.external_name = Some("db.example.com".into());
        assert_eq!(external_ip(&e, false), "db.example.com");
        assert_eq!(
            services_table(&[e], false, false, NOW).lines().nth(1).unwrap().split_whitespace().collect::<Vec<_>>(),
            ["e", "ExternalName", "<none>", "db.example.com", "<none>", "<unknown>"]
        );
    }

    #[test]
    fn endpoints_table_like_kubectl() {
        let mut e = Endpoints::default();
        e.metadata.name = "web".into();
        e.metadata.creation_timestamp = Some("2026-11-25T23:57:00Z".into());
        e.subsets = vec![EndpointSubset {
            addresses: ["198.18.1.1", "198.18.1.2", "2001:db8::3", "198.18.1.4"]
                .iter()
                .map(|ip| EndpointAddress { ip: ip.to_string(), ..Default::default() })
                .collect(),
            ports: vec![EndpointPort { port: Some(8080), ..Default::default() }],
            ..Default::default()
        }];
        let mut empty = Endpoints::default();
        empty.metadata.name = "idle".into();
        let got = endpoints_table(&[e, empty], false, NOW);
        assert_eq!(
            got,
            "\
NAME   ENDPOINTS                                                        AGE
web    198.18.1.1:8080,198.18.1.2:8080,[2001:db8::3]:8080 + 1 more...   3m
idle   <none>                                                           <unknown>
"
        );
    }

    #[test]
    fn endpoint_slices_table_like_kubectl() {
        let mut s = EndpointSlice::default();
        s.metadata.name = "web-x7k2p".into();
        s.metadata.namespace = Some("shop".into());
        s.metadata.creation_timestamp = Some("2026-11-25T21:00:00Z".into());
        s.address_type = "IPv4".into();
        s.ports = vec![EndpointPort { port: Some(8080), ..Default::default() }, EndpointPort::default()];
        s.endpoints = vec![SliceEndpoint { addresses: vec!["198.18.1.1".into()], ..Default::default() }];
        let got = endpoint_slices_table(&[s], true, NOW);
        assert_eq!(
            got,
            "\
NAMESPACE   NAME        ADDRESSTYPE   PORTS          ENDPOINTS    AGE
shop        web-x7k2p   IPv4          8080,<unset>   198.18.1.1   3h
"
        );
    }
}
