//! `nodeportctl` command line, kubectl style: flags may come before or after the
//! subcommand, `--flag value`, `--flag=value` and `-ojson` all work.

pub const USAGE: &str = "\
usage: nodeportctl [--socket PATH] COMMAND

  apply [--prune] -f FILE|- [-o json]               create or update Services, Endpoints, EndpointSlices, Nodes;
                                                    --prune deletes what an earlier apply created and FILE lacks
  get svc|service|services [NAME] [-n NS | -A] [-o json|wide]
  get ep|endpoints|endpointslices [NAME] [-n NS | -A] [-o json]
  get no|node|nodes [NAME] [-o json]
  delete svc|service|endpoints|endpointslice|node NAME [-n NS]
  status [-o json]                                  version, node addresses, allocator usage, dataplane
  rpc METHOD [PARAMS_JSON | -]                      one raw JSON-RPC call; prints the result

The socket is --socket, else $NODEPORTD_SOCKET, else /var/run/nodeportd/nodeportd.sock.
The namespace defaults to \"default\".
";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Service,
    Endpoints,
    EndpointSlice,
    Node,
}

impl Resource {
    fn parse(s: &str) -> Option<Resource> {
        match s {
            "svc" | "service" | "services" => Some(Resource::Service),
            "ep" | "endpoints" => Some(Resource::Endpoints),
            "endpointslice" | "endpointslices" => Some(Resource::EndpointSlice),
            "no" | "node" | "nodes" => Some(Resource::Node),
            _ => None,
        }
    }
    /// As `apply` prints it: `service/NS/NAME`.
    pub fn singular(self) -> &'static str {
        match self {
            Resource::Service => "service",
            Resource::Endpoints => "endpoints",
            Resource::EndpointSlice => "endpointslice",
            Resource::Node => "node",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Table,
    Wide,
    Json,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Help,
    Apply { file: String, json_out: bool, prune: bool },
    Get { res: Resource, name: Option<String>, namespace: String, all_namespaces: bool, output: Output },
    Delete { res: Resource, name: String, namespace: String },
    Status { json_out: bool },
    Rpc { method: String, params: Option<String> },
}

#[derive(Default)]
struct Flags {
    socket: Option<String>,
    file: Option<String>,
    output: Option<String>,
    namespace: Option<String>,
    all_namespaces: bool,
    prune: bool,
    help: bool,
}

/// Splits `argv` (without the program name) into the socket override and a command.
pub fn parse(argv: &[String]) -> Result<(Option<String>, Command), String> {
    let mut f = Flags::default();
    let mut pos: Vec<String> = Vec::new();
    let mut it = argv.iter();
    while let Some(a) = it.next() {
        if a == "--" {
            pos.extend(it.by_ref().cloned());
            break;
        }
        if a == "-" || !a.starts_with('-') {
            pos.push(a.clone());
            continue;
        }
        let (flag, inline) = match a.split_once('=') {
            Some((k, v)) => (k.to_string(), Some(v.to_string())),
            // `-ojson`: the flag is the dash and the next character (which may be
            // several bytes long: split on a character boundary, never inside one).
            None if !a.starts_with("--") && a.chars().count() > 2 => {
                let cut = a.char_indices().nth(2).map_or(a.len(), |(i, _)| i);
                (a[..cut].to_string(), Some(a[cut..].to_string()))
            }
            None => (a.clone(), None),
        };
        let mut value = |name: &str| -> Result<String, String> {
            inline.clone().or_else(|| it.next().cloned()).ok_or_else(|| format!("flag needs an argument: {name}"))
        };
        match flag.as_str() {
            "--socket" => f.socket = Some(value("--socket")?),
            "-f" | "--filename" => f.file = Some(value("-f")?),
            "-o" | "--output" => f.output = Some(value("-o")?),
            "-n" | "--namespace" => f.namespace = Some(value("-n")?),
            "-A" | "--all-namespaces" if inline.is_none() => f.all_namespaces = true,
            "--prune" if inline.is_none() => f.prune = true,
            "-h" | "--help" if inline.is_none() => f.help = true,
            _ => return Err(format!("unknown flag: {a}")),
        }
    }
    let cmd = command(&f, &pos)?;
    Ok((f.socket, cmd))
}

fn output(f: &Flags, allowed: &[&str]) -> Result<Output, String> {
    match f.output.as_deref() {
        None => Ok(Output::Table),
        Some(o) if !allowed.contains(&o) => Err(format!(
            "unable to match a printer suitable for the output format \"{o}\", allowed formats are: {}",
            allowed.join(",")
        )),
        Some("json") => Ok(Output::Json),
        Some("wide") => Ok(Output::Wide),
        Some(_) => Ok(Output::Table),
    }
}

fn no_extra(pos: &[String], max: usize) -> Result<(), String> {
    match pos.get(max) {
        Some(extra) => Err(format!("unexpected argument: {extra}")),
        None => Ok(()),
    }
}

fn command(f: &Flags, pos: &[String]) -> Result<Command, String> {
    if f.help || pos.is_empty() || pos[0] == "help" {
        return Ok(Command::Help);
    }
    let namespace = f.namespace.clone().unwrap_or_else(|| "default".to_string());
    if f.namespace.as_deref() == Some("") {
        return Err("a namespace must not be empty".into());
    }
    let resource = |i: usize| -> Result<Resource, String> {
        let r = pos.get(i).ok_or("you must specify the type of resource: svc, endpoints, endpointslices or nodes")?;
        Resource::parse(r).ok_or_else(|| format!("the server doesn't have a resource type \"{r}\""))
    };
    if f.prune && pos[0] != "apply" {
        return Err("unknown flag: --prune (only apply takes it)".into());
    }
    match pos[0].as_str() {
        "apply" => {
            no_extra(pos, 1)?;
            let file = f.file.clone().ok_or("must specify -f FILE (or -f - for standard input)")?;
            Ok(Command::Apply { file, json_out: output(f, &["json"])? == Output::Json, prune: f.prune })
        }
        "get" => {
            no_extra(pos, 3)?;
            let res = resource(1)?;
            if f.all_namespaces && f.namespace.is_some() {
                return Err("-A and -n exclude each other".into());
            }
            Ok(Command::Get {
                res,
                name: pos.get(2).cloned(),
                namespace,
                all_namespaces: f.all_namespaces,
                output: output(f, &["json", "wide"])?,
            })
        }
        "delete" => {
            no_extra(pos, 3)?;
            let res = resource(1)?;
            let name = pos.get(2).cloned().ok_or("resource(s) were provided, but no name was specified")?;
            Ok(Command::Delete { res, name, namespace })
        }
        "status" => {
            no_extra(pos, 1)?;
            Ok(Command::Status { json_out: output(f, &["json"])? == Output::Json })
        }
        "rpc" => {
            no_extra(pos, 3)?;
            let method = pos.get(1).cloned().ok_or("rpc needs a METHOD")?;
            Ok(Command::Rpc { method, params: pos.get(2).cloned() })
        }
        other => Err(format!("unknown command \"{other}\"")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &str) -> Result<(Option<String>, Command), String> {
        parse(&args.split_whitespace().map(String::from).collect::<Vec<_>>())
    }

    #[test]
    fn apply_from_file_or_stdin() {
        let apply = |file: &str, json_out, prune| Command::Apply { file: file.into(), json_out, prune };
        assert_eq!(p("apply -f svc.json").unwrap().1, apply("svc.json", false, false));
        assert_eq!(p("apply -f - -o json").unwrap().1, apply("-", true, false));
        assert_eq!(p("apply --filename=x.yaml").unwrap().1, apply("x.yaml", false, false));
        assert_eq!(p("apply --prune -f -").unwrap().1, apply("-", false, true));
        assert!(p("get svc --prune").unwrap_err().contains("--prune"));
        assert!(matches!(p("get nodes").unwrap().1, Command::Get { res: Resource::Node, .. }));
        assert!(p("apply").unwrap_err().contains("-f"));
        assert!(p("apply -f x -o yaml").unwrap_err().contains("\"yaml\""));
    }

    #[test]
    fn get_forms() {
        let (_, c) = p("get svc web -n shop -o wide").unwrap();
        assert_eq!(
            c,
            Command::Get {
                res: Resource::Service,
                name: Some("web".into()),
                namespace: "shop".into(),
                all_namespaces: false,
                output: Output::Wide
            }
        );
        let (_, c) = p("-A get endpointslices -ojson").unwrap();
        assert_eq!(
            c,
            Command::Get {
                res: Resource::EndpointSlice,
                name: None,
                namespace: "default".into(),
                all_namespaces: true,
                output: Output::Json
            }
        );
        let (_, c) = p("get ep").unwrap();
        assert!(matches!(c, Command::Get { res: Resource::Endpoints, .. }));
        assert!(p("get pods").unwrap_err().contains("\"pods\""));
        assert!(p("get svc -A -n x").is_err());
    }

    #[test]
    fn socket_flag_anywhere() {
        let (s, c) = p("status --socket /tmp/s.sock -o json").unwrap();
        assert_eq!(s.as_deref(), Some("/tmp/s.sock"));
        assert_eq!(c, Command::Status { json_out: true });
        let (s, _) = p("--socket=/run/x status").unwrap();
        assert_eq!(s.as_deref(), Some("/run/x"));
        assert!(p("status --socket").unwrap_err().contains("argument"));
    }

    #[test]
    fn delete_and_rpc() {
        assert_eq!(
            p("delete service web").unwrap().1,
            Command::Delete { res: Resource::Service, name: "web".into(), namespace: "default".into() }
        );
        assert!(p("delete svc").unwrap_err().contains("no name"));
        assert_eq!(
            p("rpc service.list {}").unwrap().1,
            Command::Rpc { method: "service.list".into(), params: Some("{}".into()) }
        );
        assert_eq!(p("rpc status -").unwrap().1, Command::Rpc { method: "status".into(), params: Some("-".into()) });
    }

    #[test]
    fn multibyte_flags_are_refused_not_split_inside_a_character() {
        for a in ["-é", "-😀", "status -é", "-é=x", "--😀", "-\u{301}x"] {
            let e = p(a).unwrap_err();
            assert!(e.contains("unknown flag"), "{a}: {e}");
        }
        // A multi-byte value after a one-letter flag is kept whole.
        let (_, c) = p("get svc -né").unwrap();
        assert!(matches!(c, Command::Get { ref namespace, .. } if namespace == "é"));
    }

    proptest::proptest! {
        /// Any argument list (any Unicode) gives a command or an error, never a panic.
        #[test]
        fn any_arguments_parse_or_error(args in proptest::collection::vec(".{0,6}", 0..6)) {
            let _ = parse(&args);
        }

        /// Arguments starting with a dash followed by arbitrary characters.
        #[test]
        fn any_dash_argument_parses_or_errors(rest in ".{0,4}", cmd in "(status|get|apply|delete|rpc)?") {
            let mut args = vec![format!("-{rest}")];
            if !cmd.is_empty() {
                args.insert(0, cmd);
            }
            let _ = parse(&args);
        }
    }

    #[test]
    fn nonsense_is_refused() {
        assert!(p("frobnicate").unwrap_err().contains("unknown command"));
        assert!(p("get svc --bogus").unwrap_err().contains("unknown flag"));
        assert!(p("status extra").unwrap_err().contains("unexpected"));
        assert_eq!(p("").unwrap().1, Command::Help);
    }
}
