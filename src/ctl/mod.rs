//! `nodeportctl`: the client (CONTRACT.md, Programs). Talks JSON-RPC to the daemon's
//! socket, prints kubectl-like tables. Blocking std I/O: one short-lived process needs
//! no runtime.

pub mod args;
pub mod input;
pub mod rpc;
pub mod status;
pub mod table;

use std::io::Read;
use std::process::ExitCode;

use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::model::{parse_object, EndpointSlice, Endpoints, Node, Service, APPLIED_BY, APPLIER_NODEPORTCTL};
use args::{Command, Output, Resource};
use rpc::{CallError, Client};

pub fn main(argv: Vec<String>) -> ExitCode {
    let (socket, cmd) = match args::parse(&argv) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("error: {e}\n\n{}", args::USAGE);
            return ExitCode::from(2);
        }
    };
    let socket = socket
        .or_else(|| std::env::var("NODEPORTD_SOCKET").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| rpc::DEFAULT_SOCKET.to_string());
    match run(&socket, cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// kubectl prints JSON with four-space indentation; so do we.
pub fn pretty(v: &Value) -> String {
    use serde::Serialize;
    let mut buf = Vec::new();
    let mut ser =
        serde_json::Serializer::with_formatter(&mut buf, serde_json::ser::PrettyFormatter::with_indent(b"    "));
    match v.serialize(&mut ser) {
        Ok(()) => String::from_utf8(buf).unwrap_or_default(),
        Err(_) => v.to_string(),
    }
}

fn list(items: Vec<Value>) -> Value {
    crate::api::rpc::object(vec![
        ("apiVersion", "v1".into()),
        ("kind", "List".into()),
        ("items", Value::Array(items)),
        ("metadata", json!({"resourceVersion": ""})),
    ])
}

fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

fn read_source(file: &str) -> Result<String, String> {
    if file == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).map_err(|e| format!("error: reading standard input: {e}"))?;
        return Ok(s);
    }
    std::fs::read_to_string(file).map_err(|e| format!("error: the path \"{file}\" cannot be read: {e}"))
}

fn typed<T: DeserializeOwned>(v: Value) -> Result<T, String> {
    crate::model::parse::decode(v).map_err(|e| format!("bad object from nodeportd: {e}"))
}

fn method_prefix(res: Resource) -> &'static str {
    match res {
        Resource::Service => "service",
        Resource::Endpoints | Resource::EndpointSlice => "endpoints",
        Resource::Node => "node",
    }
}

/// Request params naming one object or a namespace; `kind` tells Endpoints from
/// EndpointSlices (CONTRACT.md).
fn params(res: Resource, namespace: Option<&str>, name: Option<&str>) -> Value {
    let mut p = serde_json::Map::new();
    if let Some(ns) = namespace.filter(|_| res != Resource::Node) {
        p.insert("namespace".into(), ns.into());
    }
    if let Some(n) = name {
        p.insert("name".into(), n.into());
    }
    match res {
        Resource::Service | Resource::Node => {}
        Resource::Endpoints => {
            p.insert("kind".into(), "Endpoints".into());
        }
        Resource::EndpointSlice => {
            p.insert("kind".into(), "EndpointSlice".into());
        }
    }
    Value::Object(p)
}

fn run(socket: &str, cmd: Command) -> Result<(), String> {
    let connect = || Client::connect(socket).map_err(|e| e.to_string());
    match cmd {
        Command::Help => {
            print!("{}", args::USAGE);
            Ok(())
        }
        Command::Apply { file, json_out, prune } => apply(socket, &file, json_out, prune),
        Command::Get { res, name, namespace, all_namespaces, output } => {
            let mut c = connect()?;
            let ns = if all_namespaces { None } else { Some(namespace.as_str()) };
            let prefix = method_prefix(res);
            let items: Vec<Value> = match &name {
                Some(n) => {
                    let r = c.call(&format!("{prefix}.get"), params(res, ns, Some(n))).map_err(|e| e.to_string())?;
                    vec![r.get("object").cloned().unwrap_or(Value::Null)]
                }
                None => {
                    let r = c.call(&format!("{prefix}.list"), params(res, ns, None)).map_err(|e| e.to_string())?;
                    r.get("items").and_then(Value::as_array).cloned().unwrap_or_default()
                }
            };
            print_items(res, name.is_some(), items, all_namespaces, output, &namespace)
        }
        Command::Delete { res, name, namespace } => {
            let mut c = connect()?;
            let method = format!("{}.delete", method_prefix(res));
            c.call(&method, params(res, Some(&namespace), Some(&name))).map_err(|e| e.to_string())?;
            if res == Resource::Node {
                println!("node/{name} deleted");
            } else {
                println!("{}/{namespace}/{name} deleted", res.singular());
            }
            Ok(())
        }
        Command::Status { json_out } => {
            let r = connect()?.call("status", json!({})).map_err(|e| e.to_string())?;
            if json_out {
                println!("{}", pretty(&r));
            } else {
                print!("{}", status::status_text(&r));
            }
            Ok(())
        }
        Command::Rpc { method, params } => {
            let p = match params.as_deref() {
                None => json!({}),
                Some(src) => {
                    let text = if src == "-" { read_source("-")? } else { src.to_string() };
                    if text.trim().is_empty() {
                        json!({})
                    } else {
                        serde_json::from_str(&text).map_err(|e| format!("error: PARAMS_JSON is not JSON: {e}"))?
                    }
                }
            };
            let r = connect()?.call(&method, p).map_err(|e| e.to_string())?;
            println!("{r}");
            Ok(())
        }
    }
}

