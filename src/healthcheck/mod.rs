//! `spec.healthCheckNodePort` as kube-proxy serves it (pure, no I/O): which ports
//! answer for which service with how many local endpoints, and the HTTP exchange a
//! load balancer's probe has with such a port.
//!
//! A cloud or MetalLB-style load balancer sends traffic for a `type: LoadBalancer`,
//! `externalTrafficPolicy: Local` service only to nodes that have endpoints of it;
//! it learns which ones by probing `http://<node>:<healthCheckNodePort>/`: 200 means
//! "send here", 503 "not here". The daemon (`daemon::health`) owns the sockets.

use std::net::IpAddr;

use crate::dataplane::endpoints::categorize;
use crate::dataplane::names::IpFamily;
use crate::model::{Backend, Service, ServiceType};

/// What one health-check port reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    pub namespace: String,
    pub name: String,
    /// Distinct addresses of this node's usable, ready endpoints over all ports.
    pub local_endpoints: usize,
}

/// The health-check port a service asks for: only a LoadBalancer with the Local
/// external traffic policy has one (validation refuses it elsewhere; a stale value on
/// a stored object is not served either).
pub fn port_of(svc: &Service) -> Option<u16> {
    if svc.service_type() != ServiceType::LoadBalancer || svc.spec.external_traffic_policy.as_deref() != Some("Local") {
        return None;
    }
    svc.spec.health_check_node_port.and_then(|p| u16::try_from(p).ok()).filter(|p| *p != 0)
}

/// This node's endpoints of a service as the health check counts them: the local
/// endpoints the data plane sends traffic to (`categorize`), by distinct address over
/// every port and family (a pod with two ports is one endpoint), as kube-proxy counts.
///
/// Like kube-proxy (KEP-1669), endpoints that only terminate do not count, although
/// the data plane still uses them to drain: a node whose local pods are all going away
/// answers 503 so that the load balancer stops sending it new connections.
pub fn local_endpoints<'a>(
    ports: impl IntoIterator<Item = &'a [Backend]>,
    node_name: &str,
    publish_not_ready: bool,
) -> usize {
    let mut ips: Vec<IpAddr> = Vec::new();
    for backends in ports {
        for family in [IpFamily::V4, IpFamily::V6] {
            let local = categorize(backends, family, node_name, publish_not_ready).local;
            // `categorize` falls back to terminating endpoints only when none is ready,
            // so either all of `local` is ready or none of it is.
            let ready = |ip: &IpAddr| {
                publish_not_ready
                    || backends.iter().any(|b| b.ip == *ip && b.ready && b.node_name.as_deref() == Some(node_name))
            };
            ips.extend(local.iter().map(|t| t.ip).filter(ready));
        }
    }
    ips.sort();
    ips.dedup();
    ips.len()
}

/// The port and report of one service, or `None` when it has no health check.
pub fn for_service<'a>(
    svc: &Service,
    ports: impl IntoIterator<Item = &'a [Backend]>,
    node_name: &str,
) -> Option<(u16, HealthCheck)> {
    let port = port_of(svc)?;
    let publish_not_ready = svc.spec.publish_not_ready_addresses == Some(true);
    Some((
        port,
        HealthCheck {
            namespace: svc.namespace().to_string(),
            name: svc.name().to_string(),
            local_endpoints: local_endpoints(ports, node_name, publish_not_ready),
        },
    ))
}

/// Every health-check port of the given services with their backends per port, sorted
/// by port. The allocator never gives one port to two services; if stored objects did,
/// the first by namespace and name keeps it.
pub fn desired<'a>(
    services: impl IntoIterator<Item = (&'a Service, &'a [Vec<Backend>])>,
    node_name: &str,
) -> Vec<(u16, HealthCheck)> {
    let mut out: Vec<(u16, HealthCheck)> = Vec::new();
    for (svc, ports) in services {
        let Some((port, hc)) = for_service(svc, ports.iter().map(Vec::as_slice), node_name) else { continue };
        // Kept sorted by inserting in place: a handful of ports, and no sort routine
        // to pay flash for.
        match out.binary_search_by_key(&port, |(p, _)| *p) {
            Ok(i) => {
                let held = &out[i].1;
                if (&hc.namespace, &hc.name) < (&held.namespace, &held.name) {
                    out[i].1 = hc;
                }
            }
            Err(i) => out.insert(i, (port, hc)),
        }
    }
    out
}

/// The largest request head we read; a probe sends a few hundred bytes.
pub const MAX_REQUEST_BYTES: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    /// Any other syntactically valid method: answered with 405.
    Other,
}

/// How far a request head has arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// Read more (the buffer is still below `MAX_REQUEST_BYTES`).
    Incomplete,
    Request(Method),
    /// Answer with this status and close.
    Error(Status),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    BadRequest,
    MethodNotAllowed,
    HeaderTooLarge,
    ServiceUnavailable,
    VersionNotSupported,
}

impl Status {
    pub fn code(self) -> u16 {
        match self {
            Status::Ok => 200,
            Status::BadRequest => 400,
            Status::MethodNotAllowed => 405,
            Status::HeaderTooLarge => 431,
            Status::ServiceUnavailable => 503,
            Status::VersionNotSupported => 505,
        }
    }
    pub fn reason(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::BadRequest => "Bad Request",
            Status::MethodNotAllowed => "Method Not Allowed",
            Status::HeaderTooLarge => "Request Header Fields Too Large",
            Status::ServiceUnavailable => "Service Unavailable",
            Status::VersionNotSupported => "HTTP Version Not Supported",
        }
    }
}

/// RFC 9110 `tchar`.
fn is_token_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

