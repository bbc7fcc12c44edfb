//! The one receive loop of every nfnetlink socket: nf_tables requests
//! ([`super::NftSocket`]), nf_tables change events ([`super::EventStream`]) and
//! ctnetlink (`crate::conntrack`).
//!
//! [`receive`] reads datagrams, [`walk`] splits each into netlink messages and
//! sorts them into [`Incoming`]: a subsystem message, an acknowledgement, a
//! refusal (with the kernel's extended ack), the end of a dump, or a receive
//! buffer overrun. What a message means is the caller's business: its closure
//! decides whether to go on or stop, and keeps what it found in its own variables.

use std::future::Future;
use std::io;
use std::ops::ControlFlow;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK_TLVS, NLM_F_CAPPED, NLM_F_DUMP_INTR,
};
use netlink_sys::{AsyncSocketExt, TokioSocket};

use super::error::NftError;
use super::wire::{parse_attrs, AttrList, NfMsg};

/// `sizeof(struct nlmsghdr)`
pub const NLMSG_HDRLEN: usize = 16;
const NLMSGERR_ATTR_MSG: u16 = 1;
const NLMSGERR_ATTR_OFFS: u16 = 2;

/// One message of a datagram, sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    /// A message of the subsystem: an nf_tables object, an event, a conntrack entry.
    Msg(NetlinkHeader, NfMsg),
    /// `NLMSG_ERROR` with code 0 for the request with this sequence number.
    Ack(u32),
    /// `NLMSG_ERROR` with an errno (positive) for the request with this sequence number.
    Refused { seq: u32, errno: i32, ext: ExtAck },
    /// `NLMSG_DONE` of a dump; `interrupted`: the table changed meanwhile (`NLM_F_DUMP_INTR`).
    Done { seq: u32, interrupted: bool },
    /// The socket's receive buffer overran (`ENOBUFS`): messages were lost.
    Overrun,
    /// The datagram was walked to its end. A caller that collects several
    /// messages (the event stream) stops here so that none is lost.
    Drained,
}

impl Incoming {
    /// The sequence number it answers (the request's), if it answers one.
    pub fn seq(&self) -> Option<u32> {
        match self {
            Incoming::Msg(h, _) => Some(h.sequence_number),
            Incoming::Ack(seq) | Incoming::Refused { seq, .. } | Incoming::Done { seq, .. } => Some(*seq),
            Incoming::Overrun | Incoming::Drained => None,
        }
    }
}

/// The kernel's extended ack of a refusal (`NETLINK_EXT_ACK`), when it sent one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExtAck {
    /// Its text (`NLMSGERR_ATTR_MSG`).
    pub msg: Option<String>,
    /// The byte offset, in the refused message, of the attribute it objects to.
    pub offset: Option<u32>,
}

/// What a caller's closure answers for each [`Incoming`]: go on, or stop
/// (keeping whatever it found in its own variables), or fail.
pub type Step = Result<ControlFlow<()>, NftError>;

