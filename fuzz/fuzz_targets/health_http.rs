//! The healthCheckNodePort HTTP parser (src/healthcheck): arbitrary bytes as a request
//! head arriving in pieces. Nothing may panic; once a prefix of the input gives an
//! answer (a request or an error), every longer prefix gives the same answer (the
//! daemon answers as soon as it can and reads no further); the responses build.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nodeportd::healthcheck::{error_response, parse_request, response, HealthCheck, Parsed, MAX_REQUEST_BYTES};

fuzz_target!(|data: &[u8]| {
    let data = &data[..data.len().min(2 * MAX_REQUEST_BYTES)];
    let full = parse_request(data);
    // Split points: every byte for short inputs, 64 evenly spaced ones otherwise.
    let step = (data.len() / 64).max(1);
    let mut decided: Option<Parsed> = None;
    for cut in (0..=data.len()).step_by(step).chain([data.len()]) {
        let p = parse_request(&data[..cut]);
        if let Some(d) = decided {
            assert_eq!(p, d, "a longer prefix changed the answer at {cut}");
        } else if p != Parsed::Incomplete {
            decided = Some(p);
        }
    }
    if let Some(d) = decided {
        assert_eq!(full, d);
    }
    if data.len() >= MAX_REQUEST_BYTES {
        assert_ne!(full, Parsed::Incomplete, "a full buffer must be answered");
    }
    let hc = HealthCheck { namespace: "default".into(), name: "web".into(), local_endpoints: data.len() % 3 };
    match full {
        Parsed::Request(m) => {
            let r = response(m, &hc, data.first().is_some_and(|b| b % 2 == 0));
            assert!(r.starts_with(b"HTTP/1.1 "));
        }
        Parsed::Error(s) => assert!(error_response(s).starts_with(b"HTTP/1.1 ")),
        Parsed::Incomplete => {}
    }
});
