//! A small string-to-string map for labels, annotations and selectors.
//!
//! A `BTreeMap<String, String>` with one entry costs a whole B-tree leaf (~544 bytes on
//! x86_64); at 10 000 Services that was about 1 KiB a Service (issue 11). [`SmallMap`] is a
//! vector of boxed pairs kept sorted by key: one allocation for the pairs plus the strings.
//! It reads and prints exactly as the `BTreeMap` did: JSON objects in key order, and a key
//! given twice keeps its last value.

use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Key → value, sorted by key, keys unique. Lookups are binary searches.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SmallMap(Vec<(Box<str>, Box<str>)>);

impl SmallMap {
    /// Drops spare capacity (a map parsed from text grows as it is read).
    pub fn shrink_to_fit(&mut self) {
        self.0.shrink_to_fit();
    }
    pub const fn new() -> Self {
        Self(Vec::new())
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn find(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| (**k).cmp(key))
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.find(key).ok().map(|i| &*self.0[i].1)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.find(key).is_ok()
    }

    /// Sets `key` to `value`; returns the value it replaced.
    pub fn insert(&mut self, key: impl Into<Box<str>>, value: impl Into<Box<str>>) -> Option<Box<str>> {
        let (key, value) = (key.into(), value.into());
        // Input is usually sorted already (Go and serde_json print objects in key order).
        if self.0.last().is_none_or(|(last, _)| *last < key) {
            self.0.push((key, value));
            return None;
        }
        match self.find(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, value)),
            Err(i) => {
                self.0.insert(i, (key, value));
                None
            }
        }
    }

    /// Entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }
}

impl<'a> IntoIterator for &'a SmallMap {
    type Item = (&'a str, &'a str);
    type IntoIter =
        std::iter::Map<std::slice::Iter<'a, (Box<str>, Box<str>)>, fn(&'a (Box<str>, Box<str>)) -> (&'a str, &'a str)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }
}

impl<K: Into<Box<str>>, V: Into<Box<str>>> FromIterator<(K, V)> for SmallMap {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut m = Self::new();
        for (k, v) in iter {
            m.insert(k, v);
        }
        m.0.shrink_to_fit();
        m
    }
}

impl<K: Into<Box<str>>, V: Into<Box<str>>, const N: usize> From<[(K, V); N]> for SmallMap {
    fn from(a: [(K, V); N]) -> Self {
        a.into_iter().collect()
    }
}

