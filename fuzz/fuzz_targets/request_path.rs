//! Arbitrary bytes through what a request body goes through before any state changes:
//! JSON parse, object parsing (kind, apiVersion, List unwrapping, typed fields) and
//! validation. Nothing here may panic; every refusal must name a field or the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nodeportd::model::{parse_object, ApiError};

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
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
