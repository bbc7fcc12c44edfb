//! How the registry keeps a stored object: typed while the data plane may still read
//! it (restored at start, or just written), then packed into its compact JSON text.
//!
//! A typed Service with its EndpointSlice is ~3 KB in ~60 heap blocks (a 696-byte
//! struct, a block per string, a list per port and endpoint). The same objects as text
//! are ~1.3 KB, and squeezed ([`Squeezed`]: the schema's usual runs as one byte each)
//! ~0.4 KB, in two blocks. Every object at rest is text; reading one decodes it,
//! which costs O(that object) where a reader needs it (a `get`, a change's sync, a
//! rebuild). The typed form stays while it is shared (`Arc`) with a sync request in
//! flight, so the data plane's batches never wait for a decode.
//!
//! An object usually comes with its text: as written to its state file (an apply) or
//! read from it (a restore), squeezed as it comes. Packing it then only drops the typed
//! form, whoever else still holds it, with nothing to print.

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::squeeze::Squeezed;
use crate::model::{ObjectMeta, SmallMap};

static NO_ANNOTATIONS: SmallMap = SmallMap::new();

#[derive(Debug, Clone)]
pub(super) enum Slot<T> {
    /// With the object's text when it is known already.
    Typed(Arc<T>, Option<Squeezed>),
    /// The text and, read out of it, the annotations (boxed: most objects have none),
    /// which selections by owner or applier (`apply --prune`, cluster mode's mirror) test
    /// on every object.
    Text(Squeezed, Option<Box<SmallMap>>),
}

/// The stored kinds that carry `metadata`.
pub(super) trait Meta {
    fn meta(&self) -> &ObjectMeta;
}

impl Meta for crate::model::Service {
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
}

impl Meta for crate::model::EndpointSlice {
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
}

impl<T: Serialize + DeserializeOwned + Default + Meta> Slot<T> {
    /// `text`: the object's text, if known; it must read back as the object.
    pub(super) fn new(value: T, text: Option<Squeezed>) -> Slot<T> {
        Slot::Typed(Arc::new(value), text)
    }

    /// The object (decoded when packed: a new copy each call).
    pub(super) fn get(&self) -> Arc<T> {
        match self {
            Slot::Typed(t, _) => t.clone(),
            Slot::Text(s, _) => Arc::new(s.decode()),
        }
    }

    /// The text, when packed.
    pub(super) fn text(&self) -> Option<&Squeezed> {
        match self {
            Slot::Typed(..) => None,
            Slot::Text(t, _) => Some(t),
        }
    }

    /// The object's annotations, without decoding it.
    pub(super) fn annotations(&self) -> &SmallMap {
        match self {
            Slot::Typed(t, _) => &t.meta().annotations,
            Slot::Text(_, Some(a)) => a,
            Slot::Text(_, None) => &NO_ANNOTATIONS,
        }
    }

    /// Packs the typed form if its text is known. `true` when the slot is text now.
    pub(super) fn pack_known(&mut self) -> bool {
        match self {
            Slot::Typed(_, None) => false,
            _ => self.pack(),
        }
    }

    /// Packs the typed form into text: with the text known, at once; else unless
    /// something else still holds the object (it is printed then). `true` when the slot
    /// is text now.
    pub(super) fn pack(&mut self) -> bool {
        let Slot::Typed(t, known) = self else { return true };
        let a = &t.meta().annotations;
        let annotations = (!a.is_empty()).then(|| Box::new(a.clone()));
        if let Some(text) = known.take() {
            *self = Slot::Text(text, annotations);
            return true;
        }
        if Arc::strong_count(t) > 1 {
            return false;
        }
        // Straight to text: the store and the API print objects that way (keys sorted, by
        // the order of the model's fields), so one copy of the model's serializers is
        // compiled in.
        match serde_json::to_string(&**t) {
            Ok(s) => {
                *self = Slot::Text(Squeezed::new(&s), annotations);
                true
            }
            // Not reachable for the model's types (strings, integers, booleans);
            // keeping the typed form is always correct.
            Err(e) => {
                log::error!("cannot pack a stored object, keeping it typed: {e}");
                true
            }
        }
    }
}

