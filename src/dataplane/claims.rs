//! Who holds each key of the table's shared maps.
//!
//! ClusterIPs and NodePorts are unique by allocation, but nothing makes `externalIPs`
//! or LoadBalancer ingress IPs unique: two services can both say `198.18.5.5` port 80.
//! The kernel refuses a map element whose key exists with other data, and it would
//! refuse the whole transaction, every time, for every service. So each key has one
//! holder: the service that claimed it first. A full build claims oldest first
//! (`creationTimestamp`, RFC 3339 in UTC compares as text), then by namespace and name,
//! so the oldest service wins, as after a restart. The others' elements are withheld,
//! reported as conflicts, and come back when the holder lets the key go.

use std::collections::{BTreeMap, BTreeSet};

use crate::fxhash::FxHashMap;
use crate::nft::ir::{Element, SetName, Value};
use crate::nft::{packed, render};

use super::ServicePieces;

/// What stands for a missing `creationTimestamp` when services claim keys: it sorts
/// after every time.
pub const NOT_CREATED: &str = "~";

/// One withheld element: `key` of map `map` is held by `holder`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict<K> {
    pub map: String,
    pub key: Vec<Value>,
    pub holder: K,
}

impl<K> Conflict<K> {
    /// `198.18.5.5 . tcp . 80 in service-ips-v4 is held by HOLDER`.
    pub fn describe(&self, holder: &str) -> String {
        let key: Vec<String> = self.key.iter().map(render::value).collect();
        format!("{} in {} is held by {holder}", key.join(" . "), self.map)
    }
}

/// The destination an element belongs to: its key, without the slot for a backends map.
fn claim_key<'a>(map: &str, key: &'a [Value]) -> &'a [Value] {
    if super::names::is_backends_map(map) {
        &key[..key.len().saturating_sub(1)]
    } else {
        key
    }
}

#[derive(Debug, Default)]
pub struct Claims<K> {
    /// The holder of each destination, by its key packed (`nft::packed::pack_values_into`).
    /// Hashed, never walked: a full build looks up every element's key here, and an
    /// ordered map compared ~14 keys a lookup at 10 000 services.
    holder: FxHashMap<Box<[u8]>, K>,
    /// Services with withheld elements, and the keys they wait for.
    waiting: BTreeMap<K, Vec<Conflict<K>>>,
}

impl<K: Ord + Clone> Claims<K> {
    /// Takes the keys of `pieces` for `who` where they are free, and removes from
    /// `pieces` the elements whose key another service holds (returned).
    pub fn claim(&mut self, who: &K, pieces: &mut ServicePieces) -> Vec<Conflict<K>> {
        let mut conflicts = Vec::new();
        let mut buf = Vec::new();
        pieces.elements.retain(|(map, el)| {
            let key = claim_key(map, &el.key);
            packed::pack_values_into(&mut buf, key);
            match self.holder.get(buf.as_slice()) {
                Some(h) if h != who => {
                    // Reported once per destination, by the set that says what it is (a
                    // count set by its family's name: `service-ips-v4`).
                    if !conflicts.iter().any(|c: &Conflict<K>| c.key == key) {
                        let map = super::names::dispatch_name(map).to_string();
                        conflicts.push(Conflict { map, key: key.to_vec(), holder: h.clone() });
                    }
                    false
                }
                Some(_) => true,
                None => {
                    self.holder.insert(buf.as_slice().into(), who.clone());
                    true
                }
            }
        });
        if conflicts.is_empty() {
            self.waiting.remove(who);
        } else {
            self.waiting.insert(who.clone(), conflicts.clone());
        }
        conflicts
    }

