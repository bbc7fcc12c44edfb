//! The command lines of nodeportctl and nodeportd: arbitrary bytes split into arguments
//! at NUL bytes, as raw OS strings (maybe not UTF-8) and as UTF-8 text. Nothing may
//! panic; every refusal has a message.
#![no_main]

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let raw: Vec<OsString> = data.split(|&b| b == 0).map(|a| OsString::from_vec(a.to_vec())).collect();
    let mut with_argv0 = vec![OsString::from("nodeportctl")];
    with_argv0.extend(raw.iter().cloned());
    let args = match nodeportd::utf8_args(with_argv0) {
        Ok(mut a) => a.split_off(1),
        Err(e) => {
            assert!(!e.is_empty());
            // What the programs would see had the bytes been text.
            raw.iter().map(|a| a.to_string_lossy().into_owned()).collect()
        }
    };
    if let Err(e) = nodeportd::ctl::args::parse(&args) {
        assert!(!e.is_empty());
    }
    if let Err(e) = nodeportd::daemon::Args::parse(&args) {
        assert!(!e.is_empty());
    }
});
