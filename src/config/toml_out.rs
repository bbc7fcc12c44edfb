//! The TOML `--check-config` prints, written key by key: a serializer for the three
//! kinds of values a config holds cost 5 KB of mipsel flash (docs/benchmarks.md).

/// A TOML document: plain keys first, then tables.
#[derive(Default)]
pub struct Doc(String);

impl Doc {
    pub fn str(&mut self, key: &str, v: Option<&str>) {
        if let Some(v) = v {
            self.key(key);
            quote(&mut self.0, v);
            self.0.push('\n');
        }
    }
    pub fn strs(&mut self, key: &str, v: Option<&[String]>) {
        if let Some(v) = v {
            self.key(key);
            self.0.push('[');
            for (i, s) in v.iter().enumerate() {
                if i > 0 {
                    self.0.push_str(", ");
                }
                quote(&mut self.0, s);
            }
            self.0.push_str("]\n");
        }
    }
    pub fn int(&mut self, key: &str, v: Option<i64>) {
        if let Some(v) = v {
            self.key(key);
            self.0.push_str(&v.to_string());
            self.0.push('\n');
        }
    }
    pub fn bool(&mut self, key: &str, v: Option<bool>) {
        if let Some(v) = v {
            self.key(key);
            self.0.push_str(if v { "true\n" } else { "false\n" });
        }
    }
    /// `[name]`: the keys after it are the table's.
    #[cfg(any(test, feature = "cluster"))]
    pub fn table(&mut self, name: &str) {
        if !self.0.is_empty() {
            self.0.push('\n');
        }
        self.0.push('[');
        self.0.push_str(name);
        self.0.push_str("]\n");
    }
    pub fn finish(self) -> String {
        self.0
    }
    fn key(&mut self, key: &str) {
        self.0.push_str(key);
        self.0.push_str(" = ");
    }
}

/// A TOML basic string.
fn quote(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c < ' ' || c == '\u{7f}' => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_string_reads_back_as_written() {
        let odd = ["", "plain", "q\"uote", "back\\slash", "new\nline\ttab\rcr", "\u{1}\u{7f}", "é ünï", "'single'"];
        let mut d = Doc::default();
        for (i, s) in odd.iter().enumerate() {
            d.str(&format!("k{i}"), Some(s));
        }
        d.strs("list", Some(&odd.iter().map(|s| s.to_string()).collect::<Vec<_>>()));
        d.int("n", Some(-5));
        d.bool("b", Some(false));
        d.str("none", None);
        d.table("t");
        d.int("m", Some(7));
        let text = d.finish();
        let t: toml::Table = toml::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        for (i, s) in odd.iter().enumerate() {
            assert_eq!(t[&format!("k{i}")].as_str(), Some(*s));
        }
        let list: Vec<&str> = t["list"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        assert_eq!(list, odd);
        assert_eq!((t["n"].as_integer(), t["b"].as_bool()), (Some(-5), Some(false)));
        assert!(!t.contains_key("none"));
        assert_eq!(t["t"]["m"].as_integer(), Some(7));
    }
}
