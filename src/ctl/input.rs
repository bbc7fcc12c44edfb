//! What `nodeportctl apply -f` reads: JSON always, YAML with the `yaml` feature.
//!
//! YAML costs flash on a 16 MB router, so it is a cargo feature (docs/benchmarks.md,
//! "YAML support"); without it YAML input gets an error that says how to get JSON.

use serde_json::Value;

/// Parses a file's text into one JSON value. Several YAML documents (`---`) become a
/// `List`, as kubectl treats them.
pub fn parse_document(text: &str) -> Result<Value, String> {
    let first = text.trim_start().chars().next();
    match first {
        None => Err("no objects passed to apply".to_string()),
        Some('{') | Some('[') => serde_json::from_str(text).map_err(|e| format!("error parsing JSON: {e}")),
        Some(_) => parse_yaml(text),
    }
}

#[cfg(feature = "yaml")]
fn parse_yaml(text: &str) -> Result<Value, String> {
    use serde::Deserialize;
    let mut docs = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let v = Value::deserialize(doc).map_err(|e| format!("error parsing YAML: {e}"))?;
        if !v.is_null() {
            docs.push(v);
        }
    }
    match docs.len() {
        0 => Err("no objects passed to apply".to_string()),
        1 => Ok(docs.remove(0)),
        _ => Ok(serde_json::json!({"apiVersion": "v1", "kind": "List", "items": docs})),
    }
}

#[cfg(not(feature = "yaml"))]
fn parse_yaml(_text: &str) -> Result<Value, String> {
    Err("this nodeportctl is built without YAML support: pass JSON (for example `kubectl ... -o json`)".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_object_is_parsed() {
        let v = parse_document("  {\"kind\":\"Service\"}").unwrap();
        assert_eq!(v["kind"], "Service");
    }

    #[test]
    fn empty_input_is_refused() {
        assert!(parse_document(" \n").unwrap_err().contains("no objects"));
    }

    #[test]
    fn broken_json_names_json() {
        assert!(parse_document("{\"kind\":").unwrap_err().contains("JSON"));
    }

    #[cfg(not(feature = "yaml"))]
    #[test]
    fn yaml_without_feature_says_use_json() {
        let e = parse_document("kind: Service\n").unwrap_err();
        assert!(e.contains("-o json"), "{e}");
    }

    #[cfg(feature = "yaml")]
    #[test]
    fn kubectl_yaml_fixture_parses_like_its_json() {
        let y = include_str!("../../tests/fixtures/svc-nodeport-web.yaml");
        let j = include_str!("../../tests/fixtures/svc-nodeport-web.json");
        assert_eq!(parse_document(y).unwrap(), parse_document(j).unwrap());
    }

    #[cfg(feature = "yaml")]
    #[test]
    fn several_yaml_documents_become_a_list() {
        let v = parse_document("kind: Service\n---\nkind: Endpoints\n---\n").unwrap();
        assert_eq!(v["kind"], "List");
        assert_eq!(v["items"][1]["kind"], "Endpoints");
    }
}