/// Where datagrams come from. One enum rather than a trait keeps a single copy
/// of the loop in the binary, whoever calls it.
pub enum Source<'a> {
    /// A tokio socket; past the deadline, if any, [`NftError::Timeout`] (its
    /// `waiting_for` is the caller's to fill in).
    Tokio(&'a mut TokioSocket, Option<tokio::time::Instant>),
    /// A blocking socket (ctnetlink, off the event loop): see [`receive_blocking`].
    Blocking(&'a mut netlink_sys::Socket),
    /// Datagrams (or receive errors) from memory, for the tests of the loop.
    #[cfg(test)]
    Script(&'a mut std::collections::VecDeque<Result<Vec<u8>, NftError>>),
}

/// The room a datagram is read into. The kernel sizes a dump's datagrams by the
/// largest buffer a reader has passed (up to 32 KiB); reading each datagram's exact
/// length after a peek with no room (`recv_from_full`) kept them one page, and a set's
/// dump then took 8× the datagrams, each of which walks the set again from its start
/// to where the last one stopped (`nft_rhash_walk`): quadratic in the set's size. It is
/// also one system call a datagram rather than two. Nothing we read is longer (dumps
/// stop at 32 KiB, acknowledgements are capped, events carry one object); a longer one
/// would be cut, which [`walk`] refuses.
const DATAGRAM_ROOM: usize = 64 * 1024;

impl Source<'_> {
    /// Reads one datagram into `buf` (cleared first).
    async fn next(&mut self, buf: &mut Vec<u8>) -> Result<(), NftError> {
        buf.clear();
        buf.reserve(DATAGRAM_ROOM);
        let got = match self {
            Source::Tokio(sock, None) => sock.recv_from(buf).await.map(drop),
            Source::Tokio(sock, Some(at)) => tokio::time::timeout_at(*at, sock.recv_from(buf))
                .await
                .map_err(|_| NftError::Timeout { waiting_for: 0 })?
                .map(drop),
            Source::Blocking(sock) => sock.recv_from(buf, 0).map(drop),
            #[cfg(test)]
            Source::Script(q) => {
                let data = q.pop_front().unwrap_or_else(|| Err(NftError::Decode("script ended".into())))?;
                buf.extend_from_slice(&data);
                return Ok(());
            }
        };
        got.map_err(|source| NftError::Io { op: "recvmsg", source })
    }
}

/// Reads datagrams from `src` and hands every message to `on` until it stops
/// or fails. Overruns (`ENOBUFS`) are handed to `on` too; other socket errors
/// end the loop.
pub async fn receive(mut src: Source<'_>, on: &mut dyn FnMut(Incoming) -> Step) -> Result<(), NftError> {
    let mut buf = Vec::new();
    loop {
        let step = match src.next(&mut buf).await {
            Ok(()) => walk(&buf, on)?,
            Err(NftError::Io { source, .. }) if source.raw_os_error() == Some(libc::ENOBUFS) => on(Incoming::Overrun)?,
            Err(e) => return Err(e),
        };
        if step.is_break() {
            return Ok(());
        }
    }
}

/// [`receive`] on a blocking socket, for callers off the event loop.
pub fn receive_blocking(sock: &mut netlink_sys::Socket, on: &mut dyn FnMut(Incoming) -> Step) -> Result<(), NftError> {
    run_ready(receive(Source::Blocking(sock), on))
}

/// Runs a receive loop over a source that never waits (a blocking socket
/// blocks in recvmsg instead): one poll runs it to its end, nothing needs waking.
fn run_ready(fut: impl Future<Output = Result<(), NftError>>) -> Result<(), NftError> {
    match pin!(fut).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(r) => r,
        Poll::Pending => {
            Err(NftError::Io { op: "recvmsg", source: io::Error::other("a blocking receive was suspended") })
        }
    }
}

/// Splits one datagram into messages and hands each to `on`, then
/// [`Incoming::Drained`]. A length that does not fit the datagram is an error
/// naming the offset; nothing is read out of bounds.
pub fn walk(buf: &[u8], on: &mut dyn FnMut(Incoming) -> Step) -> Step {
    let mut off = 0;
    while off < buf.len() {
        let rest = &buf[off..];
        // A header that is cut off reads as length 0: refused below like any bad length.
        let len = rest.get(..NLMSG_HDRLEN).map_or(0, |h| u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) as usize);
        if len < NLMSG_HDRLEN || len > rest.len() {
            return Err(NftError::Decode(format!(
                "netlink datagram truncated: the message at offset {off} says {len} bytes, {} are left",
                rest.len()
            )));
        }
        let m = NetlinkMessage::<NfMsg>::deserialize(&rest[..len])
            .map_err(|e| NftError::Decode(format!("netlink message at offset {off}: {e}")))?;
        if let Some(m) = sort(m) {
            if on(m)?.is_break() {
                return Ok(ControlFlow::Break(()));
            }
        }
        off = off.saturating_add(len.div_ceil(4) * 4);
    }
    on(Incoming::Drained)
}

