//! The top level of a JSON text, cut into the texts of its members or elements, with no
//! tree built: an `objects.apply` of a hundred objects is read this way, and each object
//! is then decoded straight from its own text (`model::parse::objects_of_text`).
//!
//! Pure. The text must already be known to be valid JSON ([`valid`]): the cutting only
//! follows strings and brackets.

/// Whether `text` is one JSON value (serde_json's checks, nothing kept).
pub fn valid(text: &str) -> bool {
    serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
}

/// An object's members: each key (as written, without its quotes) with its value's text.
/// `None` for anything but an object, and for a key with an escape in it, which only a
/// full parse reads right.
pub fn members(text: &str) -> Option<Vec<(&str, &str)>> {
    let mut out = Vec::new();
    walk(text, b'{', |k, v| {
        out.push((k?, v));
        Some(true)
    })?;
    Some(out)
}

/// An array's elements' texts; `None` for anything but an array.
pub fn elements(text: &str) -> Option<Vec<&str>> {
    let mut out = Vec::new();
    walk(text, b'[', |_, v| {
        out.push(v);
        Some(true)
    })?;
    Some(out)
}

/// The values of two members, reading only until both are seen: for an object that a
/// full parse then reads again, and that parse refuses a repeated key.
pub fn two_members<'a>(text: &'a str, a: &str, b: &str) -> Option<(&'a str, &'a str)> {
    let (mut va, mut vb) = (None, None);
    walk(text, b'{', |k, v| {
        let k = k?;
        if k == a {
            va = Some(v);
        } else if k == b {
            vb = Some(v);
        }
        Some(va.is_none() || vb.is_none())
    })?;
    Some((va?, vb?))
}

/// Calls `f` with each member (key, value) of an object, or each element (no key) of an
/// array, while it returns `Some(true)`; `None` when `text` is not that container or `f`
/// returns `None`.
fn walk<'a>(text: &'a str, open: u8, mut f: impl FnMut(Option<&'a str>, &'a str) -> Option<bool>) -> Option<()> {
    let b = text.as_bytes();
    let mut i = ws(b, 0);
    if b.get(i) != Some(&open) {
        return None;
    }
    i = ws(b, i + 1);
    if matches!(b.get(i), Some(b'}' | b']')) {
        return Some(());
    }
    loop {
        let mut key = None;
        if open == b'{' {
            let k_end = skip(b, i);
            key = text.get(i + 1..k_end - 1).filter(|k| !k.contains('\\'));
            // After the key: whitespace, ':', whitespace, the value.
            i = ws(b, ws(b, k_end) + 1);
            key?;
        }
        let end = skip(b, i);
        if !f(key, &text[i..end])? {
            return Some(());
        }
        i = ws(b, end);
        match b.get(i) {
            Some(b',') => i = ws(b, i + 1),
            _ => return Some(()),
        }
    }
}

/// A member's value text; the last one of a repeated key, as a tree keeps it.
pub fn get<'a>(members: &[(&str, &'a str)], key: &str) -> Option<&'a str> {
    members.iter().rev().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

/// A string value's content, when it has no escape (the only strings compared here).
pub fn plain_str(value: &str) -> Option<&str> {
    let s = value.strip_prefix('"')?.strip_suffix('"')?;
    (!s.contains('\\')).then_some(s)
}

fn ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// The end of the value that starts at `i`.
fn skip(b: &[u8], mut i: usize) -> usize {
    let mut depth = 0usize;
    while let Some(&c) = b.get(i) {
        match c {
            b'"' => {
                i = string_end(b, i + 1);
                if depth == 0 {
                    return i;
                }
                continue;
            }
            b'{' | b'[' => depth += 1,
            // A scalar ends before the bracket that closes its parent.
            b'}' | b']' if depth == 0 => return i,
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            b',' | b' ' | b'\t' | b'\n' | b'\r' | b':' if depth == 0 => return i,
            _ => {}
        }
        i += 1;
    }
    i
}