fn print_items(
    res: Resource,
    single: bool,
    items: Vec<Value>,
    all_namespaces: bool,
    output: Output,
    namespace: &str,
) -> Result<(), String> {
    if output == Output::Json {
        let v = if single { items.into_iter().next().unwrap_or(Value::Null) } else { list(items) };
        println!("{}", pretty(&v));
        return Ok(());
    }
    if items.is_empty() {
        // kubectl's words, on stderr so scripts parsing the table see nothing.
        if all_namespaces || res == Resource::Node {
            eprintln!("No resources found");
        } else {
            eprintln!("No resources found in {namespace} namespace.");
        }
        return Ok(());
    }
    let wide = output == Output::Wide;
    let text = match res {
        Resource::Service => {
            let svcs: Vec<Service> = items.into_iter().map(typed).collect::<Result<_, _>>()?;
            table::services_table(&svcs, all_namespaces, wide, now())
        }
        Resource::Endpoints => {
            let eps: Vec<Endpoints> = items.into_iter().map(typed).collect::<Result<_, _>>()?;
            table::endpoints_table(&eps, all_namespaces, now())
        }
        Resource::EndpointSlice => {
            let s: Vec<EndpointSlice> = items.into_iter().map(typed).collect::<Result<_, _>>()?;
            table::endpoint_slices_table(&s, all_namespaces, now())
        }
        Resource::Node => {
            let n: Vec<Node> = items.into_iter().map(typed).collect::<Result<_, _>>()?;
            table::nodes_table(&n, now())
        }
    };
    print!("{text}");
    Ok(())
}

