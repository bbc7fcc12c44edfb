//! One binary, two names (busybox style): `nodeportd` is the daemon, `nodeportctl`
//! (a symlink, or `nodeportd ctl ...`) the client.

use std::process::ExitCode;

fn main() -> ExitCode {
    // `args_os`: an argument that is not UTF-8 is an error message, not a panic.
    let mut args = match nodeportd::utf8_args(std::env::args_os()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let argv0 = args.first().cloned().unwrap_or_default();
    let name = std::path::Path::new(&argv0).file_name().and_then(|n| n.to_str()).unwrap_or("nodeportd").to_string();
    if name.starts_with("nodeportctl") {
        return nodeportd::ctl::main(args.split_off(1));
    }
    if args.get(1).map(String::as_str) == Some("ctl") {
        return nodeportd::ctl::main(args.split_off(2));
    }
    nodeportd::daemon::main(args.split_off(1))
}
