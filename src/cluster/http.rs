//! The little HTTP/1.1 a Kubernetes client needs: the server URL, a GET request, the
//! response head, and the body (`Content-Length` or chunked). Pure: bytes in, bytes out;
//! the connection lives in `client`. Strict: anything unexpected is an error naming it.

use std::fmt::Write as _;

/// The longest response head, size line or trailer accepted.
const MAX_HEAD: usize = 16 * 1024;
const MAX_SIZE_LINE: usize = 1024;

/// `https://HOST[:PORT][/PREFIX]`: the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerUrl {
    /// A DNS name or an IP address (IPv6 without brackets).
    pub host: String,
    pub port: u16,
    /// A path prefix without the trailing slash (`""` for none).
    pub prefix: String,
}

impl ServerUrl {
    pub fn parse(s: &str) -> Result<ServerUrl, String> {
        let rest = s.strip_prefix("https://").ok_or("must start with https://")?;
        if rest.contains(['?', '#', '@']) || rest.contains(char::is_whitespace) {
            return Err("no user, query, fragment or spaces allowed".into());
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, tail) = v6.split_once(']').ok_or("unterminated [IPv6 address]")?;
            if h.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(format!("{h:?} is not an IPv6 address"));
            }
            let port = match tail {
                "" => None,
                t => Some(t.strip_prefix(':').ok_or("junk after the ]")?),
            };
            (h, port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err("no host".into());
        }
        if !host.contains(':') && !host.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.') {
            return Err(format!("{host:?} is not a host name"));
        }
        let port = match port {
            None => 443,
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n > 0 => n,
                _ => return Err(format!("{p:?} is not a port number")),
            },
        };
        Ok(ServerUrl { host: host.to_string(), port, prefix: path.to_string() })
    }

    /// The `Host` header's value.
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        if self.port == 443 {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// Percent-encodes a query value (everything but RFC 3986's unreserved characters).
pub fn encode_query_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A GET request for `path_and_query` (which starts with `/`).
pub fn get_request(url: &ServerUrl, path_and_query: &str, bearer: Option<&str>) -> String {
    let mut r = format!(
        "GET {}{path_and_query} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nUser-Agent: nodeportd/{}\r\n",
        url.prefix,
        url.authority(),
        crate::VERSION
    );
    if let Some(t) = bearer {
        let _ = write!(r, "Authorization: Bearer {t}\r\n");
    }
    r.push_str("Connection: close\r\n\r\n");
    r
}

/// How the body of a response is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Chunked,
    Length(u64),
}

/// A parsed response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    pub framing: Framing,
}

/// The index just past the `\r\n\r\n` ending the head, once `buf` holds it; an error
/// when the head is too long.
pub fn head_end(buf: &[u8]) -> Result<Option<usize>, String> {
    match buf.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(i) => Ok(Some(i + 4)),
        None if buf.len() > MAX_HEAD => Err(format!("response head longer than {MAX_HEAD} bytes")),
        None => Ok(None),
    }
}

/// Parses a response head (without the final empty line or with it).
pub fn parse_head(head: &[u8]) -> Result<Head, String> {
    let text = std::str::from_utf8(head).map_err(|_| "response head is not UTF-8".to_string())?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(format!("bad status line {status_line:?}"));
    }
    let status = parts
        .next()
        .and_then(|c| if c.len() == 3 { c.parse::<u16>().ok() } else { None })
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let mut chunked = false;
    let mut length: Option<u64> = None;
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':').ok_or_else(|| format!("bad header line {line:?}"))?;
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(format!("bad header line {line:?}"));
        }
        let value = value.trim();
        if name.eq_ignore_ascii_case("transfer-encoding") {
            if !value.eq_ignore_ascii_case("chunked") {
                return Err(format!("unsupported Transfer-Encoding {value:?}"));
            }
            chunked = true;
        } else if name.eq_ignore_ascii_case("content-length") {
            let n = value.parse::<u64>().map_err(|_| format!("bad Content-Length {value:?}"))?;
            if length.is_some_and(|m| m != n) {
                return Err("two different Content-Length headers".into());
            }
            length = Some(n);
        }
    }
    let framing = match (chunked, length) {
        (true, Some(_)) => return Err("both Transfer-Encoding and Content-Length".into()),
        (true, None) => Framing::Chunked,
        (false, Some(n)) => Framing::Length(n),
        (false, None) => return Err("neither Transfer-Encoding: chunked nor Content-Length".into()),
    };
    Ok(Head { status, framing })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    Size,
    Data(u64),
    DataEnd,
    Trailer,
    Done,
}

