//! `nodeportctl`: the client.

use std::process::ExitCode;

pub fn main(_args: Vec<String>) -> ExitCode {
    eprintln!("nodeportctl: not built yet");
    ExitCode::FAILURE
}
