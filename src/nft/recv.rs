//! The one receive loop of every nfnetlink socket: nf_tables requests
//! ([`super::NftSocket`]), nf_tables change events ([`super::EventStream`]) and
//! ctnetlink (`crate::conntrack`).
//!
//! [`receive`] reads datagrams, [`walk`] splits each into netlink messages and
//! sorts them into [`Incoming`]: a subsystem message, an acknowledgement, a
//! refusal (with the kernel's extended ack), the end of a dump, or a receive
//! buffer overrun. What a message means is the caller's business: its closure
//! decides whether to go on or stop with a value.

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

/// What a caller's closure answers for each [`Incoming`].
pub type Step<T> = Result<ControlFlow<T>, NftError>;

/// Where datagrams come from: a tokio socket, one with a deadline, or a
/// blocking socket (ctnetlink, off the event loop).
pub trait Datagrams {
    /// The next datagram. An [`NftError::Io`] with `ENOBUFS` is an overrun.
    fn next(&mut self) -> impl Future<Output = Result<Vec<u8>, NftError>>;
}

impl Datagrams for TokioSocket {
    async fn next(&mut self) -> Result<Vec<u8>, NftError> {
        self.recv_from_full().await.map(|(d, _)| d).map_err(|source| NftError::Io { op: "recvmsg", source })
    }
}

/// A tokio socket whose datagrams must come before `deadline`, else
/// [`NftError::Timeout`] (its `waiting_for` is the caller's to fill in).
pub struct Deadline<'a> {
    pub sock: &'a mut TokioSocket,
    pub at: tokio::time::Instant,
}

impl Datagrams for Deadline<'_> {
    async fn next(&mut self) -> Result<Vec<u8>, NftError> {
        tokio::time::timeout_at(self.at, self.sock.next()).await.map_err(|_| NftError::Timeout { waiting_for: 0 })?
    }
}

impl Datagrams for netlink_sys::Socket {
    fn next(&mut self) -> impl Future<Output = Result<Vec<u8>, NftError>> {
        // Blocks in recvmsg, so the future is ready when made.
        std::future::ready(
            self.recv_from_full().map(|(d, _)| d).map_err(|source| NftError::Io { op: "recvmsg", source }),
        )
    }
}

/// Reads datagrams from `src` and hands every message to `on` until it
/// breaks with a value or fails. Overruns are handed to `on` too.
pub async fn receive<S, T>(src: &mut S, mut on: impl FnMut(Incoming) -> Step<T>) -> Result<T, NftError>
where
    S: Datagrams + ?Sized,
{
    let mut out = None;
    // One non-generic walker for every caller: the value travels through `out`.
    let mut each = |m: Incoming| -> Step<()> {
        Ok(match on(m)? {
            ControlFlow::Break(t) => {
                out = Some(t);
                ControlFlow::Break(())
            }
            ControlFlow::Continue(()) => ControlFlow::Continue(()),
        })
    };
    loop {
        let step = match src.next().await {
            Ok(data) => walk(&data, &mut each)?,
            Err(NftError::Io { source, .. }) if source.raw_os_error() == Some(libc::ENOBUFS) => {
                each(Incoming::Overrun)?
            }
            Err(e) => return Err(e),
        };
        if step.is_break() {
            break;
        }
    }
    out.ok_or_else(|| NftError::Decode("receive loop stopped without a value".into()))
}

/// [`receive`] on a blocking source (a [`netlink_sys::Socket`]), for callers
/// off the event loop.
pub fn receive_blocking<S, T>(src: &mut S, on: impl FnMut(Incoming) -> Step<T>) -> Result<T, NftError>
where
    S: Datagrams + ?Sized,
{
    let fut = pin!(receive(src, on));
    // A blocking source's datagrams are ready futures (it blocks in recvmsg),
    // so one poll runs the loop to its end; nothing ever needs waking.
    match fut.poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(r) => r,
        Poll::Pending => {
            Err(NftError::Io { op: "recvmsg", source: io::Error::other("a blocking receive was suspended") })
        }
    }
}