/// Just after the closing quote of the string whose content starts at `i`.
fn string_end(b: &[u8], mut i: usize) -> usize {
    while let Some(rest) = b.get(i..) {
        match rest.iter().position(|&c| c == b'"' || c == b'\\') {
            Some(n) if rest[n] == b'\\' => i += n + 2,
            Some(n) => return i + n + 1,
            None => break,
        }
    }
    b.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    fn tree_members(text: &str) -> Vec<(String, Value)> {
        match serde_json::from_str::<Value>(text).unwrap() {
            Value::Object(m) => m.into_iter().collect(),
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn members_are_cut_as_a_parser_reads_them() {
        let text =
            r#" { "a" : 1 , "b":"x,}\"]" ,"c": { "d": [1, {"e": "}"}] },"e":[ ],"f":-1.5e3 , "g":null,"h":true} "#;
        let m = members(text).unwrap();
        let got: Vec<(String, Value)> =
            m.iter().map(|(k, v)| (k.to_string(), serde_json::from_str(v).unwrap())).collect();
        let mut want = tree_members(text);
        want.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(got, want);
        assert_eq!(get(&m, "b"), Some(r#""x,}\"]""#));
        assert_eq!(get(&m, "f"), Some("-1.5e3"));
        assert_eq!(members("{}").unwrap(), vec![]);
        assert_eq!(members(" [1] "), None);
        assert_eq!(members(r#""{""#), None);
        assert_eq!(members(r#"{"k\u0069nd": 1}"#), None, "an escaped key is left to the parser");
    }

    #[test]
    fn the_last_of_a_repeated_key_wins_as_in_a_tree() {
        let text = r#"{"kind":"Service","kind":"Node"}"#;
        assert_eq!(get(&members(text).unwrap(), "kind"), Some(r#""Node""#));
        assert_eq!(serde_json::from_str::<Value>(text).unwrap()["kind"], "Node");
    }

    #[test]
    fn elements_are_cut_as_a_parser_reads_them() {
        let text = r#"[ {"a":[1,2]}, "s]", 3 ,[ ] , null ]"#;
        let got: Vec<Value> = elements(text).unwrap().iter().map(|e| serde_json::from_str(e).unwrap()).collect();
        assert_eq!(Value::Array(got), serde_json::from_str::<Value>(text).unwrap());
        assert_eq!(elements("[]").unwrap(), Vec::<&str>::new());
        assert_eq!(elements("{}"), None);
    }

    #[test]
    fn plain_strings_only() {
        assert_eq!(plain_str(r#""v1""#), Some("v1"));
        assert_eq!(plain_str(r#""v\u0031""#), None);
        assert_eq!(plain_str("1"), None);
        assert!(valid(" {\"a\": [1]} ") && !valid("{\"a\": [1}") && !valid("{} x"));
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| json!(f)),
            "[ -~\\\\\"\u{e9}\u{2028}]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map("[a-z\"\\\\ ]{0,4}", inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Any object, printed compact or pretty, cuts into members that parse to the
        /// tree's members (keys with escapes aside, which `members` refuses).
        #[test]
        fn any_object_cuts_into_its_members(v in arb_json(), pretty in any::<bool>()) {
            let obj = json!({"x": v.clone(), "y": [v.clone(), 1], "z": "}"});
            let text = if pretty { serde_json::to_string_pretty(&obj).unwrap() } else { obj.to_string() };
            prop_assert!(valid(&text));
            let m = members(&text).unwrap();
            let got: Vec<(String, Value)> = m.iter().map(|(k, v)| (k.to_string(), serde_json::from_str(v).unwrap())).collect();
            prop_assert_eq!(got, tree_members(&text));
            // Compared with a parse of the same text (a float need not print back exactly).
            if v.is_array() {
                let text = v.to_string();
                let e: Vec<Value> = elements(&text).unwrap().iter().map(|e| serde_json::from_str(e).unwrap()).collect();
                prop_assert_eq!(Value::Array(e), serde_json::from_str::<Value>(&text).unwrap());
            }
            if v.is_object() {
                let text = serde_json::to_string_pretty(&v).unwrap();
                let o: serde_json::Map<String, Value> = serde_json::from_str(&text).unwrap();
                match members(&text) {
                    Some(m) => {
                        prop_assert_eq!(m.len(), o.len());
                        for (k, val) in m {
                            prop_assert_eq!(&serde_json::from_str::<Value>(val).unwrap(), &o[k]);
                        }
                    }
                    None => prop_assert!(o.keys().any(|k| k.contains('\\') || k.contains('"'))),
                }
            }
        }
    }
}
