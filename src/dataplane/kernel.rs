//! The kernel as the data plane worker sees it: our nf_tables socket and the event
//! socket that tells when someone else changed our table.

use crate::nft::lower::{LowerError, Op};
use crate::nft::{self, EventStream, NftError, NftSocket, TableEvent, TxStats};

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

    /// The next change to our table someone else made (never, without an event socket:
    /// one that fails is dropped).
    pub async fn next_event(&mut self) -> TableEvent {
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

    /// Stops notifications for our own transactions (the kernel then builds none);
    /// false when there is no event socket.
    pub fn mute(&mut self) -> bool {
        match self.events.as_mut().map(EventStream::mute) {
            Some(Ok(())) => true,
            Some(Err(e)) => {
                self.drop_events(e);
                false
            }
            None => false,
        }
    }

    pub fn unmute(&mut self) {
        if let Some(Err(e)) = self.events.as_mut().map(EventStream::unmute) {
            self.drop_events(e);
        }
    }

    pub async fn transact(&mut self, ops: &[Op]) -> Result<TxStats, NftError> {
        self.sock.transact(ops, None).await
    }

    pub async fn transact_with<G>(&mut self, gen: G) -> Result<TxStats, NftError>
    where
        G: Fn(&mut dyn FnMut(Op)) -> Result<(), LowerError>,
    {
        self.sock.transact_with(None, gen).await
    }

    pub async fn list_table(&mut self, table: &str) -> Result<Option<nft::list::KernelTable>, NftError> {
        nft::list::list_table(&mut self.sock, NFPROTO_INET, table).await
    }

    pub async fn generation(&mut self) -> Result<u32, NftError> {
        self.sock.generation().await
    }
}
