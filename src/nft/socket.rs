//! The nfnetlink socket: atomic batches with an ack per message, dumps, and
//! the generation id. Async on tokio through netlink-sys's `TokioSocket`.

use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

use std::ops::ControlFlow;

use netlink_packet_core::{NLM_F_ACK, NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_REQUEST};
use netlink_sys::{protocols::NETLINK_NETFILTER, AsyncSocket, AsyncSocketExt, TokioSocket};

use super::error::{explain, expr_module, KernelError, NftError};
use super::expr::{Data, Expr};
use super::lower::{LowerError, Object, Op};
use super::recv::{receive, ExtAck, Incoming, Source, NLMSG_HDRLEN};
use super::wire::{self, emit, AttrList, MsgType, NfMsg};

/// What one transaction cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TxStats {
    /// Netlink messages sent, batch begin and end included.
    pub messages: usize,
    /// Bytes handed to the kernel.
    pub bytes: usize,
    /// `sendmsg` calls (one per transaction).
    pub sends: usize,
    /// Whether every message was acked one by one (see [`ACK_EACH_LIMIT`]).
    pub acked_each: bool,
}

/// Batches up to this many messages ask the kernel to ack each one. Larger
/// ones (the full sync of thousands of services) get errors only, followed by
/// a `GETGEN` barrier: the kernel queues all acks at commit and each costs
/// about 1 KiB of kernel memory, too much for 100 000 messages on a router.
pub const ACK_EACH_LIMIT: usize = 4096;

const ANSWER_DEADLINE: Duration = Duration::from_secs(120);
/// Kernel memory charged per queued ack (skb overhead included), generously.
const ACK_TRUESIZE: usize = 1024;
const NETLINK_EXT_ACK: libc::c_int = 11;
const NETLINK_CAP_ACK: libc::c_int = 10;

pub struct NftSocket {
    sock: TokioSocket,
    portid: u32,
    seq: u32,
    sndbuf: usize,
    rcvbuf: usize,
}

fn io_err(op: &'static str) -> impl FnOnce(io::Error) -> NftError {
    move |source| NftError::Io { op, source }
}

/// `size_of::<c_int>()` as setsockopt(2) wants it (4 on every target; checked at build time).
const C_INT_LEN: libc::socklen_t = 4;
const _: () = assert!(std::mem::size_of::<libc::c_int>() == 4);

