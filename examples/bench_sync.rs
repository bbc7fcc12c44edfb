//! nftables sync benchmark (not a test): full and one-endpoint partial syncs
//! over netlink for 100, 1 000 and 10 000 services × 3 endpoints, side by side
//! with the same ruleset loaded by `nft -f` from text (kube-proxy's method).
//!
//! Run as root; it moves itself into a fresh network namespace first:
//!     cargo run --release --example bench_sync [-- 100 1000 10000]

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nodeportd::nft::ir::*;
use nodeportd::nft::render::{self, rule};
use nodeportd::nft::{self, synthetic, NftSocket};

fn main() {
    // SAFETY: called before any thread exists; moves this process into a new,
    // empty network namespace so the benchmark touches nothing else.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        eprintln!("unshare(CLONE_NEWNET): {} (run as root)", std::io::Error::last_os_error());
        std::process::exit(1);
    }
    let sizes: Vec<usize> = {
        let v: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
        if v.is_empty() {
            vec![100, 1000, 10000]
        } else {
            v
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    println!(
        "| services | full sync (netlink) | full sync, table present | partial sync (1 endpoint) | of which planning | partial msgs | partial bytes | full msgs | nft -f full | nft -f partial |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for n in sizes {
        rt.block_on(run(n));
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// CPU time (user + system) of this process or of its waited-for children.
/// Reported next to wall time because the machine may be shared.
fn cpu(children: bool) -> Duration {
    // SAFETY: getrusage writes one rusage struct we own; all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let who = if children { libc::RUSAGE_CHILDREN } else { libc::RUSAGE_SELF };
    // SAFETY: `ru` is a live, writable rusage.
    unsafe { libc::getrusage(who, &mut ru) };
    let tv = |t: libc::timeval| {
        Duration::new(u64::try_from(t.tv_sec).unwrap_or(0), u32::try_from(t.tv_usec).unwrap_or(0) * 1000)
    };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Wall and CPU time of `f`.
struct Timed {
    wall: Duration,
    cpu: Duration,
}

impl std::fmt::Display for Timed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({} cpu)", ms(self.wall), ms(self.cpu))
    }
}

fn start(children: bool) -> (Instant, Duration) {
    (Instant::now(), cpu(children))
}

fn stop((t, c): (Instant, Duration), children: bool) -> Timed {
    Timed { wall: t.elapsed(), cpu: cpu(children) - c }
}

async fn run(n: usize) {
    let mut s = NftSocket::new().expect("netlink socket");
    let prev = synthetic::ruleset(n, 3);
    let mut next = prev.clone();
    synthetic::change_endpoint(&mut next, n / 2);

    let _ = nft::delete_table(&mut s, Family::Inet, synthetic::TABLE).await;
    let t = start(false);
    let full = nft::full_sync(&mut s, &prev).await.expect("full sync");
    let full_t = stop(t, false);
    let t = start(false);
    nft::full_sync(&mut s, &prev).await.expect("full sync again");
    let full_again_t = stop(t, false);
    // Median of a few partial syncs back and forth (the last one leaves `next`).
    let mut parts = Vec::new();
    let mut stats = None;
    for i in 0..5 {
        let (a, b) = if i % 2 == 0 { (&prev, &next) } else { (&next, &prev) };
        let t = start(false);
        let r = nft::partial_sync(&mut s, a, b).await.expect("partial sync");
        let t = stop(t, false);
        parts.push((t.wall, t.cpu));
        assert!(!r.full);
        stats = Some(r.stats);
    }
    parts.sort();
    let part = stats.unwrap_or_default();
    let t = start(false);
    let plan = nft::sync::partial_sync_ops(&prev, &next).expect("plan");
    let plan_t = stop(t, false);
    drop(plan);
    let drift = nft::list::verify(&mut s, &next).await.expect("verify");
    assert!(drift.is_empty(), "kernel differs after partial sync: {drift:?}");

    let _ = nft::delete_table(&mut s, Family::Inet, synthetic::TABLE).await;
    let text = full_text(&prev);
    let nft_full = nft_f(&text);
    let nft_part = nft_f(&partial_text(&prev, &next));
    println!(
        "| {n} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        full_t,
        full_again_t,
        Timed { wall: parts[parts.len() / 2].0, cpu: parts[parts.len() / 2].1 },
        plan_t,
        part.messages,
        part.bytes,
        full.stats.messages,
        nft_full,
        nft_part,
    );
}

fn nft_f(text: &str) -> Timed {
    let t = start(true);
    let mut c = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("run nft (install the nftables package)");
    c.stdin.take().expect("stdin").write_all(text.as_bytes()).expect("write to nft");
    let st = c.wait().expect("wait for nft");
    assert!(st.success(), "nft -f failed");
    stop(t, true)
}

// ---- the same rulesets as nft text, in the renderer's syntax (--dry-run prints the same) ----

/// kube-proxy's full resync: create, delete and recreate the table in one file.
fn full_text(r: &Ruleset) -> String {
    let t = &r.table;
    format!("add table inet {t}\ndelete table inet {t}\n{}", render::render(r))
}

/// kube-proxy's partial resync as text: new chains, rewritten chains, deleted chains.
fn partial_text(prev: &Ruleset, next: &Ruleset) -> String {
    let t = &next.table;
    let mut o = String::new();
    let old: std::collections::HashMap<&str, &Vec<Rule>> =
        prev.chains.iter().map(|(c, r)| (c.name.as_str(), r)).collect();
    for (c, _) in &next.chains {
        if !old.contains_key(c.name.as_str()) {
            writeln!(o, "add chain inet {t} {}", c.name).expect("write to String");
        }
    }
    for (c, rules) in &next.chains {
        match old.get(c.name.as_str()) {
            Some(r) if *r == rules => continue,
            Some(_) => writeln!(o, "flush chain inet {t} {}", c.name).expect("write to String"),
            None => {}
        }
        for ru in rules {
            writeln!(o, "add rule inet {t} {} {}", c.name, rule(ru)).expect("write to String");
        }
    }
    let wanted: std::collections::HashSet<&str> = next.chains.iter().map(|(c, _)| c.name.as_str()).collect();
    for (c, _) in &prev.chains {
        if !wanted.contains(c.name.as_str()) {
            writeln!(o, "delete chain inet {t} {}", c.name).expect("write to String");
        }
    }
    o
}
