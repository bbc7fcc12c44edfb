//! Comparing `nft list` output with what we rendered: the kernel adds the default
//! `size` of dynamic sets and lists set elements in its own order, so both sides
//! become one line per statement or element, sorted.
//! Used by the data plane's unit tests (src/dataplane/tests.rs) and tests/netns.

pub fn normalize(listing: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut elements: Option<String> = None;
    for l in listing.lines().map(str::trim).filter(|l| !l.starts_with("size ")) {
        let acc = match (elements.take(), l.strip_prefix("elements = {")) {
            (None, None) => {
                lines.push(l.to_string());
                continue;
            }
            (None, Some(rest)) => rest.to_string(),
            (Some(acc), _) => acc + " " + l,
        };
        match acc.strip_suffix('}') {
            Some(all) => lines.extend(all.split(',').map(|e| format!("element {}", e.trim()))),
            None => elements = Some(acc),
        }
    }
    lines.sort();
    lines
}