fn sort(m: NetlinkMessage<NfMsg>) -> Option<Incoming> {
    let h = m.header;
    Some(match m.payload {
        NetlinkPayload::InnerMessage(msg) => Incoming::Msg(h, msg),
        NetlinkPayload::Done(_) => {
            Incoming::Done { seq: h.sequence_number, interrupted: h.flags & NLM_F_DUMP_INTR != 0 }
        }
        NetlinkPayload::Error(e) => {
            // The answer echoes the request's header: its sequence number is the one we sent.
            let seq = e.header.get(8..12).and_then(|b| b.try_into().ok()).map_or(h.sequence_number, u32::from_ne_bytes);
            match e.code {
                None => Incoming::Ack(seq),
                Some(code) => {
                    Incoming::Refused { seq, errno: code.get().saturating_neg(), ext: ext_ack(&h, &e.header) }
                }
            }
        }
        // NLMSG_NOOP and NLMSG_OVERRUN carry nothing for us.
        _ => return None,
    })
}

/// The TLVs after the echoed request: right after its header when the kernel
/// capped the echo (`NETLINK_CAP_ACK`), else after the whole request.
fn ext_ack(h: &NetlinkHeader, echoed: &[u8]) -> ExtAck {
    if h.flags & NLM_F_ACK_TLVS == 0 {
        return ExtAck::default();
    }
    let start = if h.flags & NLM_F_CAPPED != 0 {
        NLMSG_HDRLEN
    } else {
        match echoed.get(..4).and_then(|b| b.try_into().ok()).map(u32::from_ne_bytes) {
            Some(len) => (len as usize).div_ceil(4) * 4,
            None => return ExtAck::default(),
        }
    };
    let Some(Ok(attrs)) = echoed.get(start..).map(parse_attrs) else {
        return ExtAck::default();
    };
    ExtAck {
        msg: attrs.attr(NLMSGERR_ATTR_MSG).and_then(|a| a.as_str().ok()),
        // The offset is a host-endian u32 (netlink core, not nf_tables).
        offset: attrs.attr(NLMSGERR_ATTR_OFFS).and_then(|a| a.payload().try_into().ok()).map(u32::from_ne_bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nft::wire::{emit, Attr, MsgType, NFPROTO_INET};
    use netlink_packet_core::{NLM_F_MULTIPART, NLM_F_REQUEST};
    use std::collections::VecDeque;

    /// Runs the loop over `script` as over a blocking socket.
    fn run(
        script: &mut VecDeque<Result<Vec<u8>, NftError>>,
        on: &mut dyn FnMut(Incoming) -> Step,
    ) -> Result<(), NftError> {
        run_ready(receive(Source::Script(script), on))
    }

    fn enobufs() -> Result<Vec<u8>, NftError> {
        Err(NftError::Io { op: "recvmsg", source: io::Error::from_raw_os_error(libc::ENOBUFS) })
    }

    fn table(name: &str, flags: u16, seq: u32) -> Vec<u8> {
        let mut b = Vec::new();
        emit(&mut b, NfMsg::new(MsgType::NewTable, NFPROTO_INET, vec![Attr::str(1, name)]), flags, seq);
        b
    }

    fn header(len: usize, kind: u16, flags: u16, seq: u32) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&u32::try_from(len).unwrap().to_ne_bytes());
        b.extend_from_slice(&kind.to_ne_bytes());
        b.extend_from_slice(&flags.to_ne_bytes());
        b.extend_from_slice(&seq.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b
    }

    /// NLMSG_ERROR for request `seq`, echoing `request` (its header only when
    /// `capped`) and then `tlvs` (the extended ack).
    fn error(code: i32, request: &[u8], capped: bool, tlvs: &[Attr]) -> Vec<u8> {
        let echoed = if capped { &request[..NLMSG_HDRLEN] } else { request };
        let mut body = code.to_ne_bytes().to_vec();
        body.extend_from_slice(echoed);
        let start = body.len();
        body.resize(start + netlink_packet_core::Emitable::buffer_len(&tlvs), 0);
        netlink_packet_core::Emitable::emit(&tlvs, &mut body[start..]);
        let mut flags = if capped { NLM_F_CAPPED } else { 0 };
        if !tlvs.is_empty() {
            flags |= NLM_F_ACK_TLVS;
        }
        let seq = u32::from_ne_bytes(request[8..12].try_into().unwrap());
        let mut b = header(NLMSG_HDRLEN + body.len(), 2, flags, seq);
        b.extend_from_slice(&body);
        b
    }

    fn done(seq: u32, flags: u16) -> Vec<u8> {
        let mut b = header(NLMSG_HDRLEN + 4, 3, NLM_F_MULTIPART | flags, seq);
        b.extend_from_slice(&0i32.to_ne_bytes());
        b
    }

    fn all(buf: &[u8]) -> Result<Vec<Incoming>, NftError> {
        let mut out = Vec::new();
        let end = walk(buf, &mut |m| {
            out.push(m);
            Ok(ControlFlow::Continue(()))
        })?;
        assert!(end.is_continue());
        Ok(out)
    }

    #[test]
    fn a_datagram_is_walked_message_by_message_then_drained() {
        let mut d = table("a", NLM_F_MULTIPART, 5);
        d.extend(table("nodeportd", NLM_F_MULTIPART, 5));
        d.extend(done(5, NLM_F_DUMP_INTR));
        let got = all(&d).unwrap();
        assert_eq!(got.len(), 4, "{got:?}");
        let Incoming::Msg(h, m) = &got[1] else { panic!("{got:?}") };
        assert_eq!((h.sequence_number, m.kind()), (5, Some(MsgType::NewTable)));
        assert_eq!(m.attrs.str_of(1).unwrap().as_deref(), Some("nodeportd"));
        assert_eq!(got[2], Incoming::Done { seq: 5, interrupted: true });
        assert_eq!(got[3], Incoming::Drained);
        assert_eq!(got[0].seq(), Some(5));
        assert_eq!(Incoming::Drained.seq(), None);
        // An empty NLMSG_DONE (the kernel allows it) ends a dump too.
        assert_eq!(all(&header(16, 3, 0, 9)).unwrap()[0], Incoming::Done { seq: 9, interrupted: false });
    }

    #[test]
    fn errors_are_acks_or_refusals_with_the_extended_ack() {
        let req = table("t", NLM_F_REQUEST, 41);
        assert_eq!(all(&error(0, &req, true, &[])).unwrap()[0], Incoming::Ack(41));
        let tlvs =
            [Attr::str(NLMSGERR_ATTR_MSG, "no such chain"), Attr::bytes(NLMSGERR_ATTR_OFFS, 24u32.to_ne_bytes())];
        let want = Incoming::Refused {
            seq: 41,
            errno: libc::ENOENT,
            ext: ExtAck { msg: Some("no such chain".into()), offset: Some(24) },
        };
        // Capped (the nf_tables socket) and uncapped echoes (ctnetlink) alike.
        assert_eq!(all(&error(-libc::ENOENT, &req, true, &tlvs)).unwrap()[0], want);
        assert_eq!(all(&error(-libc::ENOENT, &req, false, &tlvs)).unwrap()[0], want);
        let plain = all(&error(-libc::EPERM, &req, false, &[])).unwrap();
        assert_eq!(plain[0], Incoming::Refused { seq: 41, errno: libc::EPERM, ext: ExtAck::default() });
    }

    #[test]
    fn a_break_stops_the_walk_and_the_loop() {
        let mut d = table("a", 0, 1);
        d.extend(error(0, &table("b", NLM_F_REQUEST, 2), true, &[]));
        d.extend(table("c", 0, 3));
        let mut script = VecDeque::from([Ok(d), Ok(table("never", 0, 4))]);
        let mut seen = Vec::new();
        run(&mut script, &mut |m| {
            seen.push(m.seq());
            Ok(match m {
                Incoming::Ack(_) => ControlFlow::Break(()),
                _ => ControlFlow::Continue(()),
            })
        })
        .unwrap();
        assert_eq!(seen, vec![Some(1), Some(2)]);
        assert_eq!(script.len(), 1, "the second datagram stays unread");
    }

    #[test]
    fn the_loop_reads_datagrams_until_the_caller_is_done() {
        let mut script =
            VecDeque::from([Ok(table("a", NLM_F_MULTIPART, 7)), Ok(table("b", NLM_F_MULTIPART, 7)), Ok(done(7, 0))]);
        let mut names = Vec::new();
        run(&mut script, &mut |m| match m {
            Incoming::Msg(_, m) => {
                names.push(m.attrs.str_of(1).unwrap().unwrap());
                Ok(ControlFlow::Continue(()))
            }
            Incoming::Done { .. } => Ok(ControlFlow::Break(())),
            _ => Ok(ControlFlow::Continue(())),
        })
        .unwrap();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn an_overrun_goes_to_the_caller_and_other_errors_end_the_loop() {
        let mut script = VecDeque::from([enobufs(), Ok(table("a", 0, 0))]);
        let mut seen = Vec::new();
        run(&mut script, &mut |m| {
            let stop = matches!(m, Incoming::Msg(..));
            seen.push(m);
            Ok(if stop { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
        })
        .unwrap();
        assert!(matches!(seen.as_slice(), [Incoming::Overrun, Incoming::Msg(..)]), "{seen:?}");
        // The caller may stop at an overrun (the event stream does).
        let mut script = VecDeque::from([enobufs(), Ok(table("never", 0, 0))]);
        run(&mut script, &mut |m| {
            assert_eq!(m, Incoming::Overrun);
            Ok(ControlFlow::Break(()))
        })
        .unwrap();
        assert_eq!(script.len(), 1);
        // Any other socket error ends the loop as it is.
        let mut script =
            VecDeque::from([Err(NftError::Io { op: "recvmsg", source: io::Error::from_raw_os_error(libc::EBADF) })]);
        let e = run(&mut script, &mut |_| Ok(ControlFlow::Continue(()))).unwrap_err();
        assert!(matches!(&e, NftError::Io { source, .. } if source.raw_os_error() == Some(libc::EBADF)), "{e}");
        // And so does the caller's own error.
        let mut script = VecDeque::from([Ok(table("a", 0, 0)), Ok(table("never", 0, 0))]);
        let e = run(&mut script, &mut |_| Err(NftError::Decode("mine".into()))).unwrap_err();
        assert_eq!(e.to_string(), "nf_tables: cannot parse kernel message: mine");
        assert_eq!(script.len(), 1);
    }

    #[test]
    fn truncated_input_is_a_clear_error_never_a_panic() {
        let mut d = table("nodeportd", 0, 1);
        d.extend(error(-libc::ENOENT, &table("t", NLM_F_REQUEST, 2), false, &[Attr::str(1, "why")]));
        d.extend(done(3, 0));
        for cut in 1..d.len() {
            // Whatever is cut off, the walk neither panics nor reads past the end.
            let _ = all(&d[..cut]);
        }
        let e = all(&d[..10]).unwrap_err().to_string();
        assert!(e.contains("truncated: the message at offset 0 says 0 bytes, 10 are left"), "{e}");
        let first = table("nodeportd", 0, 1).len();
        let e = all(&d[..first + 20]).unwrap_err().to_string();
        let second = d.len() - first - done(3, 0).len();
        assert!(e.contains(&format!("at offset {first} says {second} bytes, 20 are left")), "{e}");
        // A length shorter than a header cannot make the walk go round forever.
        let mut zero = header(0, 16, 0, 1);
        zero.extend_from_slice(&[0; 4]);
        assert!(all(&zero).unwrap_err().to_string().contains("says 0 bytes, 20 are left"));
        // A message too short for nfgenmsg is named, not read.
        let e = all(&header(16, MsgType::NewTable.nlmsg_type(), 0, 1)).unwrap_err().to_string();
        assert!(e.contains("shorter than nfgenmsg"), "{e}");
    }
}