fn set_int_opt(fd: i32, level: libc::c_int, opt: libc::c_int, v: libc::c_int) -> io::Result<()> {
    // SAFETY: `fd` is an open socket owned by the caller for the duration of
    // the call; we pass a pointer to a live c_int and its exact size.
    let r = unsafe { libc::setsockopt(fd, level, opt, (&v as *const libc::c_int).cast(), C_INT_LEN) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl NftSocket {
    /// Opens a netfilter netlink socket in the caller's network namespace.
    pub fn new() -> Result<Self, NftError> {
        let mut sock = TokioSocket::new(NETLINK_NETFILTER).map_err(io_err("socket"))?;
        let addr = sock.socket_mut().bind_auto().map_err(io_err("bind"))?;
        let fd = sock.as_raw_fd();
        // Errors carry only the header (we keep our own copy of each message)
        // plus the kernel's attribute offset and text, when it has them.
        set_int_opt(fd, libc::SOL_NETLINK, NETLINK_CAP_ACK, 1).map_err(io_err("setsockopt CAP_ACK"))?;
        set_int_opt(fd, libc::SOL_NETLINK, NETLINK_EXT_ACK, 1).map_err(io_err("setsockopt EXT_ACK"))?;
        Ok(NftSocket {
            sock,
            portid: addr.port_number(),
            seq: std::process::id().wrapping_mul(1 << 12),
            sndbuf: 0,
            rcvbuf: 0,
        })
    }

    /// The netlink port id the kernel gave us (nlmsg_pid of our events).
    pub fn portid(&self) -> u32 {
        self.portid
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// Grows a socket buffer so a whole batch (or all its acks) fits: the
    /// kernel takes a batch from one `sendmsg` and queues every ack at commit.
    fn ensure_buf(&mut self, send: bool, need: usize) -> Result<(), NftError> {
        let cur = if send { self.sndbuf } else { self.rcvbuf };
        if need <= cur {
            return Ok(());
        }
        let want = need.max(256 * 1024).min(i32::MAX as usize / 2);
        let opt = if send { libc::SO_SNDBUFFORCE } else { libc::SO_RCVBUFFORCE };
        // At most i32::MAX / 2: fits.
        let v = libc::c_int::try_from(want).unwrap_or(libc::c_int::MAX / 2);
        set_int_opt(self.sock.as_raw_fd(), libc::SOL_SOCKET, opt, v)
            .map_err(io_err("setsockopt SO_SNDBUFFORCE/SO_RCVBUFFORCE"))?;
        if send {
            self.sndbuf = want;
        } else {
            self.rcvbuf = want;
        }
        Ok(())
    }

    /// Sends `ops` as one atomic batch and waits for every ack. With `genid`,
    /// the kernel refuses the batch if the ruleset generation moved.
    pub async fn transact(&mut self, ops: &[Op], genid: Option<u32>) -> Result<TxStats, NftError> {
        self.transact_with(genid, |sink| {
            for op in ops {
                sink(op.clone());
            }
            Ok(())
        })
        .await
    }

    /// [`NftSocket::transact`] for messages that `gen` hands to its sink one at
    /// a time: each is serialized into the batch and dropped, so only the
    /// batch's bytes are held, never all the messages. `gen` must yield the same
    /// messages each time it is called: it runs again only when the kernel
    /// refuses some, to describe those by their index.
    pub async fn transact_with<G>(&mut self, genid: Option<u32>, gen: G) -> Result<TxStats, NftError>
    where
        G: Fn(&mut dyn FnMut(Op)) -> Result<(), LowerError>,
    {
        let mut buf = Vec::new();
        let begin_seq = self.next_seq();
        emit(&mut buf, NfMsg::batch(true, genid), NLM_F_REQUEST, begin_seq);
        let first = begin_seq.wrapping_add(1);
        // Where each message starts in `buf`; its sequence number is `first + index`.
        let mut starts: Vec<usize> = Vec::new();
        // Sequence numbers are 32 bits and wrap (netlink).
        let mut seq = first;
        gen(&mut |op: Op| {
            starts.push(buf.len());
            emit(&mut buf, op.msg, NLM_F_REQUEST | op.flags, seq);
            seq = seq.wrapping_add(1);
        })?;
        let count = starts.len();
        if count == 0 {
            return Ok(TxStats::default());
        }
        // The last message's: `first + count - 1`.
        self.seq = seq.wrapping_sub(1);
        // The count is known only now: ask for acks in the headers already written.
        let ack_each = count <= ACK_EACH_LIMIT;
        if ack_each {
            for &s in &starts {
                let f = &mut buf[s + 6..s + 8];
                let flags = u16::from_ne_bytes([f[0], f[1]]) | NLM_F_ACK;
                f.copy_from_slice(&flags.to_ne_bytes());
            }
        }
        let end_seq = self.next_seq();
        emit(&mut buf, NfMsg::batch(false, None), NLM_F_REQUEST, end_seq);
        self.ensure_buf(true, buf.len() + 64 * 1024)?;
        self.ensure_buf(false, (count.min(ACK_EACH_LIMIT) + 16) * ACK_TRUESIZE)?;
        let sent = self.sock.send(&buf).await.map_err(io_err("sendmsg"))?;
        if sent != buf.len() {
            return Err(NftError::Io {
                op: "sendmsg",
                source: io::Error::other(format!("sent {sent} of {} bytes", buf.len())),
            });
        }
        // The kernel handles a batch inside sendmsg, so every error is queued
        // before the barrier's answer.
        let barrier_seq = self.next_seq();
        if !ack_each {
            let mut b = Vec::new();
            emit(&mut b, NfMsg::new(MsgType::GetGen, wire::NFPROTO_UNSPEC, vec![]), NLM_F_REQUEST, barrier_seq);
            self.sock.send(&b).await.map_err(io_err("sendmsg"))?;
        }
        let stats = TxStats { messages: count + 2, bytes: buf.len(), sends: 1, acked_each: ack_each };
        let mut acked = 0usize;
        // Refused messages by index, described once all answers are in.
        let mut failed: Vec<Refused> = Vec::new();
        let mut barrier = ack_each;
        let mut whole: Option<KernelError> = None;
        let deadline = tokio::time::Instant::now() + ANSWER_DEADLINE;
        let answers = receive(Source::Tokio(&mut self.sock, Some(deadline)), &mut |m| {
            if !ack_each && m.seq() == Some(barrier_seq) {
                barrier = true;
            } else {
                match m {
                    Incoming::Refused { seq, errno, ext } if seq == begin_seq || seq == end_seq => {
                        // The whole batch failed (commit error or generation mismatch).
                        whole = Some(KernelError {
                            errno,
                            object: "transaction".into(),
                            reason: explain(errno),
                            kernel_msg: ext.msg,
                        });
                        return Ok(ControlFlow::Break(()));
                    }
                    Incoming::Ack(seq) | Incoming::Refused { seq, .. }
                        if (seq.wrapping_sub(first) as usize) < count =>
                    {
                        acked += 1;
                        if let Incoming::Refused { errno, ext, .. } = m {
                            failed.push((seq.wrapping_sub(first) as usize, errno, ext));
                        }
                    }
                    Incoming::Overrun => return Err(overrun()),
                    _ => {}
                }
            }
            Ok(if barrier && (!ack_each || acked == count) {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            })
        })
        .await;
        match answers {
            Ok(()) => {}
            Err(NftError::Timeout { .. }) => return Err(NftError::Timeout { waiting_for: count - acked }),
            Err(e) => return Err(e),
        }
        if failed.is_empty() && whole.is_none() {
            return Ok(stats);
        }
        let mut errors = describe_failed(&gen, failed, &buf, &starts);
        errors.extend(whole);
        Err(NftError::Rejected(errors))
    }

    /// A dump request; retried when the ruleset changed during the dump.
    pub async fn dump(&mut self, msg: NfMsg) -> Result<Vec<NfMsg>, NftError> {
        for _ in 0..5 {
            match self.dump_once(msg.clone()).await? {
                Some(v) => return Ok(v),
                None => continue,
            }
        }
        Err(NftError::Io { op: "dump", source: io::Error::other("interrupted by concurrent changes 5 times") })
    }

    async fn dump_once(&mut self, msg: NfMsg) -> Result<Option<Vec<NfMsg>>, NftError> {
        let seq = self.next_seq();
        let mut buf = Vec::new();
        emit(&mut buf, msg, NLM_F_REQUEST | NLM_F_DUMP, seq);
        self.sock.send(&buf).await.map_err(io_err("sendmsg"))?;
        let mut out = Vec::new();
        let mut interrupted = false;
        let mut whole = false;
        let deadline = tokio::time::Instant::now() + ANSWER_DEADLINE;
        receive(Source::Tokio(&mut self.sock, Some(deadline)), &mut |m| {
            if m.seq() != Some(seq) {
                return match m {
                    Incoming::Overrun => Err(overrun()),
                    _ => Ok(ControlFlow::Continue(())),
                };
            }
            match m {
                Incoming::Msg(h, i) => {
                    interrupted |= h.flags & NLM_F_DUMP_INTR != 0;
                    out.push(i);
                    return Ok(ControlFlow::Continue(()));
                }
                Incoming::Done { interrupted: intr, .. } => whole = !(interrupted || intr),
                Incoming::Ack(_) => whole = true,
                Incoming::Refused { errno, .. } => return Err(refused("dump", errno)),
                _ => return Ok(ControlFlow::Continue(())),
            }
            Ok(ControlFlow::Break(()))
        })
        .await
        .map_err(one_answer)?;
        Ok(whole.then_some(out))
    }

    /// A single get request (not a dump); returns the kernel's answer.
    pub async fn get(&mut self, msg: NfMsg) -> Result<NfMsg, NftError> {
        let seq = self.next_seq();
        let mut buf = Vec::new();
        emit(&mut buf, msg, NLM_F_REQUEST, seq);
        self.sock.send(&buf).await.map_err(io_err("sendmsg"))?;
        let mut answer = None;
        let deadline = tokio::time::Instant::now() + ANSWER_DEADLINE;
        receive(Source::Tokio(&mut self.sock, Some(deadline)), &mut |m| match m {
            Incoming::Msg(h, i) if h.sequence_number == seq => {
                answer = Some(i);
                Ok(ControlFlow::Break(()))
            }
            Incoming::Refused { seq: s, errno, .. } if s == seq => Err(refused("request", errno)),
            Incoming::Overrun => Err(overrun()),
            _ => Ok(ControlFlow::Continue(())),
        })
        .await
        .map_err(one_answer)?;
        // The loop stops only with an answer; should it not, say so as if none came.
        answer.ok_or(NftError::Timeout { waiting_for: 1 })
    }

    /// The ruleset generation (`NFT_MSG_GETGEN`), which moves with every commit.
    pub async fn generation(&mut self) -> Result<u32, NftError> {
        let m = self.get(NfMsg::new(MsgType::GetGen, wire::NFPROTO_UNSPEC, vec![])).await?;
        m.attrs
            .u32_of(wire::gen::ID)
            .map_err(|e| NftError::Decode(e.to_string()))?
            .ok_or_else(|| NftError::Decode("NEWGEN without NFTA_GEN_ID".into()))
    }
}

fn overrun() -> NftError {
    NftError::Io { op: "recvmsg", source: io::Error::from_raw_os_error(libc::ENOBUFS) }
}

fn refused(object: &str, errno: i32) -> NftError {
    NftError::Rejected(vec![KernelError { errno, object: object.into(), reason: explain(errno), kernel_msg: None }])
}

/// A request with one answer (or one dump) that did not come in time.
fn one_answer(e: NftError) -> NftError {
    match e {
        NftError::Timeout { .. } => NftError::Timeout { waiting_for: 1 },
        e => e,
    }
}

/// Names each refused message, generating the batch again to find them by index.
fn describe_failed<G>(gen: &G, mut failed: Vec<Refused>, buf: &[u8], starts: &[usize]) -> Vec<KernelError>
where
    G: Fn(&mut dyn FnMut(Op)) -> Result<(), LowerError>,
{
    failed.sort_by_key(|f| f.0);
    let mut errors = Vec::with_capacity(failed.len());
    let mut next = 0;
    let mut idx = 0;
    // It produced these messages a moment ago, so it cannot fail now; should it
    // anyway, the messages left undescribed are named by their index below.
    let _ = gen(&mut |op: Op| {
        while let Some((i, errno, tlvs)) = failed.get(next) {
            if *i != idx {
                break;
            }
            errors.push(describe(&op, *errno, tlvs.clone(), &buf[starts[*i]..]));
            next += 1;
        }
        idx += 1;
    });
    for (i, errno, ExtAck { msg: kmsg, .. }) in failed.into_iter().skip(next) {
        errors.push(KernelError {
            errno,
            object: format!("message #{i} of the batch"),
            reason: explain(errno),
            kernel_msg: kmsg,
        });
    }
    errors
}

/// A message the kernel refused: its index in the batch, the errno and the extended ack.
type Refused = (usize, i32, ExtAck);

/// Explains a refused message: for rules, which expression the kernel pointed
/// at, and whether that means a missing chain, set or kernel module.
fn describe(op: &Op, errno: i32, ext: ExtAck, sent: &[u8]) -> KernelError {
    let ExtAck { msg: kmsg, offset: offs } = ext;
    let object = op.object.to_string();
    let mut reason = explain(errno);
    if let Object::Rule { .. } = op.object {
        let culprit = offs.and_then(|o| expr_at(sent, o as usize));
        let exprs: Vec<Expr> = op
            .msg
            .attrs
            .attr(wire::rule::EXPRESSIONS)
            .and_then(|a| a.children().ok())
            .map(|l| l.iter().filter_map(|e| Expr::parse(e).ok()).collect())
            .unwrap_or_default();
        let suspects: Vec<&Expr> = match culprit {
            Some(i) => exprs.get(i).into_iter().collect(),
            None => exprs.iter().collect(),
        };
        if errno == libc::ENOENT || errno == libc::EOPNOTSUPP {
            let mut parts = Vec::new();
            for e in &suspects {
                match e {
                    Expr::Immediate { data: Data::Verdict(v), .. } if v.chain.is_some() => {
                        parts.push(format!("target chain {:?} does not exist", v.chain.as_deref().unwrap_or_default()))
                    }
                    Expr::Lookup { set, set_id: None, .. } | Expr::Dynset { set, set_id: None, .. } => {
                        parts.push(format!("set {set:?} does not exist"))
                    }
                    e if culprit.is_some() => {
                        parts.push(format!("kernel lacks {m} (modprobe {m})", m = expr_module(e.name())))
                    }
                    _ => {}
                }
            }
            if culprit.is_none() && !exprs.is_empty() {
                let mut mods: Vec<String> = exprs.iter().map(|e| expr_module(e.name())).collect();
                mods.dedup();
                parts.push(format!("or the kernel lacks one of {}", mods.join(", ")));
            }
            if !parts.is_empty() {
                reason = parts.join("; ");
            }
        }
    }
    if errno == libc::ENOENT {
        if let Object::Chain(_) | Object::Set(_) | Object::FlushChain(_) | Object::Elements { .. } = op.object {
            reason = "it (or its table) does not exist".into();
        }
    }
    KernelError { errno, object, reason, kernel_msg: kmsg }
}

/// The index of the expression containing byte `offs` of a NEWRULE message.
fn expr_at(msg: &[u8], offs: usize) -> Option<usize> {
    let body = msg.get(NLMSG_HDRLEN + 4..)?;
    let mut pos = NLMSG_HDRLEN + 4;
    for a in netlink_packet_core::NlasIterator::new(body) {
        let a = a.ok()?;
        let len = a.length() as usize;
        if a.kind() & netlink_packet_core::NLA_TYPE_MASK == wire::rule::EXPRESSIONS {
            if offs < pos || offs >= pos + len {
                return None;
            }
            let mut epos = pos + 4;
            for (i, e) in netlink_packet_core::NlasIterator::new(a.value()).enumerate() {
                let e = e.ok()?;
                let elen = e.length() as usize;
                if offs >= epos && offs < epos + elen {
                    return Some(i);
                }
                epos += elen.div_ceil(4) * 4;
            }
            return None;
        }
        pos += len.div_ceil(4) * 4;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nft::ir::{Family, Field, Rule, Stmt, Value, Verdict};
    use crate::nft::lower::Lowerer;

    #[test]
    fn enoent_on_an_expression_names_the_kernel_module() {
        let mut l = Lowerer::new(Some(Family::Inet), "t");
        let r = Rule {
            stmts: vec![Stmt::VmapInline {
                key: Field::NumgenRandom(2),
                entries: vec![(Value::Mark(0), Verdict::Accept), (Value::Mark(1), Verdict::Drop)],
            }],
            comment: None,
        };
        let ops = l.rule("c", 0, &r).unwrap();
        let op = ops.last().unwrap();
        let mut buf = Vec::new();
        emit(&mut buf, op.msg.clone(), NLM_F_REQUEST, 1);
        // Point at the numgen expression, as the kernel's extended ack does.
        let offs = buf.windows(7).position(|w| w == b"numgen\0").unwrap();
        let e = describe(op, libc::ENOENT, ExtAck { msg: None, offset: Some(u32::try_from(offs).unwrap()) }, &buf);
        assert_eq!(e.reason, "kernel lacks nft_numgen (modprobe nft_numgen)");
        assert!(e.to_string().starts_with("rule #0 of chain c: kernel lacks nft_numgen"));
        let e = describe(op, libc::EPERM, ExtAck::default(), &buf);
        assert!(e.to_string().contains("needs CAP_NET_ADMIN"), "{e}");
    }
}
