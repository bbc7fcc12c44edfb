//! nf_tables change events (`NFNLGRP_NFTABLES`): tells the daemon when someone
//! else changed or deleted our table, so it can resync at once.
//!
//! The kernel sends one message per changed object during a commit, then
//! `NFT_MSG_NEWGEN` naming the process that committed. We remember whether a
//! commit touched our table and report it at its `NEWGEN`, unless it was ours
//! (our own syncs are not news): sent from a socket we were told about, or by
//! a thread of this process (`NFTA_GEN_PROC_PID` is the committing task's id).

use std::ops::ControlFlow;

use futures::Stream;
use netlink_sys::{protocols::NETLINK_NETFILTER, AsyncSocket, TokioSocket};

use super::error::NftError;
use super::recv::{receive, Incoming, Source};
use super::wire::{self, AttrList, MsgType, NfMsg};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableEvent {
    /// Another process changed our table (`deleted`: the table itself is gone).
    Changed { deleted: bool, generation: u32, by_pid: u32, by_name: Option<String> },
    /// Events were lost (socket buffer overrun): state unknown, resync.
    Overrun,
}

/// Receive buffer for the event socket.
const EVENT_RCVBUF: usize = 4 << 20;

pub struct EventStream {
    sock: TokioSocket,
    seen: Seen,
}

/// What the stream has seen of the commits in flight, and the events not yet taken.
struct Seen {
    family: u8,
    table: String,
    own_portids: Vec<u32>,
    touched: bool,
    deleted: bool,
    queue: std::collections::VecDeque<TableEvent>,
}

impl EventStream {
    /// Subscribes (in the caller's network namespace) to changes of `family table`.
    pub fn new(family: u8, table: &str) -> Result<Self, NftError> {
        let io = |op| move |source| NftError::Io { op, source };
        let mut sock = TokioSocket::new(NETLINK_NETFILTER).map_err(io("socket"))?;
        sock.socket_mut().bind_auto().map_err(io("bind"))?;
        sock.socket_mut().add_membership(wire::NFNLGRP_NFTABLES).map_err(io("join NFNLGRP_NFTABLES"))?;
        // A full sync of a big table notifies every object it replaces; a small buffer
        // overruns on our own commits. Best effort: the kernel caps it at rmem_max.
        let _ = sock.socket_mut().set_rx_buf_sz(EVENT_RCVBUF);
        Ok(EventStream {
            sock,
            seen: Seen {
                family,
                table: table.to_string(),
                own_portids: Vec::new(),
                touched: false,
                deleted: false,
                queue: Default::default(),
            },
        })
    }

    /// Leaves the nf_tables multicast group for the time of a commit of our own.
    ///
    /// While anyone listens to `NFNLGRP_NFTABLES`, the kernel builds one notification (a
    /// page-sized buffer) for every object of a commit and holds them all until the commit
    /// ends: a full sync of 1 000 services x 3 endpoints ran a 256 MiB router out of memory
    /// inside `nf_tables_commit`. With no listener it builds none. Whatever others commit
    /// meanwhile goes unseen: compare the ruleset generation before and after instead.
    pub fn mute(&mut self) -> Result<(), NftError> {
        self.sock
            .socket_mut()
            .drop_membership(wire::NFNLGRP_NFTABLES)
            .map_err(|source| NftError::Io { op: "leave NFNLGRP_NFTABLES", source })
    }

    /// Joins the group again after [`EventStream::mute`].
    pub fn unmute(&mut self) -> Result<(), NftError> {
        self.sock
            .socket_mut()
            .add_membership(wire::NFNLGRP_NFTABLES)
            .map_err(|source| NftError::Io { op: "join NFNLGRP_NFTABLES", source })
    }

    /// Treats commits sent through `sock` as ours (never reported).
    pub fn ignore_socket(&mut self, sock: &super::NftSocket) {
        self.seen.own_portids.push(sock.portid());
    }

    /// Waits for the next event about our table.
    pub async fn next_event(&mut self) -> Result<TableEvent, NftError> {
        if let Some(e) = self.seen.queue.pop_front() {
            return Ok(e);
        }
        let seen = &mut self.seen;
        let mut event = None;
        let got = receive(Source::Tokio(&mut self.sock, None), &mut |m| {
            match m {
                Incoming::Msg(h, m) => seen.feed(h.port_number, m),
                Incoming::Overrun => {
                    seen.touched = false;
                    event = Some(TableEvent::Overrun);
                }
                // Every message of the datagram is fed before the first event is taken.
                Incoming::Drained => event = seen.queue.pop_front(),
                _ => {}
            }
            Ok(if event.is_some() { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
        })
        .await;
        match got {
            // The loop stops only with an event; should it not, the state is unknown: resync.
            Ok(()) => Ok(event.unwrap_or(TableEvent::Overrun)),
            Err(NftError::Io { source, .. }) => Err(NftError::Io { op: "recv events", source }),
            Err(e) => Err(e),
        }
    }

    /// The same as a `Stream`, for `select!` loops and combinators.
    pub fn into_stream(self) -> impl Stream<Item = Result<TableEvent, NftError>> {
        futures::stream::unfold(self, |mut s| async move {
            let e = s.next_event().await;
            Some((e, s))
        })
    }
}

impl Seen {
    fn ours(&self, portid: u32, pid: u32) -> bool {
        self.own_portids.contains(&portid)
            || pid == std::process::id()
            || std::path::Path::new(&format!("/proc/self/task/{pid}")).exists()
    }

    fn concerns_us(&self, m: &NfMsg) -> bool {
        // Every object message names its table in attribute 1
        // (NFTA_TABLE_NAME, NFTA_CHAIN_TABLE, NFTA_RULE_TABLE, NFTA_SET_TABLE,
        // NFTA_SET_ELEM_LIST_TABLE).
        m.family == self.family && m.attrs.str_of(1).ok().flatten().as_deref() == Some(self.table.as_str())
    }

    fn feed(&mut self, portid: u32, m: NfMsg) {
        match m.kind() {
            Some(MsgType::NewGen) => {
                let by_pid = m.attrs.u32_of(wire::gen::PROC_PID).ok().flatten().unwrap_or(0);
                if self.touched && !self.ours(portid, by_pid) {
                    self.queue.push_back(TableEvent::Changed {
                        deleted: self.deleted,
                        generation: m.attrs.u32_of(wire::gen::ID).ok().flatten().unwrap_or(0),
                        by_pid,
                        by_name: m.attrs.str_of(wire::gen::PROC_NAME).ok().flatten(),
                    });
                }
                self.touched = false;
                self.deleted = false;
            }
            Some(MsgType::DelTable) if self.concerns_us(&m) => {
                self.touched = true;
                self.deleted = true;
            }
            Some(MsgType::NewTable) if self.concerns_us(&m) => {
                self.touched = true;
                self.deleted = false;
            }
            Some(_) if self.concerns_us(&m) => self.touched = true,
            _ => {}
        }
    }
}
