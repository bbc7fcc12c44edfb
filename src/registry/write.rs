//! The write path: prepare → persist → commit.
//!
//! A `prepare_*` call computes the object as it will be served (resourceVersion,
//! generation, allocations) and reserves the values it needs in the allocators, so no
//! other request can take them; nothing else in the registry changes. The caller makes
//! the change durable, then [`Registry::commit`]s it. A [`Prepared`] dropped without a
//! commit (the disk write failed) gives its reservations back: the registry is then
//! exactly as before the request, so a failed request changes nothing and needs no undo.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use super::{Action, EndpointsKind, Held, Key, Registry, Squeezed, Taken};
use crate::model::{ApiError, EndpointsObject, Node, Service};

/// Reservations of dropped prepared changes, waiting to be released.
pub(super) type Returns = Rc<RefCell<Vec<Taken>>>;

/// An object as a prepared change will serve it (or, for a delete, as it was).
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // one per request, moved a few times: not worth a box
pub enum Object {
    Service(Service),
    Endpoints(EndpointsObject),
    Node(Node),
}

impl Object {
    /// (namespace, name); a Node's namespace is "" (cluster-scoped).
    pub fn key(&self) -> (&str, &str) {
        match self {
            Object::Node(n) => ("", n.name()),
            Object::Service(s) => (s.namespace(), s.name()),
            Object::Endpoints(EndpointsObject::Endpoints(e)) => (e.metadata.ns(), &e.metadata.name),
            Object::Endpoints(EndpointsObject::Slice(e)) => (e.metadata.ns(), &e.metadata.name),
        }
    }
}

/// What a commit does.
#[derive(Debug)]
pub(super) enum Change {
    PutService { key: Key, held: Held },
    DeleteService { key: Key },
    PutEndpoints,
    DeleteEndpoints { kind: EndpointsKind, key: Key },
    PutNode,
    DeleteNode { name: String },
}

/// A change computed and reserved, not yet applied. Commit it with
/// [`Registry::commit`] once it is durable; drop it to abandon it.
#[derive(Debug)]
#[must_use = "a prepared change does nothing until committed; dropping it releases its reservations"]
pub struct Prepared {
    action: Action,
    change: Option<Change>,
    object: Object,
    taken: Taken,
    returns: Returns,
    /// The object's text as persisted ([`Prepared::set_text`]): the registry keeps it
    /// once the object is packed, with nothing to print.
    text: Option<Squeezed>,
}

impl Prepared {
    /// The object's compact JSON text, as written to the store; it must read back as
    /// [`Prepared::object`].
    pub fn set_text(&mut self, text: &str) {
        self.text = Some(Squeezed::new(text));
    }

    /// `Created`, `Configured` or `Unchanged` (a delete reports `Configured`).
    pub fn action(&self) -> Action {
        self.action
    }

    /// Whether there is anything to persist and commit.
    pub fn changes_anything(&self) -> bool {
        self.change.is_some()
    }

    pub fn is_delete(&self) -> bool {
        matches!(
            self.change,
            Some(Change::DeleteService { .. } | Change::DeleteEndpoints { .. } | Change::DeleteNode { .. })
        )
    }

    /// The object to persist (or, for a delete, the one removed).
    pub fn object(&self) -> &Object {
        &self.object
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        let taken = std::mem::take(&mut self.taken);
        if taken != Taken::default() {
            self.returns.borrow_mut().push(taken);
        }
    }
}

impl Registry {
    pub(super) fn prepared(&self, action: Action, change: Option<Change>, object: Object, taken: Taken) -> Prepared {
        Prepared { action, change, object, taken, returns: self.returns.clone(), text: None }
    }

    /// Releases the reservations of prepared changes that were dropped. Every prepare
    /// and commit does this first; call it before reading allocator usage.
    pub fn settle(&mut self) {
        let dropped = std::mem::take(&mut *self.returns.borrow_mut());
        for t in dropped {
            self.rollback(t);
        }
    }

    /// Applies a prepared change (made durable by the caller) and returns the object
    /// as served (for a delete: the object removed).
    pub fn commit(&mut self, mut p: Prepared) -> Object {
        self.settle();
        debug_assert!(Rc::ptr_eq(&p.returns, &self.returns), "a change committed to another registry");
        // The reservations become the object's holdings: nothing to give back.
        p.taken = Taken::default();
        // The object is returned, not copied: the registry keeps the one copy it stores.
        let object = std::mem::replace(&mut p.object, Object::Node(Node::default()));
        match p.change.take() {
            None => {}
            Some(Change::PutService { key, held }) => {
                if let Object::Service(svc) = &object {
                    // Release by what the stored object holds now, which the prepare saw.
                    let prev = self.services.get(&key).map(|s| s.held.clone()).unwrap_or_default();
                    self.release(&prev, &held);
                    self.problems.retain(|(k, _)| *k != key);
                    self.put_service(key, svc.clone(), p.text.take(), held);
                }
            }
            Some(Change::DeleteService { key }) => {
                if let Some(s) = self.services.remove(&key) {
                    self.release(&s.held, &Held::default());
                }
                self.problems.retain(|(k, _)| *k != key);
            }
            Some(Change::PutEndpoints) => match &object {
                Object::Endpoints(EndpointsObject::Endpoints(e)) => {
                    self.endpoints.insert(Key(e.metadata.ns().to_string(), e.metadata.name.clone()), e.clone());
                }
                Object::Endpoints(EndpointsObject::Slice(e)) => self.put_slice(e.clone(), p.text.take()),
                Object::Service(_) | Object::Node(_) => {}
            },
            Some(Change::PutNode) => {
                if let Object::Node(n) = &object {
                    self.nodes.insert(n.name().to_string(), n.clone());
                }
            }
            Some(Change::DeleteNode { name }) => {
                self.nodes.remove(&name);
            }
            Some(Change::DeleteEndpoints { kind, key }) => match kind {
                EndpointsKind::Endpoints => {
                    self.endpoints.remove(&key);
                }
                EndpointsKind::EndpointSlice => {
                    self.take_slice(&key);
                }
            },
        }
        object
    }

