//! Arbitrary bytes through what a request body goes through before any state changes:
//! JSON parse, object parsing (kind, apiVersion, List unwrapping, typed fields) and
//! validation. Nothing here may panic; every refusal must name a field or the input; an
//! object decoded from its text is the one decoded from its tree.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nodeportd::model::{parse_object, parse_object_text, ApiError};

fuzz_target!(|data: &[u8]| {
    // A request line: read its objects as text where it can, else as a tree; never a panic.
    let _ = nodeportd::api::rpc::parse_request(data);
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    // The objects' text decodes as their tree does, to the same objects or the same error.
    if let Ok(text) = std::str::from_utf8(data) {
        assert_eq!(parse_object_text(text), parse_object(value.clone()));
    }
    match parse_object(value) {
        Ok(objects) => {
            for obj in objects {
                if let Err(ApiError { message, .. }) = obj.validate() {
                    assert!(!message.is_empty());
                } else {
                    // What validation accepts must survive the round trip a stored object makes.
                    let again = parse_object(obj.to_json()).expect("a valid object re-parses");
                    assert_eq!(again.len(), 1);
                    again[0].validate().expect("a valid object stays valid");
                }
            }
        }
        Err(e) => assert!(!e.message.is_empty()),
    }
});
