//! The native ubus object `nodeportd`: the daemon registers it with ubusd itself, answers
//! its methods with the socket API's request handler, and sends events.
//!
//! `blob` and `msg` are the wire format (pure), `object` the method table (pure), `conn`
//! the connection to ubusd on the event loop (reconnecting with backoff).

pub mod blob;
pub mod conn;
pub mod msg;
pub mod object;

use std::cell::RefCell;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::rc::Rc;

use serde_json::{Map, Value};
use tokio::sync::Notify;

use crate::api::rpc::RpcError;

/// Where ubusd listens on OpenWrt since 21.02, and before.
pub const DEFAULT_SOCKETS: [&str; 2] = ["/var/run/ubus/ubus.sock", "/var/run/ubus.sock"];

/// The `ubus` config key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Setting {
    /// Connect to ubusd at its usual socket if there is one; keep checking quietly.
    Auto,
    Off,
    /// This socket; failing to reach it is logged.
    Path(PathBuf),
}

impl Setting {
    pub fn parse(s: &str) -> Result<Setting, String> {
        match s.trim() {
            "auto" => Ok(Setting::Auto),
            "off" => Ok(Setting::Off),
            p if p.starts_with('/') => Ok(Setting::Path(PathBuf::from(p))),
            _ => Err("one of \"auto\", \"off\" or the absolute path of ubusd's socket".into()),
        }
    }
}

impl std::fmt::Display for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Setting::Auto => f.write_str("auto"),
            Setting::Off => f.write_str("off"),
            Setting::Path(p) => write!(f, "{}", p.display()),
        }
    }
}

/// What the object's methods call: the socket API's request handler (a write waits for
/// the store, so the answer comes later).
pub type Call = Rc<dyn Fn(&str, Value) -> futures::future::LocalBoxFuture<'static, Result<Value, RpcError>>>;

/// A ubus event: `ubus listen ID` shows `{ "ID": DATA }`.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: &'static str,
    pub data: Map<String, Value>,
}

pub const SERVICE_EVENT: &str = "nodeportd.service";
pub const SYNC_EVENT: &str = "nodeportd.sync";

/// How many events may wait for the connection; more are dropped (events are not
/// replayed after a reconnection either: ubus delivers only to current listeners).
const QUEUE: usize = 64;

/// Events on their way to ubusd. Everything runs on the event loop's one thread, so a
/// queue and a `Notify` do what a channel would, with less code on flash.
#[derive(Default)]
pub struct Queue {
    items: RefCell<VecDeque<Event>>,
    ready: Notify,
}

impl Queue {
    pub fn pop(&self) -> Option<Event> {
        self.items.borrow_mut().pop_front()
    }

    /// Drop what is queued (nobody to deliver it to).
    pub fn clear(&self) {
        self.items.borrow_mut().clear();
    }

    /// Wait until something was queued (a push before the wait counts).
    pub async fn ready(&self) {
        self.ready.notified().await
    }
}

/// Where the daemon sends events. Cheap to clone; does nothing when ubus is off.
#[derive(Clone, Default)]
pub struct Events {
    queue: Option<Rc<Queue>>,
}

impl Events {
    /// A sink that drops everything (ubus off, tests).
    pub fn off() -> Events {
        Events { queue: None }
    }

    /// A sink and the queue `conn::run` takes.
    pub fn channel() -> (Events, Rc<Queue>) {
        let q = Rc::new(Queue::default());
        (Events { queue: Some(q.clone()) }, q)
    }

    /// Whether events go anywhere (ubus is not off).
    pub fn enabled(&self) -> bool {
        self.queue.is_some()
    }

    /// Queue an event without waiting: a slow or absent ubusd never holds up the daemon.
    pub fn send(&self, ev: Event) {
        if let Some(q) = &self.queue {
            let mut items = q.items.borrow_mut();
            if items.len() >= QUEUE {
                log::debug!("ubus: event queue full; an event was dropped");
                return;
            }
            items.push_back(ev);
            q.ready.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setting_parses_and_prints() {
        assert_eq!(Setting::parse("auto"), Ok(Setting::Auto));
        assert_eq!(Setting::parse("off"), Ok(Setting::Off));
        assert_eq!(Setting::parse("/tmp/u.sock"), Ok(Setting::Path("/tmp/u.sock".into())));
        assert!(Setting::parse("yes").is_err());
        assert!(Setting::parse("relative/u.sock").is_err());
        assert!(Setting::parse("").is_err());
        for s in ["auto", "off", "/var/run/ubus/ubus.sock"] {
            assert_eq!(Setting::parse(s).unwrap().to_string(), s);
        }
    }

    #[test]
    fn a_full_queue_drops_instead_of_waiting() {
        let (ev, q) = Events::channel();
        for _ in 0..QUEUE + 10 {
            ev.send(Event { id: SYNC_EVENT, data: Map::new() });
        }
        let mut n = 0;
        while q.pop().is_some() {
            n += 1;
        }
        assert_eq!(n, QUEUE);
        Events::off().send(Event { id: SYNC_EVENT, data: Map::new() });
    }
}
