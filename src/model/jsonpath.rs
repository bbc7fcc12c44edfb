//! The field path of a decode error, found from where in the text the error is.
//!
//! Objects are parsed from text straight into the model types with plain `serde_json`,
//! which says *where* a value failed (`at line 3 column 17`) but not *which field* it
//! was. Tracking the path while decoding (`serde_path_to_error`) wraps every visitor of
//! every model type and costs flash and time on every request; only a failed decode
//! needs the path, so it is found afterwards by scanning the text up to that position.
//!
//! The path reads as `serde_path_to_error` prints it (`spec.ports[0].port`, `.` for the
//! whole document); the tests check the two agree.

/// One step of a path.
enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

/// The byte offset of serde_json's `line` (1-based) and `column` (bytes into the line).
pub fn offset_of(text: &str, line: usize, column: usize) -> usize {
    let start = if line <= 1 {
        0
    } else {
        text.bytes().enumerate().filter(|&(_, b)| b == b'\n').nth(line - 2).map_or(text.len(), |(i, _)| i + 1)
    };
    (start + column).min(text.len())
}

/// The path of the innermost value of `text` that holds byte offset `at` or ends there:
/// serde_json reports a value of the wrong type just after it (or at its `{`/`[`), and a
/// missing field just after its object's `}`.
pub fn path_at(text: &str, at: usize) -> String {
    let mut scan = Scan { b: text.as_bytes(), i: 0, at, path: Vec::new() };
    scan.value(0);
    let mut out = String::new();
    for seg in &scan.path {
        match seg {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Index(n) => {
                out.push('[');
                out.push_str(&n.to_string());
                out.push(']');
            }
        }
    }
    if out.is_empty() {
        out.push('.');
    }
    out
}

struct Scan<'a> {
    b: &'a [u8],
    i: usize,
    at: usize,
    /// The path of the value being read.
    path: Vec<Seg<'a>>,
}

/// Deeper than serde_json's own limit (128): it refuses the text before this is reached.
const MAX_DEPTH: usize = 256;

impl<'a> Scan<'a> {
    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    /// Past the string that starts at `self.i` (a `"`); its contents without the quotes.
    fn string(&mut self) -> &'a str {
        let start = self.i + 1;
        let mut j = start;
        while j < self.b.len() && self.b[j] != b'"' {
            j += if self.b[j] == b'\\' { 2 } else { 1 };
        }
        let end = j.min(self.b.len());
        self.i = (j + 1).min(self.b.len());
        // Keys are printed as the text has them (escapes are rare in field names).
        std::str::from_utf8(&self.b[start..end]).unwrap_or("?")
    }

    /// Reads one value; true when `at` lies within it or at its end, `self.path` then
    /// naming the innermost such value.
    fn value(&mut self, depth: usize) -> bool {
        self.ws();
        if self.i >= self.at || self.i >= self.b.len() || depth > MAX_DEPTH {
            return true;
        }
        match self.b[self.i] {
            b'{' => {
                self.i += 1;
                loop {
                    self.ws();
                    if self.i >= self.at || self.i >= self.b.len() {
                        return true;
                    }
                    match self.b[self.i] {
                        b'}' => {
                            self.i += 1;
                            return self.i >= self.at;
                        }
                        b',' => self.i += 1,
                        b'"' => {
                            let key = self.string();
                            self.ws();
                            if self.i >= self.at || self.i >= self.b.len() || self.b[self.i] != b':' {
                                return true;
                            }
                            self.i += 1;
                            self.path.push(Seg::Key(key));
                            if self.value(depth + 1) {
                                return true;
                            }
                            self.path.pop();
                        }
                        _ => return true,
                    }
                }
            }
            b'[' => {
                self.i += 1;
                let mut n = 0;
                loop {
                    self.ws();
                    if self.i >= self.b.len() {
                        return true;
                    }
                    // A value that starts at `at` is an item: its index is in the path.
                    match self.b[self.i] {
                        b']' | b',' if self.i >= self.at => return true,
                        b']' => {
                            self.i += 1;
                            return self.i >= self.at;
                        }
                        b',' => self.i += 1,
                        _ => {
                            self.path.push(Seg::Index(n));
                            if self.value(depth + 1) {
                                return true;
                            }
                            self.path.pop();
                            n += 1;
                        }
                    }
                }
            }
            b'"' => {
                self.string();
                self.i >= self.at
            }
            _ => {
                while self.i < self.b.len()
                    && !matches!(self.b[self.i], b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r')
                {
                    self.i += 1;
                }
                self.i >= self.at
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_count_lines_and_bytes() {
        let t = "{\n  \"a\": 1,\n  \"b\": 2\n}";
        assert_eq!(offset_of(t, 1, 0), 0);
        assert_eq!(offset_of(t, 2, 2), 4);
        assert_eq!(&t[offset_of(t, 3, 2)..offset_of(t, 3, 5)], "\"b\"");
        assert_eq!(offset_of(t, 9, 9), t.len());
    }

    #[test]
    fn paths_of_positions() {
        let t = r#"{"spec":{"ports":[{"port":1},{"port":"x"}],"s":{"a.b/c":7}}}"#;
        let after = |needle: &str| t.find(needle).unwrap() + needle.len();
        assert_eq!(path_at(t, after(r#""x""#)), "spec.ports[1].port");
        assert_eq!(path_at(t, after(r#"{"port":1}"#)), "spec.ports[0]");
        assert_eq!(path_at(t, after("7")), "spec.s.a.b/c");
        assert_eq!(path_at(t, t.find(r#"{"a.b"#).unwrap()), "spec.s");
        assert_eq!(path_at(t, t.len()), ".");
        assert_eq!(path_at(t, 0), ".");
        // Broken text ends the scan where it breaks.
        assert_eq!(path_at(r#"{"a":[1,"#, 99), "a");
        assert_eq!(path_at(r#"{"a" 1}"#, 99), ".");
    }
}
