//! An object's (namespace, name): the key of the registry's and the planner's maps.

use std::cmp::Ordering;
use std::fmt;

/// A namespaced object by (namespace, name), ordered as the tuple `(String, String)`
/// is, but compared a word at a time ([`crate::bytes`]): keys share their namespace and
/// most of their name, and every lookup in the registry's and the planner's ordered maps
/// compares a dozen of them.
#[derive(Clone, Default)]
pub struct Key(pub String, pub String);

impl Key {
    pub fn new(namespace: &str, name: &str) -> Key {
        Key(namespace.to_string(), name.to_string())
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        crate::bytes::eq(self.1.as_bytes(), other.1.as_bytes())
            && crate::bytes::eq(self.0.as_bytes(), other.0.as_bytes())
    }
}

impl Eq for Key {}

impl Ord for Key {
    fn cmp(&self, other: &Key) -> Ordering {
        crate::bytes::cmp(self.0.as_bytes(), other.0.as_bytes())
            .then_with(|| crate::bytes::cmp(self.1.as_bytes(), other.1.as_bytes()))
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// As the tuple prints: `("namespace", "name")`.
impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (&self.0, &self.1).fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn orders_and_compares_as_the_tuple(a in "[ab]{0,10}", b in "[ab]{0,10}", c in "[ab-]{0,12}", d in "[ab-]{0,12}") {
            let (x, y) = (Key(a.clone(), c.clone()), Key(b.clone(), d.clone()));
            prop_assert_eq!(x.cmp(&y), (&a, &c).cmp(&(&b, &d)));
            prop_assert_eq!(x == y, (&a, &c) == (&b, &d));
        }
    }

    #[test]
    fn prints_as_the_tuple() {
        assert_eq!(format!("{:?}", Key::new("default", "web")), r#"("default", "web")"#);
    }
}