impl Slot<crate::model::Service> {
    /// Whether the Service may carry `spec.healthCheckNodePort`, without decoding it: the
    /// health-check listeners are rebuilt from these alone. A packed one is told by its
    /// text (a false positive, the name in a label, only costs a decode).
    pub(super) fn may_have_health_check_node_port(&self) -> bool {
        match self {
            Slot::Typed(t, _) => t.spec.health_check_node_port.is_some(),
            Slot::Text(s, _) => s.contains("healthCheckNodePort"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EndpointSlice, Service};

    /// A Service and an EndpointSlice with every field the model knows set.
    const SERVICE: &str = r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"web","namespace":"shop",
      "uid":"u-1","resourceVersion":"7","generation":2,"creationTimestamp":"2026-11-24T08:00:00Z",
      "labels":{"app":"web"},"annotations":{"a":"b"}},
      "spec":{"ports":[{"name":"http","protocol":"TCP","port":80,"targetPort":"http","nodePort":30080,
      "appProtocol":"http"},{"protocol":"UDP","port":53,"targetPort":5353}],"selector":{"app":"web"},
      "type":"LoadBalancer","clusterIP":"198.19.0.10","clusterIPs":["198.19.0.10","fd00::10"],
      "ipFamilies":["IPv4","IPv6"],"ipFamilyPolicy":"RequireDualStack","externalIPs":["198.18.0.9"],
      "externalName":"x.example","externalTrafficPolicy":"Local","internalTrafficPolicy":"Local",
      "healthCheckNodePort":30999,"sessionAffinity":"ClientIP",
      "sessionAffinityConfig":{"clientIP":{"timeoutSeconds":60}},"loadBalancerIP":"198.18.0.8",
      "loadBalancerSourceRanges":["198.18.0.0/24"],"loadBalancerClass":"c",
      "allocateLoadBalancerNodePorts":true,"publishNotReadyAddresses":false,"trafficDistribution":"PreferClose"},
      "status":{"loadBalancer":{"ingress":[{"ip":"198.18.0.7","hostname":"lb.example"}]}}}"#;
    const SLICE: &str = r#"{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
      "metadata":{"name":"web-1","namespace":"shop","labels":{"kubernetes.io/service-name":"web"}},
      "addressType":"IPv4","endpoints":[{"addresses":["198.18.1.1"],"conditions":{"ready":false,
      "serving":true,"terminating":true},"hostname":"h","nodeName":"n","zone":"z"},{"addresses":["198.18.1.2"]}],
      "ports":[{"name":"http","port":8080,"protocol":"TCP","appProtocol":"http"}]}"#;

    #[test]
    fn a_packed_object_reads_back_equal() {
        let svc: Service = serde_json::from_str(SERVICE).expect("the Service reads");
        assert!(svc.spec.session_affinity_config.is_some() && svc.status.is_some(), "the fixture sets the rare fields");
        let mut slot = Slot::new(svc.clone(), None);
        let held = slot.get();
        assert!(!slot.pack(), "a copy is still shared: the slot stays typed");
        assert!(matches!(slot, Slot::Typed(..)));
        drop(held);
        assert!(slot.pack());
        let Slot::Text(text, annotations) = &slot else { panic!("packed: {slot:?}") };
        assert!(text.bytes() < 1024, "{} bytes", text.bytes());
        assert_eq!(annotations.as_deref(), Some(&svc.metadata.annotations));
        assert_eq!(slot.annotations().get("a"), Some("b"));
        assert_eq!(*slot.get(), svc);
        assert!(slot.pack(), "packing text again is a no-op");

        let es: EndpointSlice = serde_json::from_str(SLICE).expect("the slice reads");
        let mut slot = Slot::new(es.clone(), None);
        assert!(slot.pack());
        assert!(matches!(slot, Slot::Text(_, None)), "no annotations, none kept");
        assert!(slot.annotations().is_empty());
        assert_eq!(*slot.get(), es);
    }

    #[test]
    fn a_known_text_is_kept_at_once_even_while_shared() {
        let svc: Service = serde_json::from_str(SERVICE).expect("the Service reads");
        let compact = serde_json::to_string(&serde_json::from_str::<serde_json::Value>(SERVICE).unwrap()).unwrap();
        let mut slot = Slot::new(svc.clone(), Some(Squeezed::new(&compact)));
        let held = slot.get();
        assert!(slot.pack(), "nothing to print: packed while shared");
        let Slot::Text(text, _) = &slot else { panic!("packed: {slot:?}") };
        assert_eq!(text.expand().as_deref(), Some(&*compact), "the known text, not a new print");
        assert_eq!(*held, svc, "the shared copy lives on");
        assert_eq!(*slot.get(), svc);
        assert_eq!(slot.annotations().get("a"), Some("b"));
    }

    #[test]
    fn text_that_does_not_read_back_gives_the_empty_object() {
        let slot: Slot<Service> = Slot::Text(Squeezed::new("{\"spec\":{\"ports\":7}}"), None);
        assert_eq!(*slot.get(), Service::default());
    }
}