    /// Prepares the deletion of a Service; its values are freed at the commit.
    pub fn prepare_delete_service(&mut self, ns: &str, name: &str) -> Result<Prepared, ApiError> {
        self.settle();
        let key = Key::new(ns, name);
        let svc = self
            .services
            .get(&key)
            .map(|s| Arc::unwrap_or_clone(s.slot.get()))
            .ok_or_else(|| ApiError::not_found("services", name))?;
        Ok(self.prepared(
            Action::Configured,
            Some(Change::DeleteService { key }),
            Object::Service(svc),
            Taken::default(),
        ))
    }

    /// Prepares the deletion of a Node.
    pub fn prepare_delete_node(&mut self, name: &str) -> Result<Prepared, ApiError> {
        self.settle();
        let node = self.get_node(name)?;
        let change = Change::DeleteNode { name: name.to_string() };
        Ok(self.prepared(Action::Configured, Some(change), Object::Node(node), Taken::default()))
    }

    /// Prepares the deletion of an Endpoints or EndpointSlice.
    pub fn prepare_delete_endpoints(
        &mut self,
        kind: EndpointsKind,
        ns: &str,
        name: &str,
    ) -> Result<Prepared, ApiError> {
        self.settle();
        let obj = self.get_endpoints(kind, ns, name)?;
        let key = Key::new(ns, name);
        Ok(self.prepared(
            Action::Configured,
            Some(Change::DeleteEndpoints { kind, key }),
            Object::Endpoints(obj),
            Taken::default(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PortRange;
    use crate::registry::Stamp;

    fn reg() -> Registry {
        let cidrs: Vec<ipnet::IpNet> = vec!["10.96.0.0/28".parse().unwrap()];
        Registry::with_seed(PortRange { first: 30000, last: 30009 }, &cidrs, 1)
    }

    fn stamp() -> Stamp {
        Stamp { now: "2026-01-01T00:00:00Z".into(), uid: "00000000-0000-4000-8000-000000000001".into() }
    }

    fn svc(name: &str, node_port: Option<i64>) -> Service {
        let mut v = serde_json::json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"type": "NodePort", "ports": [{"port": 80}]}});
        if let Some(p) = node_port {
            v["spec"]["ports"][0]["nodePort"] = p.into();
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_prepared_change_reserves_and_dropping_it_releases() {
        let mut r = reg();
        let before = r.usage();
        let p = r.prepare_service(svc("a", Some(30005)), &stamp()).unwrap();
        // Reserved: nobody else can take 30005 meanwhile.
        let e = r.prepare_service(svc("b", Some(30005)), &stamp()).unwrap_err();
        assert!(e.message.contains("30005"), "{e:?}");
        // Not served yet.
        assert!(r.get_service("default", "a").is_err());
        drop(p);
        r.settle();
        assert_eq!(r.usage(), before);
        assert!(r.get_service("default", "a").is_err());
        // The port is free again.
        let p = r.prepare_service(svc("b", Some(30005)), &stamp()).unwrap();
        let Object::Service(s) = r.commit(p) else { panic!() };
        assert_eq!(s.spec.ports[0].node_port, Some(30005));
        assert_eq!(r.get_service("default", "b").unwrap(), s);
    }

    #[test]
    fn an_abandoned_update_leaves_the_served_object_identical() {
        let mut r = reg();
        let (_, v1) = r.apply_service(svc("a", Some(30001)), &stamp()).unwrap();
        let usage = r.usage();
        // Move the nodePort: the new one is reserved, the old one still held.
        let p = r.prepare_service(svc("a", Some(30002)), &stamp()).unwrap();
        assert_eq!(p.action(), Action::Configured);
        assert_eq!(r.get_service("default", "a").unwrap(), v1);
        drop(p);
        r.settle();
        assert_eq!(r.get_service("default", "a").unwrap(), v1);
        assert_eq!(r.usage(), usage);
        // An abandoned delete too.
        let p = r.prepare_delete_service("default", "a").unwrap();
        assert!(p.is_delete());
        drop(p);
        assert_eq!(r.get_service("default", "a").unwrap(), v1);
        assert_eq!(r.usage(), usage);
        // Committed, the move releases the old port.
        let p = r.prepare_service(svc("a", Some(30002)), &stamp()).unwrap();
        r.commit(p);
        r.apply_service(svc("c", Some(30001)), &stamp()).unwrap();
    }
}
