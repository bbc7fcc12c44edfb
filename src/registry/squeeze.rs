//! The compact JSON text of a stored object, squeezed with a fixed dictionary of the
//! Kubernetes v1 Service and EndpointSlice schema: what the registry keeps at rest.
//!
//! A stored object's text is mostly its schema: of a typical Service's ~550 bytes, ~400
//! are field names and usual values (`"internalTrafficPolicy":"Cluster"`), and of an
//! EndpointSlice's, each endpoint repeats `"conditions":{"ready":true,…}`. The texts come
//! from one printer (serde_json's compact one, keys sorted: the model declares its fields
//! in that order, `model::parse::tests::objects_print_as_their_trees_print`), so they repeat the
//! same runs in the same order, and a dictionary of those runs takes a squeezed text to
//! about a third of its length. Pure and O(the text's length) both ways.
//!
//! The format: a text that holds no byte below 0x20 (compact JSON never does: controls
//! are escaped inside strings, and there is no whitespace between tokens) becomes the
//! byte [`MARK`] followed by the text with each dictionary word replaced by its code: a
//! byte below 0x20, or one of 0xF5..=0xFE, which no UTF-8 text contains. Any other text
//! is kept as it is; it starts with a byte that is not [`MARK`] (UTF-8 never holds 0xFF).

use std::borrow::Cow;
use std::fmt;

use serde::de::DeserializeOwned;

/// A stored object's text, squeezed: what the registry keeps of it.
#[derive(Clone, PartialEq, Eq)]
pub struct Squeezed(Box<[u8]>);

std::thread_local! {
    /// Scratch space for [`squeeze`]: a squeezed text is allocated once, at its size.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Squeezed {
    pub fn new(text: &str) -> Squeezed {
        Squeezed(SCRATCH.with_borrow_mut(|buf| squeeze(text, buf)))
    }

    /// The text again (`None` only for bytes that were not squeezed here).
    pub fn expand(&self) -> Option<Cow<'_, str>> {
        expand(&self.0)
    }

    /// The object. The text was printed from the same type (by the write or the store), so
    /// it reads back; should it not, the error is logged and the type's empty value stands
    /// in for it.
    pub fn decode<T: DeserializeOwned + Default>(&self) -> T {
        let Some(text) = self.expand() else {
            log::error!("a packed stored object does not expand ({self:?})");
            return T::default();
        };
        serde_json::from_str(&text).unwrap_or_else(|e| {
            log::error!("a packed stored object does not read back ({e}): {text}");
            T::default()
        })
    }

    /// Whether the text holds `needle`, which no word contains, begins or ends with.
    pub fn contains(&self, needle: &str) -> bool {
        self.0.windows(needle.len()).any(|w| w == needle.as_bytes())
    }

    /// Bytes kept.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.0.len()
    }

    #[cfg(test)]
    fn from_bytes(b: &[u8]) -> Squeezed {
        Squeezed(Box::from(b))
    }
}

impl fmt::Debug for Squeezed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Squeezed({} bytes)", self.0.len())
    }
}

/// The first byte of a squeezed text.
const MARK: u8 = 0xFF;

