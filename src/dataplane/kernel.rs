//! The kernel as the data plane worker sees it ([`Kernel`]): one atomic batch, a
//! listing of our table, the ruleset generation, and the events that say someone else
//! changed our table. [`Netlink`] is the real one (the nf_tables and event sockets);
//! tests use an in-memory fake that applies batches the way the kernel does
//! (`dataplane::fake`, test builds only).

use std::future::Future;

use crate::nft::list::KernelTable;
use crate::nft::lower::{LowerError, Op};
use crate::nft::{self, EventStream, NftError, NftSocket, TableEvent, TxStats};

/// What the data plane worker needs of the kernel.
pub trait Kernel {
    /// Sends `ops` as one atomic batch: all applied, or none.
    fn transact(&mut self, ops: &[Op]) -> impl Future<Output = Result<TxStats, NftError>>;
    /// [`Kernel::transact`] for messages `gen` hands to its sink one at a time (a full
    /// sync: the messages never exist all at once). `gen` must yield the same messages
    /// each time it is called.
    fn transact_with<G>(&mut self, gen: G) -> impl Future<Output = Result<TxStats, NftError>>
    where
        G: Fn(&mut dyn FnMut(Op)) -> Result<(), LowerError>;
    /// Our table (`inet TABLE`) as the kernel has it; `None` when it does not exist.
    fn list_table(&mut self, table: &str) -> impl Future<Output = Result<Option<KernelTable>, NftError>>;
    /// The ruleset generation: every commit by anyone moves it by one.
    fn generation(&mut self) -> impl Future<Output = Result<u32, NftError>>;
    /// The next change to our table someone else made, or a lost-events mark
    /// ([`TableEvent::Overrun`]). Never resolves without an event source.
    fn next_event(&mut self) -> impl Future<Output = TableEvent>;
    /// Stops notifications for our own transactions; false when there are no events.
    fn mute(&mut self) -> bool;
    fn unmute(&mut self);
}

/// `NFPROTO_INET`: the family of our table.
pub const NFPROTO_INET: u8 = 1;

/// The real kernel: an nf_tables socket and, when the kernel lets us listen, the
/// event socket.
pub struct Netlink {
    sock: NftSocket,
    events: Option<EventStream>,
}

impl Netlink {
    pub fn open(table: &str) -> Result<Netlink, String> {
        let sock = NftSocket::new().map_err(|e| format!("cannot open the nf_tables netlink socket: {e}"))?;
        let events = match EventStream::new(NFPROTO_INET, table) {
            Ok(mut ev) => {
                ev.ignore_socket(&sock);
                Some(ev)
            }
            Err(e) => {
                log::warn!("cannot listen to nf_tables events ({e}); drift is repaired by the resync timer only");
                None
            }
        };
        Ok(Netlink { sock, events })
    }

    fn drop_events(&mut self, e: impl std::fmt::Display) {
        log::warn!("nf_tables event socket: {e}; relying on the resync timer");
        self.events = None;
    }
}

impl Kernel for Netlink {
    async fn next_event(&mut self) -> TableEvent {
        loop {
            match &mut self.events {
                Some(ev) => match ev.next_event().await {
                    Ok(e) => return e,
                    Err(e) => self.drop_events(e),
                },
                None => std::future::pending::<()>().await,
            }
        }
    }

    fn mute(&mut self) -> bool {
        match self.events.as_mut().map(EventStream::mute) {
            Some(Ok(())) => true,
            Some(Err(e)) => {
                self.drop_events(e);
                false
            }
            None => false,
        }
    }

    fn unmute(&mut self) {
        if let Some(Err(e)) = self.events.as_mut().map(EventStream::unmute) {
            self.drop_events(e);
        }
    }

    // The socket's own futures, not wrapped in one more state machine each (flash).
    fn transact(&mut self, ops: &[Op]) -> impl Future<Output = Result<TxStats, NftError>> {
        self.sock.transact(ops, None)
    }

    fn transact_with<G>(&mut self, gen: G) -> impl Future<Output = Result<TxStats, NftError>>
    where
        G: Fn(&mut dyn FnMut(Op)) -> Result<(), LowerError>,
    {
        self.sock.transact_with(None, gen)
    }

    fn list_table(&mut self, table: &str) -> impl Future<Output = Result<Option<KernelTable>, NftError>> {
        nft::list::list_table(&mut self.sock, NFPROTO_INET, table)
    }

    fn generation(&mut self) -> impl Future<Output = Result<u32, NftError>> {
        self.sock.generation()
    }
}