/// Splits one datagram into messages and hands each to `on`, then
/// [`Incoming::Drained`]. A length that does not fit the datagram is an error
/// naming the offset; nothing is read out of bounds.
pub fn walk(buf: &[u8], on: &mut dyn FnMut(Incoming) -> Step<()>) -> Step<()> {
    let mut off = 0;
    while off < buf.len() {
        let rest = &buf[off..];
        let Some(len) = rest.get(..NLMSG_HDRLEN).and_then(|h| h[..4].try_into().ok()).map(u32::from_ne_bytes) else {
            return Err(NftError::Decode(format!(
                "netlink datagram truncated: {} bytes at offset {off}, shorter than a message header ({NLMSG_HDRLEN})",
                rest.len()
            )));
        };
        let len = len as usize;
        if len < NLMSG_HDRLEN || len > rest.len() {
            return Err(NftError::Decode(format!(
                "netlink message at offset {off} says it has {len} bytes; the datagram has {} left",
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

    /// Datagrams from memory, ready at once like a blocking socket's.
    struct Script(VecDeque<Result<Vec<u8>, NftError>>);

    impl Datagrams for Script {
        fn next(&mut self) -> impl Future<Output = Result<Vec<u8>, NftError>> {
            std::future::ready(self.0.pop_front().unwrap_or_else(|| {
                Err(NftError::Io { op: "recvmsg", source: io::Error::from(io::ErrorKind::UnexpectedEof) })
            }))
        }
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
        let mut src = Script(VecDeque::from([Ok(d), Ok(table("never", 0, 4))]));
        let mut seen = Vec::new();
        let r = receive_blocking(&mut src, |m| {
            seen.push(m.seq());
            Ok(match m {
                Incoming::Ack(seq) => ControlFlow::Break(seq),
                _ => ControlFlow::Continue(()),
            })
        });
        assert_eq!(r.unwrap(), 2);
        assert_eq!(seen, vec![Some(1), Some(2)]);
        assert_eq!(src.0.len(), 1, "the second datagram stays unread");
    }

    #[test]
    fn the_loop_reads_datagrams_until_the_caller_is_done() {
        let mut src = Script(VecDeque::from([
            Ok(table("a", NLM_F_MULTIPART, 7)),
            Ok(table("b", NLM_F_MULTIPART, 7)),
            Ok(done(7, 0)),
        ]));
        let mut names = Vec::new();
        let r = receive_blocking(&mut src, |m| match m {
            Incoming::Msg(_, m) => {
                names.push(m.attrs.str_of(1).unwrap().unwrap());
                Ok(ControlFlow::Continue(()))
            }
            Incoming::Done { .. } => Ok(ControlFlow::Break(())),
            _ => Ok(ControlFlow::Continue(())),
        });
        r.unwrap();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn an_overrun_goes_to_the_caller_and_other_errors_end_the_loop() {
        let mut src = Script(VecDeque::from([enobufs(), Ok(table("a", 0, 0))]));
        let mut overruns = 0;
        let r = receive_blocking(&mut src, |m| match m {
            Incoming::Overrun => {
                overruns += 1;
                Ok(ControlFlow::Continue(()))
            }
            Incoming::Msg(..) => Ok(ControlFlow::Break("after the overrun")),
            _ => Ok(ControlFlow::Continue(())),
        });
        assert_eq!((r.unwrap(), overruns), ("after the overrun", 1));
        // The caller may stop at an overrun with its own value (the event stream does).
        let mut src = Script(VecDeque::from([enobufs()]));
        assert_eq!(receive_blocking(&mut src, |m| Ok(ControlFlow::Break(m))).unwrap(), Incoming::Overrun);
        // Any other socket error ends the loop as it is.
        let mut src = Script(VecDeque::new());
        let e = receive_blocking(&mut src, |_| Ok(ControlFlow::<()>::Continue(()))).unwrap_err();
        assert!(matches!(e, NftError::Io { op: "recvmsg", .. }), "{e}");
        // And so does the caller's own error.
        let mut src = Script(VecDeque::from([Ok(table("a", 0, 0))]));
        let e = receive_blocking(&mut src, |_| Err::<ControlFlow<()>, _>(NftError::Decode("mine".into()))).unwrap_err();
        assert_eq!(e.to_string(), "nf_tables: cannot parse kernel message: mine");
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
        assert!(e.contains("truncated: 10 bytes at offset 0"), "{e}");
        let first = table("nodeportd", 0, 1).len();
        let e = all(&d[..first + 20]).unwrap_err().to_string();
        assert!(e.contains(&format!("at offset {first} says it has")), "{e}");
        // A length shorter than a header cannot make the walk go round forever.
        let mut zero = header(0, 16, 0, 1);
        zero.extend_from_slice(&[0; 4]);
        assert!(all(&zero).unwrap_err().to_string().contains("says it has 0 bytes"));
        // A message too short for nfgenmsg is named, not read.
        let e = all(&header(16, MsgType::NewTable.nlmsg_type(), 0, 1)).unwrap_err().to_string();
        assert!(e.contains("shorter than nfgenmsg"), "{e}");
    }
}