impl fmt::Debug for SmallMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for SmallMap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(&**k, &**v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for SmallMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = SmallMap;
            // serde's own wording for a map, so errors read as they did with `BTreeMap`.
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<SmallMap, A::Error> {
                // Read everything, then one stable sort: O(n log n) in any input order (an
                // insert per key would cost O(n²) for keys sent in reverse order).
                let mut v: Vec<(Box<str>, Box<str>)> = Vec::new();
                while let Some((k, val)) = a.next_entry::<String, String>()? {
                    v.push((k.into(), val.into()));
                }
                v.sort_by(|x, y| x.0.cmp(&y.0));
                // A repeated key keeps its last value, as serde_json's BTreeMap does: after a
                // stable sort the last of equal keys is the one read last.
                let mut out: Vec<(Box<str>, Box<str>)> = Vec::with_capacity(v.len());
                for e in v {
                    match out.last_mut() {
                        Some(last) if last.0 == e.0 => *last = e,
                        _ => out.push(e),
                    }
                }
                out.shrink_to_fit();
                Ok(SmallMap(out))
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn entries() -> impl Strategy<Value = Vec<(String, String)>> {
        // Few distinct keys so duplicates are common; any Unicode, quotes and escapes included.
        proptest::collection::vec(("[a-c/.\"\\\\é\u{1}-]{0,3}", "\\PC{0,6}"), 0..12)
    }

    fn json_object(entries: &[(String, String)]) -> String {
        let parts: Vec<String> = entries
            .iter()
            .map(|(k, v)| format!("{}:{}", serde_json::to_string(k).unwrap(), serde_json::to_string(v).unwrap()))
            .collect();
        format!("{{{}}}", parts.join(","))
    }

    proptest! {
        /// Built by inserts in any order, it holds and prints what a BTreeMap would.
        #[test]
        fn same_as_btreemap(e in entries()) {
            let b: BTreeMap<String, String> = e.iter().cloned().collect();
            let s: SmallMap = e.iter().cloned().collect();
            prop_assert_eq!(serde_json::to_string(&s).unwrap(), serde_json::to_string(&b).unwrap());
            prop_assert_eq!(serde_json::to_string_pretty(&s).unwrap(), serde_json::to_string_pretty(&b).unwrap());
            prop_assert_eq!(format!("{s:?}"), format!("{b:?}"));
            prop_assert_eq!(s.len(), b.len());
            prop_assert_eq!(s.is_empty(), b.is_empty());
            prop_assert!(s.iter().eq(b.iter().map(|(k, v)| (k.as_str(), v.as_str()))));
            for (k, _) in &e {
                prop_assert_eq!(s.get(k), b.get(k).map(String::as_str));
                prop_assert!(s.contains_key(k));
            }
            prop_assert_eq!(s.get("zz-absent"), None);
        }

        /// Read from a JSON object with repeated keys in any order: the same map as
        /// serde_json gives a BTreeMap (the last value wins), printed the same.
        #[test]
        fn reads_like_btreemap(e in entries()) {
            let text = json_object(&e);
            let b: BTreeMap<String, String> = serde_json::from_str(&text).unwrap();
            let s: SmallMap = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(serde_json::to_string(&s).unwrap(), serde_json::to_string(&b).unwrap());
            let s2: SmallMap = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
            prop_assert_eq!(&s2, &s);
        }

        /// Equal exactly when the BTreeMaps are equal, whatever order the keys came in.
        #[test]
        fn equality_is_by_content(a in entries(), b in entries()) {
            let (ba, bb): (BTreeMap<_, _>, BTreeMap<_, _>) = (a.iter().cloned().collect(), b.iter().cloned().collect());
            let sa: SmallMap = a.iter().cloned().collect();
            let sb: SmallMap = bb.iter().rev().map(|(k, v)| (k.clone(), v.clone())).collect();
            prop_assert_eq!(sa == sb, ba == bb);
        }
    }

    #[test]
    fn insert_replaces_and_returns_old() {
        let mut m = SmallMap::new();
        assert_eq!(m.insert("b", "1"), None);
        assert_eq!(m.insert("a", "2"), None);
        assert_eq!(m.insert("b", "3").as_deref(), Some("1"));
        assert_eq!(serde_json::to_string(&m).unwrap(), r#"{"a":"2","b":"3"}"#);
    }

    #[test]
    fn bad_input_errors_like_btreemap() {
        for text in [r#""x""#, "[1]", r#"{"a":1}"#, r#"{"a":null}"#, "7", r#"{"a":"b","c":{}}"#] {
            let b = serde_json::from_str::<BTreeMap<String, String>>(text).unwrap_err().to_string();
            let s = serde_json::from_str::<SmallMap>(text).unwrap_err().to_string();
            assert_eq!(s, b, "input {text}");
        }
        // In an object, with the field path as the API reports it.
        #[derive(Deserialize)]
        struct W {
            #[allow(dead_code)]
            m: Option<SmallMap>,
        }
        #[derive(Deserialize)]
        struct Wb {
            #[allow(dead_code)]
            m: Option<BTreeMap<String, String>>,
        }
        for text in [r#"{"m":{"k":5}}"#, r#"{"m":"s"}"#] {
            let b =
                serde_path_to_error::deserialize::<_, Wb>(&mut serde_json::Deserializer::from_str(text)).err().unwrap();
            let s =
                serde_path_to_error::deserialize::<_, W>(&mut serde_json::Deserializer::from_str(text)).err().unwrap();
            assert_eq!(s.to_string(), b.to_string(), "input {text}");
            assert_eq!(s.path().to_string(), b.path().to_string());
        }
        let w: W = serde_json::from_str(r#"{"m":null}"#).unwrap();
        assert!(w.m.is_none());
    }

    #[test]
    fn many_keys_in_reverse_order_decode_in_n_log_n() {
        let n = 100_000;
        let body: Vec<String> = (0..n).rev().map(|i| format!("\"k{i:07}\":\"v\"")).collect();
        let json = format!("{{{}}}", body.join(","));
        let started = std::time::Instant::now();
        let m: SmallMap = serde_json::from_str(&json).unwrap();
        assert_eq!(m.len(), n);
        assert!(m.iter().zip(m.iter().skip(1)).all(|(a, b)| a.0 < b.0));
        // Inserting one by one moves ~160 GB here (n²/2 entries of 32 bytes); a sort takes ~1 s.
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "{:?}", started.elapsed());
    }
}