/// An incremental decoder of `Transfer-Encoding: chunked` (RFC 9112 §7.1).
#[derive(Debug)]
pub struct Chunked {
    state: ChunkState,
    line: Vec<u8>,
}

impl Default for Chunked {
    fn default() -> Self {
        Chunked { state: ChunkState::Size, line: Vec::new() }
    }
}

impl Chunked {
    /// Decodes `input`, appending the payload to `out`. Bytes after the end are an error.
    pub fn push(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        while !input.is_empty() {
            match self.state {
                ChunkState::Done => return Err("data after the last chunk".into()),
                ChunkState::Data(n) => {
                    let take = usize::try_from(n).unwrap_or(usize::MAX).min(input.len());
                    out.extend_from_slice(&input[..take]);
                    input = &input[take..];
                    let left = n - take as u64;
                    self.state = if left == 0 { ChunkState::DataEnd } else { ChunkState::Data(left) };
                }
                ChunkState::Size | ChunkState::DataEnd | ChunkState::Trailer => {
                    let Some(nl) = input.iter().position(|&b| b == b'\n') else {
                        self.line.extend_from_slice(input);
                        if self.line.len() > MAX_SIZE_LINE {
                            return Err("chunk size line too long".into());
                        }
                        return Ok(());
                    };
                    self.line.extend_from_slice(&input[..=nl]);
                    input = &input[nl + 1..];
                    let line = std::mem::take(&mut self.line);
                    let Some(line) = line.strip_suffix(b"\r\n") else {
                        return Err("chunk line not ended by CRLF".into());
                    };
                    self.state = self.after_line(line)?;
                }
            }
        }
        Ok(())
    }

    fn after_line(&self, line: &[u8]) -> Result<ChunkState, String> {
        match self.state {
            ChunkState::DataEnd if line.is_empty() => Ok(ChunkState::Size),
            ChunkState::DataEnd => Err("chunk data longer than its size".into()),
            ChunkState::Trailer if line.is_empty() => Ok(ChunkState::Done),
            ChunkState::Trailer => Ok(ChunkState::Trailer),
            _ => {
                let size = line.split(|&b| b == b';').next().unwrap_or(b"");
                if size.is_empty() || size.len() > 15 || !size.iter().all(u8::is_ascii_hexdigit) {
                    return Err(format!("bad chunk size {:?}", String::from_utf8_lossy(size)));
                }
                let n = size.iter().fold(0u64, |acc, &b| acc * 16 + u64::from(char::from(b).to_digit(16).unwrap_or(0)));
                Ok(if n == 0 { ChunkState::Trailer } else { ChunkState::Data(n) })
            }
        }
    }

    /// Whether the last chunk and the trailer were read.
    pub fn done(&self) -> bool {
        self.state == ChunkState::Done
    }
}

/// Splits a byte stream into `\n`-ended lines, refusing lines longer than a limit.
#[derive(Debug)]
pub struct Lines {
    buf: Vec<u8>,
    max: usize,
}

impl Lines {
    pub fn new(max: usize) -> Lines {
        Lines { buf: Vec::new(), max }
    }