/// The runs the texts of Services and EndpointSlices are made of, longest first: the
/// first that matches is the longest. Each begins with a JSON delimiter, never inside a
/// name or a value, so a word never takes part of one (a search such as
/// `Slot::may_have_health_check_node_port` still finds names that are not words). At
/// most 42 (the codes).
const WORDS: [&str; 42] = [
    r#"{"endpointslice.kubernetes.io/managed-by":"endpointslice-controller.k8s.io","#,
    r#"{"addressType":"IPv4","apiVersion":"discovery.k8s.io/v1","endpoints":["#,
    r#""],"conditions":{"ready":true,"serving":true,"terminating":false}"#,
    r#","ipFamilies":["IPv4"],"ipFamilyPolicy":"SingleStack""#,
    r#"","apiVersion":"discovery.k8s.io/v1","endpoints":["#,
    r#"{"apiVersion":"v1","kind":"Service","metadata":{"#,
    r#","ipFamilies":["IPv4","IPv6"],"ipFamilyPolicy":""#,
    r#"","namespace":"default","resourceVersion":""#,
    r#"{"allocateLoadBalancerNodePorts":true,"#,
    r#"],"kind":"EndpointSlice","metadata":{"#,
    r#","targetRef":{"kind":"Pod","name":""#,
    r#""internalTrafficPolicy":"Cluster""#,
    r#""internalTrafficPolicy":"Local""#,
    r#","status":{"loadBalancer":{}}}"#,
    r#""kubernetes.io/service-name":""#,
    r#""],"externalTrafficPolicy":""#,
    r#""sessionAffinity":"None""#,
    r#","type":"LoadBalancer"}"#,
    r#""creationTimestamp":""#,
    r#"","resourceVersion":""#,
    r#","type":"ClusterIP"}"#,
    r#","type":"NodePort"}"#,
    r#"","clusterIPs":[""#,
    r#","protocol":"TCP""#,
    r#","protocol":"UDP""#,
    r#""],"conditions":{"#,
    r#"","generation":"#,
    r#"","namespace":""#,
    r#"}],"selector":{"#,
    r#"{"addresses":[""#,
    r#","targetPort":"#,
    r#""clusterIP":""#,
    r#"","nodePort":"#,
    r#","nodeName":""#,
    r#""},"ports":[{"#,
    r#","labels":{"#,
    r#""},"spec":{"#,
    r#","ports":[{"#,
    r#","name":""#,
    r#"","uid":""#,
    r#"{"name":""#,
    r#"","port":"#,
];

/// The code of word `i`.
#[expect(clippy::cast_possible_truncation, reason = "i < WORDS.len() = 42")]
const fn code(i: usize) -> u8 {
    if i < 0x20 {
        i as u8
    } else {
        0xF5 + (i - 0x20) as u8
    }
}

/// The word a byte stands for, if it is a code.
fn word(b: u8) -> Option<&'static str> {
    match b {
        0..0x20 => WORDS.get(usize::from(b)).copied(),
        0xF5..=0xFE => WORDS.get(usize::from(b - 0xF5) + 0x20).copied(),
        _ => None,
    }
}

/// Where a word may begin: bit `i` of `FIRST[hash(b0, b1, b2, b3)]` is set when word `i`
/// begins with the bytes `b0 b1 b2 b3` (or others of the same hash: a candidate is still
/// compared). Four bytes tell apart the words that begin with `","`.
const FIRST: [u64; 64] = {
    let mut t = [0u64; 64];
    let mut i = 0;
    while i < WORDS.len() {
        let w = WORDS[i].as_bytes();
        t[hash(w[0], w[1], w[2], w[3])] |= 1 << i;
        i += 1;
    }
    t
};

/// The bytes a run of plain text stops at: those a word may begin with (all begin with a
/// JSON delimiter), and controls, which compact JSON never holds.
const STOP: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 0x20 {
        t[c] = true;
        c += 1;
    }
    t[b'{' as usize] = true;
    t[b'"' as usize] = true;
    t[b',' as usize] = true;
    t[b'}' as usize] = true;
    t[b']' as usize] = true;
    t
};

const fn hash(b0: u8, b1: u8, b2: u8, b3: u8) -> usize {
    (b0 as usize + b1 as usize + b2 as usize * 3 + b3 as usize) & 0x3F
}

