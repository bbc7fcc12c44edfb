//! The test objects (`objects.json`, a `List` as `kubectl get -o json` prints) and the
//! backends each service port gets from its EndpointSlices, reduced the way the API
//! documents it (absent `ready` means ready, absent `serving` means `ready`).

use std::collections::BTreeMap;

use nodeportd::model::{Backend, EndpointSlice, Service, SERVICE_NAME_LABEL};

pub struct Objects {
    pub services: Vec<Service>,
    pub slices: Vec<EndpointSlice>,
}

pub fn load(text: &str) -> Objects {
    let list: serde_json::Value = serde_json::from_str(text).expect("objects.json is JSON");
    let mut services = Vec::new();
    let mut slices = Vec::new();
    for item in list["items"].as_array().expect("a List") {
        match item["kind"].as_str() {
            Some("Service") => services.push(serde_json::from_value(item.clone()).expect("a Service")),
            Some("EndpointSlice") => slices.push(serde_json::from_value(item.clone()).expect("an EndpointSlice")),
            other => panic!("unexpected kind {other:?}"),
        }
    }
    Objects { services, slices }
}

impl Objects {
    pub fn backends(&self, svc: &Service) -> BTreeMap<String, Vec<Backend>> {
        let mut out: BTreeMap<String, Vec<Backend>> = BTreeMap::new();
        let mine = self.slices.iter().filter(|s| {
            s.metadata.ns() == svc.namespace() && s.metadata.labels.get(SERVICE_NAME_LABEL) == Some(svc.name())
        });
        for slice in mine {
            for sp in &svc.spec.ports {
                let name = sp.name.clone().unwrap_or_default();
                let Some(port) = slice
                    .ports
                    .iter()
                    .find(|p| p.name.clone().unwrap_or_default() == name)
                    .and_then(|p| p.port)
                    .and_then(|p| u16::try_from(p).ok())
                else {
                    continue;
                };
                for ep in &slice.endpoints {
                    let Some(ip) = ep.addresses.first().and_then(|a| a.parse().ok()) else {
                        continue;
                    };
                    let ready = ep.conditions.ready.unwrap_or(true);
                    out.entry(name.clone()).or_default().push(Backend {
                        ip,
                        port,
                        ready,
                        serving: ep.conditions.serving.unwrap_or(ready),
                        terminating: ep.conditions.terminating.unwrap_or(false),
                        node_name: ep.node_name.clone(),
                    });
                }
            }
        }
        out
    }
}
