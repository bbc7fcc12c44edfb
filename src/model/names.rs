//! Name and address syntax checks, each returning the API server's own explanation
//! (the text after `Invalid value: VALUE: `) so messages read like Kubernetes'.

use std::net::IpAddr;

const DNS1035_ERR: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const DNS1123_LABEL_ERR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
pub const IP_ERR: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";

fn lower_alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?` without the length limit.
fn label_chars_ok(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(&f), Some(&l)) => lower_alnum(f) && lower_alnum(l) && b.iter().all(|&c| lower_alnum(c) || c == b'-'),
        _ => false,
    }
}

fn max_len(s: &str, n: usize) -> Option<String> {
    (s.len() > n).then(|| format!("must be no more than {n} characters"))
}

/// RFC 1035 label: Service names.
pub fn dns1035_label(s: &str) -> Result<(), String> {
    if let Some(e) = max_len(s, 63) {
        return Err(e);
    }
    let starts_alpha = s.as_bytes().first().is_some_and(|c| c.is_ascii_lowercase());
    if !(starts_alpha && label_chars_ok(s)) {
        return Err(DNS1035_ERR.to_string());
    }
    Ok(())
}

/// RFC 1123 label: Service names (since the API server's relaxed service name
/// validation), namespaces, port names, hostnames. Like apimachinery's
/// `IsDNS1123Label`, a valid subdomain that is not a label gets "must not contain dots".
/// Every message applies, so this returns them all (the API server lists each).
pub fn dns1123_label_all(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(e) = max_len(s, 63) {
        out.push(e);
    }
    if !label_chars_ok(s) {
        let subdomain = !s.is_empty() && s.split('.').all(label_chars_ok);
        out.push(if subdomain { "must not contain dots".to_string() } else { DNS1123_LABEL_ERR.to_string() });
    }
    out
}

/// The first message of [`dns1123_label_all`].
pub fn dns1123_label(s: &str) -> Result<(), String> {
    match dns1123_label_all(s).into_iter().next() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// RFC 1123 subdomain: Endpoints/EndpointSlice names, node names, externalName.
pub fn dns1123_subdomain(s: &str) -> Result<(), String> {
    if let Some(e) = max_len(s, 253) {
        return Err(e);
    }
    if !s.split('.').all(label_chars_ok) {
        return Err(DNS1123_SUBDOMAIN_ERR.to_string());
    }
    Ok(())
}

/// IANA_SVC_NAME (RFC 6335): a named `targetPort`. Every message that applies, as
/// apimachinery's `IsValidPortName` lists them.
pub fn iana_svc_name_all(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(e) = max_len(s, 15) {
        out.push(e);
    }
    if !s.bytes().all(|c| lower_alnum(c) || c == b'-') {
        out.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_string());
    }
    if !s.bytes().any(|c| c.is_ascii_lowercase()) {
        out.push("must contain at least one letter (a-z)".to_string());
    }
    if s.contains("--") {
        out.push("must not contain consecutive hyphens".to_string());
    }
    if s.starts_with('-') || s.ends_with('-') {
        out.push("must not begin or end with a hyphen".to_string());
    }
    out
}

/// The first message of [`iana_svc_name_all`].
pub fn iana_svc_name(s: &str) -> Result<(), String> {
    match iana_svc_name_all(s).into_iter().next() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// A label-style qualified name (`example.com/name` or `name`), as `loadBalancerClass` takes.
pub fn qualified_name(s: &str) -> Result<(), String> {
    const ERR: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            return Err("prefix part must be non-empty".to_string());
        }
        dns1123_subdomain(p).map_err(|e| format!("prefix part {e}"))?;
    }
    // apimachinery's `content` checks (label keys and values) count bytes.
    if name.is_empty() {
        return Err("name part must be non-empty".to_string());
    }
    if name.len() > 63 {
        return Err("name part must be no more than 63 bytes".to_string());
    }
    let b = name.as_bytes();
    let ok_end = |c: &u8| c.is_ascii_alphanumeric();
    if !(b.first().is_some_and(ok_end)
        && b.last().is_some_and(ok_end)
        && b.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.'))
    {
        return Err(ERR.to_string());
    }
    Ok(())
}

/// A label value: empty, or up to 63 alphanumerics with `-`, `_`, `.` inside.
pub fn label_value(s: &str) -> Result<(), String> {
    if s.len() > 63 {
        return Err("must be no more than 63 bytes".to_string());
    }
    let b = s.as_bytes();
    let ok = b.is_empty()
        || (b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.'));
    if !ok {
        return Err("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".to_string());
    }
    Ok(())
}

/// An IP address as Kubernetes accepts it (no zone, no leading-zero IPv4 octets).
pub fn parse_ip(s: &str) -> Result<IpAddr, String> {
    s.parse::<IpAddr>().map_err(|_| IP_ERR.to_string())
}

/// An IP that may receive traffic for a Service: what the API server's
/// `ValidateNonSpecialIP` refuses for externalIPs and endpoint addresses.
pub fn non_special_ip(s: &str) -> Result<IpAddr, String> {
    let ip = parse_ip(s)?;
    if ip.is_unspecified() {
        return Err(format!("may not be unspecified ({ip})"));
    }
    if ip.is_loopback() {
        return Err("may not be in the loopback range (127.0.0.0/8, ::1/128)".to_string());
    }
    let link_local = match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
    };
    if link_local {
        return Err("may not be in the link-local range (169.254.0.0/16, fe80::/10)".to_string());
    }
    let ll_multicast = match ip {
        IpAddr::V4(v4) => v4.octets()[..3] == [224, 0, 0],
        IpAddr::V6(v6) => (v6.segments()[0] & 0xff0f) == 0xff02,
    };
    if ll_multicast {
        return Err("may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)".to_string());
    }
    Ok(ip)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns1035_refuses_uppercase_leading_digit_and_trailing_dash() {
        assert!(dns1035_label("web").is_ok());
        assert!(dns1035_label("a-1").is_ok());
        for bad in ["Web", "1web", "web-", "", "we_b", "a.b"] {
            assert!(dns1035_label(bad).unwrap_err().contains("DNS-1035"), "{bad}");
        }
        assert_eq!(dns1035_label(&"a".repeat(64)).unwrap_err(), "must be no more than 63 characters");
        assert!(dns1035_label(&"a".repeat(63)).is_ok());
    }

    #[test]
    fn dns1123_label_allows_leading_digit() {
        assert!(dns1123_label("5432-5432").is_ok());
        assert!(dns1123_label("1web").is_ok());
        assert_eq!(dns1123_label("-a").unwrap_err(), DNS1123_LABEL_ERR);
        assert_eq!(dns1123_label("web.example").unwrap_err(), "must not contain dots");
        assert_eq!(dns1123_label("Web").unwrap_err(), DNS1123_LABEL_ERR);
        let long = format!("{}-", "a".repeat(64));
        assert_eq!(dns1123_label_all(&long), ["must be no more than 63 characters", DNS1123_LABEL_ERR]);
    }

    #[test]
    fn subdomain_takes_dots_but_not_empty_parts() {
        assert!(dns1123_subdomain("db.example.com").is_ok());
        assert!(dns1123_subdomain("web-abc12").is_ok());
        for bad in ["a..b", ".a", "a.", "A.b", ""] {
            assert!(dns1123_subdomain(bad).unwrap_err().contains("subdomain"), "{bad}");
        }
        assert!(dns1123_subdomain(&"a".repeat(254)).unwrap_err().contains("253"));
    }

    #[test]
    fn iana_service_names() {
        assert!(iana_svc_name("http").is_ok());
        assert!(iana_svc_name("h2c-8080").is_ok());
        assert!(iana_svc_name("8080").unwrap_err().contains("at least one letter"));
        assert!(iana_svc_name("a--b").unwrap_err().contains("consecutive"));
        assert!(iana_svc_name("-ab").unwrap_err().contains("begin or end"));
        assert!(iana_svc_name("HTTP").unwrap_err().contains("alpha-numeric"));
        assert!(iana_svc_name("abcdefghijklmnop").unwrap_err().contains("15"));
    }

    #[test]
    fn qualified_names() {
        assert!(qualified_name("example.com/lb").is_ok());
        assert!(qualified_name("lb_1").is_ok());
        assert!(qualified_name("/lb").is_err());
        assert!(qualified_name("Example.com/lb").is_err());
        assert!(qualified_name("example.com/-lb").is_err());
    }

    #[test]
    fn label_values() {
        assert!(label_value("").is_ok());
        assert!(label_value("web_1.x").is_ok());
        assert!(label_value("web server").unwrap_err().contains("valid label"));
        assert!(label_value("-web").is_err());
        assert!(label_value(&"a".repeat(64)).is_err());
    }

    #[test]
    fn special_ips_are_refused() {
        assert!(non_special_ip("198.18.0.1").is_ok());
        assert!(non_special_ip("2001:db8::1").is_ok());
        assert!(non_special_ip("0.0.0.0").unwrap_err().contains("unspecified"));
        assert!(non_special_ip("127.0.0.1").unwrap_err().contains("loopback"));
        assert!(non_special_ip("::1").unwrap_err().contains("loopback"));
        assert!(non_special_ip("169.254.1.1").unwrap_err().contains("link-local"));
        assert!(non_special_ip("fe80::1").unwrap_err().contains("link-local"));
        assert!(non_special_ip("224.0.0.5").unwrap_err().contains("multicast"));
        assert_eq!(non_special_ip("10.0.0.300").unwrap_err(), IP_ERR);
        assert_eq!(parse_ip("fe80::1%eth0").unwrap_err(), IP_ERR);
    }
}