/// The text squeezed, allocated at its size (`buf`: scratch space the caller reuses).
fn squeeze(text: &str, buf: &mut Vec<u8>) -> Box<[u8]> {
    let b = text.as_bytes();
    buf.clear();
    buf.push(MARK);
    let mut at = 0;
    while at < b.len() {
        // The bytes no word can begin with go as they are, a run at a time.
        let run = b[at..].iter().position(|&c| STOP[usize::from(c)]).unwrap_or(b.len() - at);
        buf.extend_from_slice(&b[at..at + run]);
        at += run;
        // A run stops at a control (not compact JSON: the text is kept as it is) or at a
        // delimiter; fewer than four bytes left begin no word.
        let Some(&[c, d, e, f]) = b.get(at..at + 4) else {
            if b[at..].iter().any(|&c| c < 0x20) {
                return Box::from(b);
            }
            buf.extend_from_slice(&b[at..]);
            break;
        };
        if c < 0x20 {
            return Box::from(b);
        }
        let mut candidates = FIRST[hash(c, d, e, f)];
        let mut found = None;
        while candidates != 0 {
            let i = candidates.trailing_zeros() as usize;
            candidates &= candidates - 1;
            if crate::bytes::starts_with(&b[at..], WORDS[i].as_bytes()) {
                found = Some(i);
                break;
            }
        }
        match found {
            Some(i) => {
                buf.push(code(i));
                at += WORDS[i].len();
            }
            None => {
                buf.push(c);
                at += 1;
            }
        }
    }
    Box::from(buf.as_slice())
}