    /// Adds bytes; returns the lines they completed (without the `\n`, empty lines skipped).
    pub fn push(&mut self, input: &[u8]) -> Result<Vec<Vec<u8>>, String> {
        let mut out = Vec::new();
        let mut rest = input;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            self.buf.extend_from_slice(&rest[..nl]);
            rest = &rest[nl + 1..];
            let line = std::mem::take(&mut self.buf);
            if line.len() > self.max {
                return Err(format!("a watch event longer than {} bytes", self.max));
            }
            if !line.iter().all(u8::is_ascii_whitespace) {
                out.push(line);
            }
        }
        self.buf.extend_from_slice(rest);
        if self.buf.len() > self.max {
            return Err(format!("a watch event longer than {} bytes", self.max));
        }
        Ok(out)
    }

    /// Whether a partial line is waiting.
    pub fn pending(&self) -> bool {
        !self.buf.iter().all(u8::is_ascii_whitespace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = ServerUrl::parse("https://k8s.example:6443").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.prefix.as_str()), ("k8s.example", 6443, ""));
        assert_eq!(u.authority(), "k8s.example:6443");
        let u = ServerUrl::parse("https://[2001:db8::1]/base/").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.prefix.as_str()), ("2001:db8::1", 443, "/base"));
        assert_eq!(u.authority(), "[2001:db8::1]");
        let u = ServerUrl::parse("https://127.0.0.1:8443/").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("127.0.0.1", 8443));
        for bad in [
            "http://k8s:6443",
            "https://",
            "https://k8s:0",
            "https://k8s:99999",
            "https://user@k8s",
            "https://k8s/?a=b",
            "https://[2001:db8::1",
            "https://[zz]:1",
            "https://k 8s",
            "https://k8s:x",
        ] {
            assert!(ServerUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(
            encode_query_value("!service.kubernetes.io/service-proxy-name,app in (a b)"),
            "%21service.kubernetes.io%2Fservice-proxy-name%2Capp%20in%20%28a%20b%29"
        );
    }

    #[test]
    fn request_text() {
        let u = ServerUrl::parse("https://k8s:6443/p").unwrap();
        let r = get_request(&u, "/api/v1/services?limit=5", Some("tok"));
        assert!(r.starts_with("GET /p/api/v1/services?limit=5 HTTP/1.1\r\nHost: k8s:6443\r\n"), "{r}");
        assert!(r.contains("\r\nAuthorization: Bearer tok\r\n") && r.ends_with("\r\n\r\n"), "{r}");
        assert!(!get_request(&u, "/", None).contains("Authorization"));
    }

    #[test]
    fn heads() {
        let h = parse_head(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
            .unwrap();
        assert_eq!(h, Head { status: 200, framing: Framing::Chunked });
        let h = parse_head(b"HTTP/1.1 410 Gone\r\ncontent-length: 12\r\n").unwrap();
        assert_eq!(h, Head { status: 410, framing: Framing::Length(12) });
        for bad in [
            &b"HTTP/2 200 OK\r\nContent-Length: 1\r\n"[..],
            b"HTTP/1.1 20 OK\r\nContent-Length: 1\r\n",
            b"HTTP/1.1 200 OK\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n",
            b"HTTP/1.1 200 OK\r\nno colon\r\n",
        ] {
            assert!(parse_head(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(head_end(b"HTTP/1.1 200 OK\r\n\r\nbody").unwrap(), Some(19));
        assert_eq!(head_end(b"HTTP/1.1 200 OK\r\n").unwrap(), None);
        assert!(head_end(&vec![b'a'; MAX_HEAD + 1]).is_err());
    }

    fn decode_in_pieces(input: &[u8], piece: usize) -> Result<(Vec<u8>, bool), String> {
        let mut d = Chunked::default();
        let mut out = Vec::new();
        for p in input.chunks(piece) {
            d.push(p, &mut out)?;
        }
        Ok((out, d.done()))
    }

    #[test]
    fn chunked_decodes_whatever_the_read_boundaries() {
        let body = b"5\r\nhello\r\n1;ext=1\r\n \r\nA\r\n0123456789\r\n0\r\nX-Trailer: y\r\n\r\n";
        for piece in 1..body.len() {
            let (out, done) = decode_in_pieces(body, piece).unwrap();
            assert_eq!(out, b"hello 0123456789", "piece {piece}");
            assert!(done);
        }
        let (out, done) = decode_in_pieces(b"3\r\nabc\r\n", 4).unwrap();
        assert_eq!((out.as_slice(), done), (&b"abc"[..], false));
    }

    #[test]
    fn chunked_is_strict() {
        for bad in
            [&b"5\r\nhelloX\r\n"[..], b"g\r\n", b"\r\n", b"5\nhello\r\n", b"0\r\n\r\nmore", b"ffffffffffffffff\r\n"]
        {
            assert!(decode_in_pieces(bad, 3).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        let mut d = Chunked::default();
        assert!(d.push(&vec![b'1'; MAX_SIZE_LINE + 2], &mut Vec::new()).is_err());
    }

    #[test]
    fn lines_split_across_pushes() {
        let mut l = Lines::new(10);
        assert_eq!(l.push(b"ab").unwrap(), Vec::<Vec<u8>>::new());
        assert!(l.pending());
        assert_eq!(l.push(b"c\n\nde\nf").unwrap(), vec![b"abc".to_vec(), b"de".to_vec()]);
        assert_eq!(l.push(b"\n").unwrap(), vec![b"f".to_vec()]);
        assert!(!l.pending());
        assert!(l.push(b"0123456789A").is_err());
    }
}