    /// Lets go of what `who` held (its pieces' `elements` as last claimed) and of what it
    /// waited for. Returns the services that waited for a released key: they should claim
    /// again.
    pub fn release(&mut self, who: &K, elements: &[(SetName, Element)]) -> BTreeSet<K> {
        self.waiting.remove(who);
        let mut freed = BTreeSet::new();
        let mut buf = Vec::new();
        for (map, el) in elements {
            let key = claim_key(map, &el.key);
            packed::pack_values_into(&mut buf, key);
            if self.holder.get(buf.as_slice()) == Some(who) {
                self.holder.remove(buf.as_slice());
                freed.insert(key);
            }
        }
        if freed.is_empty() {
            return BTreeSet::new();
        }
        self.waiting
            .iter()
            .filter(|(_, cs)| cs.iter().any(|c| freed.contains(c.key.as_slice())))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Every withheld element, by service.
    pub fn conflicts(&self) -> impl Iterator<Item = (&K, &Vec<Conflict<K>>)> {
        self.waiting.iter()
    }

    pub fn clear(&mut self) {
        self.holder.clear();
        self.waiting.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(keys: &[(&str, &str, u16)]) -> ServicePieces {
        ServicePieces {
            elements: keys
                .iter()
                .map(|(map, ip, port)| {
                    let mut key = vec![Value::Addr(ip.parse().unwrap()), Value::Proto(6), Value::Port(*port)];
                    if crate::dataplane::names::is_backends_map(map) {
                        key.push(Value::Int(0));
                    }
                    (map.to_string().into(), Element { key, data: None, timeout: None })
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn the_first_claimant_holds_a_key_and_the_second_waits() {
        let mut c: Claims<&str> = Claims::default();
        let mut a = pieces(&[("service-ips-v4", "198.18.5.5", 80), ("service-ips-v4", "198.19.0.1", 80)]);
        assert!(c.claim(&"a", &mut a).is_empty());
        assert_eq!(a.elements.len(), 2);

        let mut b = pieces(&[("service-ips-v4", "198.18.5.5", 80), ("service-ips-v4", "198.19.0.2", 80)]);
        let conflicts = c.claim(&"b", &mut b);
        assert_eq!(b.elements.len(), 1, "b keeps only its free key");
        assert_eq!(conflicts.len(), 1);
        assert_eq!(conflicts[0].holder, "a");
        assert_eq!(conflicts[0].describe(conflicts[0].holder), "198.18.5.5 . tcp . 80 in service-ips-v4 is held by a");
        assert_eq!(c.conflicts().count(), 1);

        // An update of a: it lets go (b is named, to claim again), takes its keys back
        // first, and b is still left out.
        let woken = c.release(&"a", &a.elements);
        assert_eq!(woken.into_iter().collect::<Vec<_>>(), vec!["b"]);
        let mut a2 = pieces(&[("service-ips-v4", "198.18.5.5", 80)]);
        assert!(c.claim(&"a", &mut a2).is_empty());
        let mut b2 = pieces(&[("service-ips-v4", "198.18.5.5", 80), ("service-ips-v4", "198.19.0.2", 80)]);
        assert_eq!(c.claim(&"b", &mut b2).len(), 1);
        assert_eq!(b2.elements.len(), 1);
    }

    #[test]
    fn releasing_a_key_names_who_waited_and_the_waiter_gets_it() {
        let mut c: Claims<&str> = Claims::default();
        let mut a = pieces(&[("service-ips-v4", "198.18.5.5", 80)]);
        c.claim(&"a", &mut a);
        let mut b = pieces(&[("service-ips-v4", "198.18.5.5", 80)]);
        assert_eq!(c.claim(&"b", &mut b).len(), 1);
        let mut other = pieces(&[("service-ips-v4", "198.18.9.9", 80)]);
        c.claim(&"x", &mut other);

        assert!(c.release(&"x", &other.elements).is_empty(), "x freed nothing b waits for");
        let woken = c.release(&"a", &a.elements);
        assert_eq!(woken.into_iter().collect::<Vec<_>>(), vec!["b"]);
        let mut b = pieces(&[("service-ips-v4", "198.18.5.5", 80)]);
        assert!(c.claim(&"b", &mut b).is_empty());
        assert_eq!(b.elements.len(), 1);
        assert_eq!(c.conflicts().count(), 0);
    }

    #[test]
    fn one_service_may_use_a_key_in_several_maps() {
        let mut c: Claims<&str> = Claims::default();
        let mut a = pieces(&[("service-ips-v4", "198.18.5.5", 80), ("firewall-ips-v4", "198.18.5.5", 80)]);
        assert!(c.claim(&"a", &mut a).is_empty());
        assert_eq!(a.elements.len(), 2);
        // The second claimant loses it in every set, reported once, and its backends with it.
        let mut b = pieces(&[
            ("service-ips-v4-k2", "198.18.5.5", 80),
            ("reject-ips-v4", "198.18.5.5", 80),
            ("service-backends-v4", "198.18.5.5", 80),
        ]);
        let conflicts = c.claim(&"b", &mut b);
        assert_eq!(conflicts.len(), 1);
        assert_eq!(conflicts[0].describe("a"), "198.18.5.5 . tcp . 80 in service-ips-v4 is held by a");
        assert!(b.elements.is_empty());
    }

    #[test]
    fn a_waiter_that_goes_away_is_forgotten() {
        let mut c: Claims<&str> = Claims::default();
        let mut a = pieces(&[("service-ips-v4", "198.18.5.5", 80)]);
        c.claim(&"a", &mut a);
        let mut b = pieces(&[("service-ips-v4", "198.18.5.5", 80)]);
        c.claim(&"b", &mut b);
        assert!(c.release(&"b", &b.elements).is_empty());
        assert_eq!(c.conflicts().count(), 0);
        assert!(c.release(&"a", &a.elements).is_empty(), "nobody waits any more");
    }
}