/// The text again. `None` only for bytes [`squeeze`] did not make.
fn expand(s: &[u8]) -> Option<Cow<'_, str>> {
    let Some((&MARK, rest)) = s.split_first() else {
        return std::str::from_utf8(s).ok().map(Cow::Borrowed);
    };
    let mut out = Vec::with_capacity(rest.len() * 3);
    for &b in rest {
        match word(b) {
            Some(w) => out.extend_from_slice(w.as_bytes()),
            None => out.push(b),
        }
    }
    String::from_utf8(out).ok().map(Cow::Owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_words_fit_their_codes_and_none_is_a_prefix_of_the_mark() {
        assert!(WORDS.len() <= 0x20 + (0xFE - 0xF5 + 1));
        assert!(WORDS.windows(2).all(|w| w[0].len() >= w[1].len()), "longest first: the first match is the longest");
        for (i, w) in WORDS.iter().enumerate() {
            assert_eq!(word(code(i)), Some(*w));
            assert!(w.len() > 3, "word {i} saves too little: {w}");
            assert!(matches!(w.as_bytes()[0], b'{' | b'"' | b',' | b'}' | b']'), "word {i} begins a token: {w}");
            assert_eq!(WORDS.iter().filter(|x| *x == w).count(), 1, "word {i} twice: {w}");
        }
        assert_eq!(word(b'{'), None);
        assert_eq!(word(0xC3), None, "UTF-8 lead bytes are text");
        assert_eq!(word(MARK), None);
    }

    #[test]
    fn texts_read_back_the_same() {
        let mut buf = Vec::new();
        for text in [
            "",
            "{}",
            r#"{"apiVersion":"v1","kind":"Service","metadata":{"creationTimestamp":"2026-11-24T08:02:23Z","generation":1,"name":"web","namespace":"default","resourceVersion":"19800","uid":"a938624a-61ca-4494-b1a0-1a6b0128dd47"},"spec":{"clusterIP":"198.19.92.255","clusterIPs":["198.19.92.255"],"internalTrafficPolicy":"Cluster","ipFamilies":["IPv4"],"ipFamilyPolicy":"SingleStack","ports":[{"name":"http","port":80,"protocol":"TCP","targetPort":8080}],"selector":{"app":"web"},"sessionAffinity":"None","type":"ClusterIP"},"status":{"loadBalancer":{}}}"#,
            r#"{"metadata":{"name":"café ☕ 𝄞","labels":{"ünï":"\u0001\n"}}}"#,
            "{\"not\":\n\"compact\"}",
            "\u{1}\u{1f}",
            "{}\n",
            "{\"a\":1}\t",
            r#","name":"","name":""#,
        ] {
            let s = squeeze(text, &mut buf);
            assert_eq!(expand(&s).as_deref(), Some(text), "{s:?}");
        }
    }

    #[test]
    fn a_typical_service_and_slice_shrink_to_a_third() {
        let svc = r#"{"apiVersion":"v1","kind":"Service","metadata":{"creationTimestamp":"2026-11-24T08:02:23Z","generation":1,"name":"bench-09999","namespace":"default","resourceVersion":"19800","uid":"a938624a-61ca-4494-b1a0-1a6b0128dd47"},"spec":{"clusterIP":"198.19.92.255","clusterIPs":["198.19.92.255"],"internalTrafficPolicy":"Cluster","ipFamilies":["IPv4"],"ipFamilyPolicy":"SingleStack","ports":[{"name":"http","port":80,"protocol":"TCP","targetPort":8080}],"selector":{"app":"bench-09999"},"sessionAffinity":"None","type":"ClusterIP"},"status":{"loadBalancer":{}}}"#;
        let slice = r#"{"addressType":"IPv4","apiVersion":"discovery.k8s.io/v1","endpoints":[{"addresses":["198.18.133.45"],"conditions":{"ready":true,"serving":true,"terminating":false},"nodeName":"node-a"},{"addresses":["198.18.133.46"],"conditions":{"ready":true,"serving":true,"terminating":false},"nodeName":"node-a"}],"kind":"EndpointSlice","metadata":{"creationTimestamp":"2026-11-24T08:02:23Z","labels":{"kubernetes.io/service-name":"bench-09999"},"name":"bench-09999-abcde","namespace":"default","resourceVersion":"20000","uid":"d448dfcf-6078-4107-a611-5595590bac86"},"ports":[{"name":"http","port":8080,"protocol":"TCP"}]}"#;
        let mut buf = Vec::new();
        for text in [svc, slice] {
            let s = squeeze(text, &mut buf);
            assert!(s.len() * 3 < text.len(), "{} of {} bytes: {:?}", s.len(), text.len(), String::from_utf8_lossy(&s));
            assert_eq!(expand(&s).as_deref(), Some(text));
        }
    }

    #[test]
    fn bytes_not_squeezed_here_are_refused() {
        assert_eq!(expand(&[MARK, 0xC3]), None, "not UTF-8 once expanded");
        assert_eq!(expand(&[0xC3]), None);
        assert_eq!(Squeezed::from_bytes(&[MARK, 0xC3]).expand(), None);
        let s = Squeezed::new(r#"{"spec":{"healthCheckNodePort":30001,"ports":[{"name":"a","port":1}]}}"#);
        assert!(s.contains("healthCheckNodePort"));
        assert!(!s.contains("nodePort"), "inside a word");
    }

    mod prop {
        use super::super::*;
        use proptest::prelude::*;

        /// Pieces texts are made of: the words themselves, parts of them, delimiters,
        /// multi-byte characters and controls.
        fn piece() -> impl Strategy<Value = String> {
            prop_oneof![
                (0..WORDS.len()).prop_map(|i| WORDS[i].to_string()),
                (0..WORDS.len(), 1usize..8).prop_map(|(i, cut)| WORDS[i][..WORDS[i].len().min(cut)].to_string()),
                "[a-z0-9\\{}\\[\\]\":,.-]{0,6}",
                "[é☕𝄞\\u{80}-\\u{7ff}]{1,2}",
                "[\\x00-\\x1f]",
            ]
        }

        proptest! {
            #[test]
            fn any_text_reads_back(pieces in proptest::collection::vec(piece(), 0..40)) {
                let text: String = pieces.concat();
                let s = Squeezed::new(&text);
                let back = s.expand();
                prop_assert_eq!(back.as_deref(), Some(text.as_str()));
                prop_assert!(s.bytes() <= text.len() + 1);
            }
        }
    }
}