/// Applies every object of the file in order on one connection. Like kubectl, a
/// refused object does not stop the others; the exit status says something failed.
/// The file is read and parsed first, so bad input is reported without a daemon.
///
/// The objects go in `objects.apply` calls of up to [`BATCH_OBJECTS`] objects and
/// [`BATCH_BYTES`] bytes each (one call for a usual List), which the daemon persists
/// with shared fsyncs and syncs as one batch; a daemon without that method (or one
/// refusing the batch as too large) gets one `service.apply`/`endpoints.apply` per
/// object, as before. What is printed is the same either way.
///
/// Every object is marked as applied by `nodeportctl` (annotation [`APPLIED_BY`]);
/// `prune` then deletes the marked objects, of the kinds in the input, that the input
/// lacks, unless an object failed (as kubectl does not prune after an error).
fn apply(socket: &str, file: &str, json_out: bool, prune: bool) -> Result<(), String> {
    let text = read_source(file)?;
    // A JSON List of objects is decoded straight from its text; anything else (YAML,
    // other kinds, errors) through a tree, as the daemon does.
    let fast = crate::jsontext::valid(&text).then(|| crate::model::objects_of_text(&text)).flatten();
    let mut objects = match fast {
        Some(objects) => objects,
        None => {
            let doc = input::parse_document(&text).map_err(|e| format!("error: {file}: {e}"))?;
            parse_object(doc).map_err(|e| format!("error: {file}: {e}"))?
        }
    };
    if objects.is_empty() {
        return Err(format!("error: no objects passed to apply ({file})"));
    }
    for o in &mut objects {
        o.meta_mut().annotations.insert(APPLIED_BY.to_string(), APPLIER_NODEPORTCTL.to_string());
    }
    let mut client = Client::connect(socket).map_err(|e| e.to_string())?;
    let mut stored = Vec::new();
    let mut failed = 0usize;
    let mut batches = true;
    let mut report = |obj: &crate::model::AnyObject, r: Result<Value, CallError>| -> Result<(), String> {
        match r {
            Ok(mut r) => {
                if json_out {
                    stored.push(r.get_mut("object").map(Value::take).unwrap_or(Value::Null));
                } else {
                    let action = r.get("action").and_then(Value::as_str).unwrap_or("configured");
                    println!("{} {action}", obj.path());
                }
                Ok(())
            }
            Err(e @ CallError::Server { .. }) => {
                failed += 1;
                eprintln!("{e}");
                Ok(())
            }
            Err(e) => Err(e.to_string()),
        }
    };
    // Each object is encoded once, to the bytes that go on the wire: their length picks
    // the batch, and the call sends them as they are.
    let items: Vec<Vec<u8>> = objects.iter().map(|o| o.to_text().into_bytes()).collect();
    let sizes: Vec<usize> = items.iter().map(|v| v.len() + 1).collect();
    for range in batches_of(&sizes) {
        let chunk = &objects[range.clone()];
        if batches {
            match client.call_raw("objects.apply", &batch_params(&items[range], !json_out)) {
                Ok(mut r) => {
                    let results = match r.get_mut("results").map(Value::take) {
                        Some(Value::Array(a)) => a,
                        _ => Vec::new(),
                    };
                    if results.len() != chunk.len() {
                        return Err(format!(
                            "bad answer from nodeportd: {} results for {} objects",
                            results.len(),
                            chunk.len()
                        ));
                    }
                    for (obj, res) in chunk.iter().zip(results) {
                        let r = match res.get("error") {
                            Some(err) => Err(rpc::server_error(err)),
                            None => Ok(res),
                        };
                        report(obj, r)?;
                    }
                    continue;
                }
                // An older daemon: one call per object from now on.
                Err(CallError::Server { code: crate::api::rpc::METHOD_NOT_FOUND, .. }) => batches = false,
                // This batch is over the daemon's max_request_bytes: this one per object.
                Err(CallError::Server { reason: Some(r), .. }) if r == "TooLarge" => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        for obj in chunk {
            let method = match obj.kind() {
                "Service" => "service.apply",
                "Node" => "node.apply",
                _ => "endpoints.apply",
            };
            let r = client.call(method, crate::api::rpc::object(vec![("object", obj.to_json())]));
            report(obj, r)?;
        }
    }
    if failed > 0 {
        if json_out {
            println!("{}", pretty(&list(stored)));
        }
        let not = if prune { "; nothing pruned" } else { "" };
        return Err(format!("error: {failed} object(s) from {file} were not applied{not}"));
    }
    if prune {
        prune_missing(&mut client, &objects, json_out)?;
    }
    if json_out {
        println!("{}", pretty(&list(stored)));
    }
    Ok(())
}

/// `apply --prune`'s second step: the daemon deletes what `nodeportctl` applied earlier,
/// of the kinds in `objects`, that `objects` lacks; each one is printed `KIND/NS/NAME pruned`.
fn prune_missing(client: &mut Client, objects: &[crate::model::AnyObject], json_out: bool) -> Result<(), String> {
    let keep: Vec<Value> =
        objects.iter().map(|o| json!({"kind": o.kind(), "namespace": o.meta().ns(), "name": o.meta().name})).collect();
    let r = client
        .call("objects.prune", json!({"applier": APPLIER_NODEPORTCTL, "keep": keep}))
        .map_err(|e| e.to_string())?;
    let mut failed = 0usize;
    for res in r.get("results").and_then(Value::as_array).cloned().unwrap_or_default() {
        if let Some(err) = res.get("error") {
            failed += 1;
            eprintln!("{}", rpc::server_error(err));
            continue;
        }
        let obj = res.get("object").cloned().unwrap_or(Value::Null);
        match crate::model::parse_object(obj) {
            Ok(objs) if !json_out => {
                for o in objs {
                    println!("{} pruned", o.path());
                }
            }
            Ok(_) => {}
            Err(e) => return Err(format!("bad object from nodeportd: {e}")),
        }
    }
    if failed > 0 {
        return Err(format!("error: {failed} object(s) could not be pruned"));
    }
    Ok(())
}

/// Objects per `objects.apply` call, at most.
pub const BATCH_OBJECTS: usize = 500;
/// Request bytes per `objects.apply` call, at most (the default max_request_bytes is 1 MiB;
/// the daemon parses a request, and encodes its answer, in one go).
pub const BATCH_BYTES: usize = 128 * 1024;

/// Consecutive runs of objects (given their encoded sizes) within both batch limits (an
/// object larger than the byte limit goes alone).
/// `objects.apply`'s params from objects already encoded: `{"objects": [...]}`, with
/// `"brief": true` when only each result's action (or error) is wanted back.
fn batch_params(items: &[Vec<u8>], brief: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(items.iter().map(|i| i.len() + 1).sum::<usize>() + 32);
    out.extend_from_slice(if brief { br#"{"brief":true,"objects":["# } else { br#"{"objects":["# });
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(item);
    }
    out.extend_from_slice(b"]}");
    out
}

fn batches_of(sizes: &[usize]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0usize, 0usize);
    for (i, &size) in sizes.iter().enumerate() {
        if i > start && (i - start >= BATCH_OBJECTS || bytes + size > BATCH_BYTES) {
            out.push(start..i);
            start = i;
            bytes = 0;
        }
        bytes += size;
    }
    if start < sizes.len() {
        out.push(start..sizes.len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_params_are_the_encoded_objects_in_one_array() {
        let items = vec![br#"{"kind":"Service"}"#.to_vec(), br#"{"kind":"EndpointSlice"}"#.to_vec()];
        let v: Value = serde_json::from_slice(&batch_params(&items, true)).unwrap();
        assert_eq!(v, json!({"brief": true, "objects": [{"kind": "Service"}, {"kind": "EndpointSlice"}]}));
        let v: Value = serde_json::from_slice(&batch_params(&items[..1], false)).unwrap();
        assert_eq!(v, json!({"objects": [{"kind": "Service"}]}));
        let v: Value = serde_json::from_slice(&batch_params(&[], false)).unwrap();
        assert_eq!(v, json!({"objects": []}));
    }
}
