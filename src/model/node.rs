//! core/v1 Node, as far as a router needs it: its pod CIDRs and its addresses, to route
//! the pod networks to it (`pod_routes`). Other fields are dropped on input.
//!
//! Nodes are cluster-scoped: they have no namespace.

use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::names;
use super::validate::{q, q_list, Errs};
use super::{ApiError, ObjectMeta};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: NodeSpec,
    #[serde(default)]
    pub status: NodeStatus,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSpec {
    #[serde(default, rename = "podCIDR", skip_serializing_if = "Option::is_none")]
    pub pod_cidr: Option<String>,
    #[serde(default, rename = "podCIDRs", skip_serializing_if = "Vec::is_empty")]
    pub pod_cidrs: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<NodeAddress>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAddress {
    #[serde(default)]
    pub address: String,
    /// `InternalIP`, `ExternalIP`, `Hostname`, `InternalDNS`, `ExternalDNS`.
    #[serde(default, rename = "type")]
    pub type_: String,
}

impl Node {
    pub fn name(&self) -> &str {
        &self.metadata.name
    }

    /// The pod CIDRs as the API server serves them: `podCIDRs`, or the one legacy
    /// `podCIDR` when only that is set.
    pub fn cidrs(&self) -> Vec<&str> {
        if self.spec.pod_cidrs.is_empty() {
            self.spec.pod_cidr.iter().map(String::as_str).filter(|s| !s.is_empty()).collect()
        } else {
            self.spec.pod_cidrs.iter().map(String::as_str).collect()
        }
    }

    /// The parsed pod CIDRs (validation refused the others).
    pub fn pod_nets(&self) -> Vec<IpNet> {
        self.cidrs().iter().filter_map(|c| c.trim().parse::<IpNet>().ok()).map(|n| n.trunc()).collect()
    }

    /// The `InternalIP` addresses that parse, in their order.
    pub fn internal_ips(&self) -> Vec<IpAddr> {
        self.status
            .addresses
            .iter()
            .filter(|a| a.type_ == "InternalIP")
            .filter_map(|a| a.address.parse().ok())
            .collect()
    }

    /// What the API server's conversion from v1 does: `podCIDRs` wins, and `podCIDR`
    /// is its first element.
    pub fn normalize(&mut self) {
        if self.spec.pod_cidrs.is_empty() {
            if let Some(c) = self.spec.pod_cidr.clone().filter(|c| !c.is_empty()) {
                self.spec.pod_cidrs = vec![c];
            }
        }
        self.spec.pod_cidr = self.spec.pod_cidrs.first().cloned();
        self.metadata.namespace = None;
    }
}

const CIDR_ERR: &str = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)";