/// Where the head ends (just past the blank line), accepting bare LF line ends as
/// RFC 9112 allows a server to.
fn head_end(buf: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i < buf.len() {
        if buf[i] == b'\n' {
            let rest = &buf[i + 1..];
            if rest.starts_with(b"\n") {
                return Some(i + 2);
            }
            if rest.starts_with(b"\r\n") {
                return Some(i + 3);
            }
        }
        i += 1;
    }
    None
}

/// Reads an HTTP/1.x request head from what has arrived so far. The path, query and
/// headers do not matter (kube-proxy answers every path the same), only that the
/// request is well-formed; a body is never read.
pub fn parse_request(buf: &[u8]) -> Parsed {
    // A server ignores empty lines before the request line (RFC 9112, 2.2).
    let start = buf.iter().position(|&c| c != b'\r' && c != b'\n').unwrap_or(buf.len());
    let buf = &buf[start..];
    let Some(end) = head_end(buf) else {
        if buf.len() + start >= MAX_REQUEST_BYTES {
            return Parsed::Error(Status::HeaderTooLarge);
        }
        // A request line that is already broken need not wait for the rest.
        if let Some(nl) = buf.iter().position(|&c| c == b'\n') {
            if let Err(s) = request_line(&buf[..nl]) {
                return Parsed::Error(s);
            }
        }
        return Parsed::Incomplete;
    };
    if end + start > MAX_REQUEST_BYTES {
        return Parsed::Error(Status::HeaderTooLarge);
    }
    let mut lines = buf[..end].split(|&c| c == b'\n');
    // `request_line` strips the line's CR itself, exactly as for an incomplete head
    // above: a line ending in two CRs gets one answer however the bytes arrive.
    let method = match request_line(lines.next().unwrap_or_default()) {
        Ok(m) => m,
        Err(s) => return Parsed::Error(s),
    };
    for line in lines.map(|l| l.strip_suffix(b"\r").unwrap_or(l)).filter(|l| !l.is_empty()) {
        let Some(colon) = line.iter().position(|&c| c == b':') else {
            return Parsed::Error(Status::BadRequest);
        };
        // No whitespace before the colon, no obsolete line folding (RFC 9112, 5.1 and 5.2).
        if colon == 0 || !line[..colon].iter().all(|&c| is_token_char(c)) {
            return Parsed::Error(Status::BadRequest);
        }
    }
    Parsed::Request(method)
}

/// `METHOD SP request-target SP HTTP/1.x`
fn request_line(line: &[u8]) -> Result<Method, Status> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut parts = line.split(|&c| c == b' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Status::BadRequest);
    };
    if method.is_empty() || !method.iter().all(|&c| is_token_char(c)) {
        return Err(Status::BadRequest);
    }
    if target.is_empty() || target.iter().any(|&c| c <= b' ' || c == 0x7f) {
        return Err(Status::BadRequest);
    }
    match version {
        b"HTTP/1.0" | b"HTTP/1.1" => {}
        v if v.len() == 8
            && v.starts_with(b"HTTP/")
            && v[5].is_ascii_digit()
            && v[6] == b'.'
            && v[7].is_ascii_digit() =>
        {
            return Err(Status::VersionNotSupported)
        }
        _ => return Err(Status::BadRequest),
    }
    Ok(match method {
        b"GET" => Method::Get,
        b"HEAD" => Method::Head,
        _ => Method::Other,
    })
}

/// kube-proxy's JSON body, compact, in its field order (a JSON map would sort them).
pub fn body(hc: &HealthCheck, proxy_healthy: bool) -> String {
    let quote = |s: &str| serde_json::Value::from(s).to_string();
    format!(
        r#"{{"service":{{"namespace":{},"name":{}}},"localEndpoints":{},"serviceProxyHealthy":{}}}"#,
        quote(&hc.namespace),
        quote(&hc.name),
        hc.local_endpoints,
        proxy_healthy
    )
}

/// The status a probe gets: 200 only with local endpoints and a working data plane
/// (kube-proxy also answers 503 while it is itself unhealthy).
pub fn status_of(hc: &HealthCheck, proxy_healthy: bool) -> Status {
    if hc.local_endpoints > 0 && proxy_healthy {
        Status::Ok
    } else {
        Status::ServiceUnavailable
    }
}

fn head(status: Status, headers: &[(&str, String)], content_length: usize) -> String {
    let mut out = format!("HTTP/1.1 {} {}\r\n", status.code(), status.reason());
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    // One request per connection keeps the server trivial; probes open a new one anyway.
    out.push_str(&format!("Content-Length: {content_length}\r\nConnection: close\r\n\r\n"));
    out
}

/// The full response to a well-formed request.
pub fn response(method: Method, hc: &HealthCheck, proxy_healthy: bool) -> Vec<u8> {
    if method == Method::Other {
        return error_response(Status::MethodNotAllowed);
    }
    let body = body(hc, proxy_healthy);
    let headers = [
        ("Content-Type", "application/json".to_string()),
        ("X-Content-Type-Options", "nosniff".to_string()),
        ("X-Load-Balancing-Endpoint-Weight", hc.local_endpoints.to_string()),
    ];
    let mut out = head(status_of(hc, proxy_healthy), &headers, body.len()).into_bytes();
    // HEAD gets the length the GET body would have, and no body.
    if method == Method::Get {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

/// A plain-text error (bad request, wrong method, head too large).
pub fn error_response(status: Status) -> Vec<u8> {
    let body = format!("{} {}\n", status.code(), status.reason());
    let mut headers = vec![
        ("Content-Type", "text/plain; charset=utf-8".to_string()),
        ("X-Content-Type-Options", "nosniff".to_string()),
    ];
    if status == Status::MethodNotAllowed {
        headers.push(("Allow", "GET, HEAD".to_string()));
    }
    let mut out = head(status, &headers, body.len()).into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

#[cfg(test)]
mod tests;