/// Validates a Node as the API server does for the fields nodeportd keeps
/// (`ValidateNode`): the name is a DNS subdomain, no namespace (cluster-scoped), each
/// pod CIDR is a CIDR, at most one per IP family. Addresses are not validated (the API
/// server does not either); one that does not parse is reported by `pod_routes`.
pub fn validate_node(node: &Node) -> Result<(), ApiError> {
    let mut e = Errs::new("Node", &node.metadata.name);
    let m = &node.metadata;
    if m.name.is_empty() {
        e.push("metadata.name: Required value: name or generateName is required".into());
    } else if let Err(msg) = names::dns1123_subdomain(&m.name) {
        e.invalid("metadata.name", q(&m.name), &msg);
    }
    if m.namespace.as_deref().is_some_and(|ns| !ns.is_empty()) {
        e.push("metadata.namespace: Forbidden: not allowed on this type".into());
    }
    let (field, list): (&str, Vec<&str>) = if node.spec.pod_cidrs.is_empty() {
        ("spec.podCIDR", node.spec.pod_cidr.iter().map(String::as_str).filter(|s| !s.is_empty()).collect())
    } else {
        ("spec.podCIDRs", node.spec.pod_cidrs.iter().map(String::as_str).collect())
    };
    let mut nets = Vec::new();
    for (i, c) in list.iter().enumerate() {
        let f = if field == "spec.podCIDR" { field.to_string() } else { format!("{field}[{i}]") };
        match c.parse::<IpNet>() {
            Ok(n) => nets.push(n),
            Err(_) => e.invalid(&f, q(c), CIDR_ERR),
        }
    }
    if list.len() > 1 && nets.len() == list.len() {
        let v4 = nets.iter().filter(|n| matches!(n, IpNet::V4(_))).count();
        if list.len() > 2 || v4 != 1 {
            let owned: Vec<String> = list.iter().map(|s| s.to_string()).collect();
            e.invalid("spec.podCIDRs", q_list(&owned), "may specify no more than one CIDR for each IP family");
        }
    }
    e.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(v: serde_json::Value) -> Node {
        let mut base = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}});
        if let (Some(b), Some(extra)) = (base.as_object_mut(), v.as_object()) {
            for (k, val) in extra {
                b.insert(k.clone(), val.clone());
            }
        }
        serde_json::from_value(base).unwrap()
    }

    fn err(n: &Node) -> String {
        validate_node(n).unwrap_err().message
    }

    #[test]
    fn a_dual_stack_node_is_valid() {
        let n = node(json!({"spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24", "fd00:10:244:1::/64"]},
            "status": {"addresses": [{"type": "InternalIP", "address": "198.18.0.2"},
                                     {"type": "InternalIP", "address": "2001:db8::2"},
                                     {"type": "Hostname", "address": "n1"}]}}));
        validate_node(&n).unwrap();
        assert_eq!(n.pod_nets().len(), 2);
        assert_eq!(n.internal_ips().len(), 2);
        validate_node(&node(json!({}))).unwrap();
    }

    #[test]
    fn bad_cidrs_are_refused_naming_field_and_value() {
        let n = node(json!({"spec": {"podCIDRs": ["10.244.1.0/24", "10.244.300.0/24"]}}));
        assert_eq!(
            err(&n),
            "Node \"n1\" is invalid: spec.podCIDRs[1]: Invalid value: \"10.244.300.0/24\": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"
        );
        let n = node(json!({"spec": {"podCIDR": "10.244.1.0"}}));
        assert!(err(&n).contains("spec.podCIDR: Invalid value: \"10.244.1.0\""), "{}", err(&n));
    }

    #[test]
    fn at_most_one_cidr_per_family() {
        let n = node(json!({"spec": {"podCIDRs": ["10.244.1.0/24", "10.244.2.0/24"]}}));
        assert_eq!(
            err(&n),
            "Node \"n1\" is invalid: spec.podCIDRs: Invalid value: [\"10.244.1.0/24\",\"10.244.2.0/24\"]: may specify no more than one CIDR for each IP family"
        );
        let n = node(json!({"spec": {"podCIDRs": ["fd00:1::/64", "fd00:2::/64"]}}));
        assert!(err(&n).contains("no more than one CIDR for each IP family"));
        let n = node(json!({"spec": {"podCIDRs": ["10.244.1.0/24", "fd00:1::/64", "10.244.2.0/24"]}}));
        assert!(err(&n).contains("no more than one CIDR for each IP family"));
    }

    #[test]
    fn names_and_namespaces() {
        let n = node(json!({"metadata": {"name": "Bad_Name"}}));
        assert!(err(&n).starts_with("Node \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\""));
        let n = node(json!({"metadata": {"name": ""}}));
        assert!(err(&n).contains("metadata.name: Required value"));
        let n = node(json!({"metadata": {"name": "n1", "namespace": "default"}}));
        assert!(err(&n).contains("metadata.namespace: Forbidden: not allowed on this type"));
    }

    #[test]
    fn normalize_takes_pod_cidrs_over_the_legacy_field() {
        let mut n = node(json!({"spec": {"podCIDR": "10.244.1.0/24"}}));
        n.normalize();
        assert_eq!(n.spec.pod_cidrs, ["10.244.1.0/24"]);
        let mut n = node(json!({"spec": {"podCIDR": "10.9.9.0/24", "podCIDRs": ["10.244.1.0/24"]}}));
        n.normalize();
        assert_eq!(n.spec.pod_cidr.as_deref(), Some("10.244.1.0/24"));
    }
}
