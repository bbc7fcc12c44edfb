//! An in-memory nf_tables for tests (compiled into test builds only): it applies our
//! batches the way the kernel does, so the sync and self-heal logic can be tested
//! without root.
//!
//! - A batch is transactional: every message is checked against the state the earlier
//!   messages of the batch left, and one refused message leaves nothing applied.
//! - Messages are read from their wire form (each is serialized and parsed back), as
//!   the kernel reads them.
//! - Dangling references are refused as the kernel refuses them: an object in a missing
//!   table, a rule in a missing chain, a lookup of a missing set, a jump (rule or
//!   verdict element) to a missing chain, deleting a missing object or element →
//!   `ENOENT`; adding an existing object or element with `NLM_F_EXCL`, a set that
//!   exists with another type, an element that exists with other data → `EEXIST`; a
//!   base chain that exists with another hook → `EOPNOTSUPP`; deleting a chain
//!   something jumps to, or a set a rule looks up → `EBUSY`. A test checks each of
//!   these answers, and the listings after them, against the real kernel.
//! - Tests can inject faults: a refused batch with any errno (`EBUSY`: another
//!   transaction was in the way, `ENOENT`: the table went away meanwhile), a foreign
//!   commit reported by an event, one whose events were lost (socket buffer overrun), or
//!   one that lands while our own transaction runs with the events muted.
//!
//! Modelled on knftables' `Fake` (kubernetes-sigs/knftables), at the netlink level.

use std::collections::{BTreeMap, VecDeque};

use netlink_packet_core::{Emitable, NLM_F_APPEND, NLM_F_EXCL};

use super::kernel::{Kernel, NFPROTO_INET};
use crate::nft::error::KernelError;
use crate::nft::expr::{self, Data, Expr};
use crate::nft::list::{self, KernelChain, KernelElement, KernelRule, KernelSet, KernelTable};
use crate::nft::lower::{self, LowerError, Op};
use crate::nft::wire::{self, Attr, AttrList, MsgType};
use crate::nft::{NftError, TableEvent, TxStats};

#[derive(Debug, Clone)]
struct Chain {
    name: String,
    hook: Option<(u32, i32, String)>,
    rules: Vec<KernelRule>,
}

#[derive(Debug, Clone)]
struct Set {
    name: String,
    flags: u32,
    key_type: u32,
    key_len: u32,
    data_type: Option<u32>,
    /// By key and interval-end flag.
    elements: BTreeMap<(Vec<u8>, bool), KernelElement>,
    /// Chains the verdict elements jump to, by element.
    jumps: BTreeMap<(Vec<u8>, bool), String>,
}

impl Set {
    fn anonymous(&self) -> bool {
        self.flags & wire::set::F_ANONYMOUS != 0
    }
}

#[derive(Debug, Clone, Default)]
struct Table {
    chains: Vec<Chain>,
    sets: Vec<Set>,
}

impl Table {
    fn chain(&mut self, name: &str) -> Option<&mut Chain> {
        self.chains.iter_mut().find(|c| c.name == name)
    }
    fn set(&mut self, name: &str) -> Option<&mut Set> {
        self.sets.iter_mut().find(|s| s.name == name)
    }
    /// Whether a rule or a verdict element jumps to `chain`.
    fn chain_in_use(&self, chain: &str) -> bool {
        let by_rule = self.chains.iter().filter(|c| c.name != chain).flat_map(|c| &c.rules).any(|r| {
            r.exprs.iter().any(
                |e| matches!(e, Expr::Immediate { data: Data::Verdict(v), .. } if v.chain.as_deref() == Some(chain)),
            )
        });
        by_rule || self.sets.iter().any(|s| s.jumps.values().any(|c| c == chain))
    }
    fn set_in_use(&self, set: &str) -> bool {
        self.chains.iter().flat_map(|c| &c.rules).any(|r| rule_sets(r).any(|s| s == set))
    }
    /// Anonymous sets belong to the rule that looks them up: they go with it.
    fn drop_unbound_anonymous(&mut self) {
        let used: Vec<String> =
            self.chains.iter().flat_map(|c| &c.rules).flat_map(|r| rule_sets(r).map(str::to_string)).collect();
        self.sets.retain(|s| !s.anonymous() || used.contains(&s.name));
    }
}

fn rule_sets(r: &KernelRule) -> impl Iterator<Item = &str> {
    r.exprs.iter().filter_map(|e| match e {
        Expr::Lookup { set, .. } | Expr::Dynset { set, .. } => Some(set.as_str()),
        _ => None,
    })
}

/// How a foreign commit is reported to our event socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notify {
    /// A `TableEvent::Changed`.
    Event,
    /// The events were lost: the socket buffer overran (`TableEvent::Overrun`).
    Overrun,
    /// Nothing (no event socket, or the event group was muted).
    Silent,
}

/// The in-memory kernel.
#[derive(Debug, Default)]
pub struct Fake {
    tables: BTreeMap<(u8, String), Table>,
    generation: u32,
    next_handle: u64,
    next_anon: u32,
    /// Errnos the next batches are refused with, in order.
    faults: VecDeque<i32>,
    /// Foreign batches that commit while our next transaction runs.
    races: VecDeque<Vec<Op>>,
    events: VecDeque<TableEvent>,
    /// Whether there is an event socket (`mute` says so).
    pub has_events: bool,
    muted: bool,
    /// Our batches the fake committed, and their messages.
    pub commits: usize,
    pub messages: u64,
    /// Batches refused (injected or not).
    pub refused: usize,
    /// Listings asked for.
    pub listings: usize,
}

fn refuse(errno: i32, op: &Op, why: impl Into<String>) -> NftError {
    NftError::Rejected(vec![KernelError { errno, object: op.object.to_string(), reason: why.into(), kernel_msg: None }])
}

/// The attributes as the kernel reads them: serialized, then parsed back.
fn wire_attrs(attrs: &[Attr]) -> Vec<Attr> {
    let mut buf = vec![0u8; attrs.buffer_len()];
    attrs.emit(&mut buf);
    wire::parse_attrs(&buf).expect("attributes we serialized parse back")
}

fn dec(e: netlink_packet_core::DecodeError) -> String {
    e.to_string()
}

impl Fake {
    /// An empty kernel with an event socket.
    pub fn new() -> Self {
        Fake { has_events: true, ..Fake::default() }
    }

    /// Refuse the next batch with `errno` (nothing of it applied).
    pub fn fail_next(&mut self, errno: i32) {
        self.faults.push_back(errno);
    }

    /// Another process commits `ops` now; the event socket learns of it as `notify` says.
    pub fn foreign(&mut self, ops: &[Op], notify: Notify) {
        let deleted_before = self.tables.contains_key(&(NFPROTO_INET, self.table_of(ops)));
        self.commit(ops).unwrap_or_else(|e| panic!("foreign batch refused: {e}"));
        let deleted = deleted_before && !self.tables.contains_key(&(NFPROTO_INET, self.table_of(ops)));
        self.notify(notify, deleted);
    }

    /// Another process commits `ops` while our next transaction runs (with the event
    /// group muted: its events are lost).
    pub fn foreign_during_next(&mut self, ops: Vec<Op>) {
        self.races.push_back(ops);
    }

    /// Another process changes the table in place (what `nft` would do by hand), notified
    /// as `notify` says. `f` gets our table (`inet TABLE`), which must exist.
    pub fn tamper(&mut self, table: &str, notify: Notify, f: impl FnOnce(&mut FakeTable<'_>)) {
        let t = self.tables.get_mut(&(NFPROTO_INET, table.to_string())).expect("tamper with a table that exists");
        f(&mut FakeTable(t));
        self.generation = self.generation.wrapping_add(1);
        self.notify(notify, false);
    }

    /// Another process deletes our table.
    pub fn delete_table(&mut self, table: &str, notify: Notify) {
        self.tables.remove(&(NFPROTO_INET, table.to_string()));
        self.generation = self.generation.wrapping_add(1);
        self.notify(notify, true);
    }

    fn notify(&mut self, notify: Notify, deleted: bool) {
        match notify {
            Notify::Event if self.has_events => self.events.push_back(TableEvent::Changed {
                deleted,
                generation: self.generation,
                by_pid: 4242,
                by_name: Some("nft".into()),
            }),
            Notify::Overrun if self.has_events => {
                self.events.clear();
                self.events.push_back(TableEvent::Overrun);
            }
            _ => {}
        }
    }

    /// The event socket overran with nothing foreign in it (our own big commit did that).
    pub fn overrun(&mut self) {
        self.notify(Notify::Overrun, false);
    }

    /// Events not read yet.
    pub fn pending_events(&self) -> usize {
        self.events.len()
    }

    fn table_of(&self, ops: &[Op]) -> String {
        ops.first().and_then(msg_table).unwrap_or_default()
    }

    /// Applies one batch atomically.
    fn commit(&mut self, ops: &[Op]) -> Result<(), NftError> {
        let mut tables = self.tables.clone();
        let (mut handle, mut anon) = (self.next_handle, self.next_anon);
        // Set IDs are local to a batch.
        let mut ids: BTreeMap<u32, String> = BTreeMap::new();
        for op in ops {
            apply(&mut tables, op, &mut handle, &mut anon, &mut ids)?;
        }
        self.tables = tables;
        self.next_handle = handle;
        self.next_anon = anon;
        self.generation = self.generation.wrapping_add(1);
        Ok(())
    }

    fn our_batch(&mut self, ops: &[Op]) -> Result<TxStats, NftError> {
        if ops.is_empty() {
            // The socket sends nothing for an empty batch.
            return Ok(TxStats::default());
        }
        if let Some(race) = self.races.pop_front() {
            let muted = self.muted;
            self.foreign(&race, if muted { Notify::Silent } else { Notify::Event });
        }
        if let Some(errno) = self.faults.pop_front() {
            self.refused += 1;
            return Err(refuse(errno, &ops[0], format!("injected: {}", std::io::Error::from_raw_os_error(errno))));
        }
        match self.commit(ops) {
            Ok(()) => {
                self.commits += 1;
                self.messages += ops.len() as u64;
                Ok(TxStats { messages: ops.len(), ..TxStats::default() })
            }
            Err(e) => {
                self.refused += 1;
                Err(e)
            }
        }
    }

    /// The listing of `inet table`, as `list_table` reads it from the kernel (rule
    /// handles left out: they differ between two kernels holding the same table).
    pub fn listing(&self, table: &str) -> Option<KernelTable> {
        let t = self.tables.get(&(NFPROTO_INET, table.to_string()))?;
        Some(KernelTable {
            chains: t
                .chains
                .iter()
                .map(|c| KernelChain { name: c.name.clone(), hook: c.hook.clone(), rules: c.rules.clone() })
                .collect(),
            sets: t
                .sets
                .iter()
                .filter(|s| !s.anonymous())
                .map(|s| {
                    let mut elements: Vec<KernelElement> = s.elements.values().cloned().collect();
                    elements.sort();
                    KernelSet {
                        name: s.name.clone(),
                        flags: s.flags,
                        key_type: s.key_type,
                        key_len: s.key_len,
                        data_type: s.data_type,
                        elements,
                    }
                })
                .collect(),
        })
    }

    /// The table with its objects in name order, without rule handles and with the
    /// names the kernel chose for anonymous sets masked: equal for two kernels that hold
    /// the same table, whatever the history.
    pub fn canonical(&self, table: &str) -> Option<KernelTable> {
        self.listing(table).map(canonical)
    }
}

/// A listing (the fake's or the kernel's) in a form equal for equal tables: objects in
/// name order, no rule handles, anonymous set names masked.
pub fn canonical(mut t: KernelTable) -> KernelTable {
    t.chains.sort_by(|a, b| a.name.cmp(&b.name));
    for c in &mut t.chains {
        for r in &mut c.rules {
            r.handle = 0;
            r.exprs = r.exprs.iter().map(list::normalize).collect();
        }
    }
    t.sets.sort_by(|a, b| a.name.cmp(&b.name));
    t
}

/// Direct access to a table, to change it behind the daemon's back.
pub struct FakeTable<'a>(&'a mut Table);

impl FakeTable<'_> {
    /// Removes the element of `set` whose key is `key`; whether there was one.
    pub fn remove_element(&mut self, set: &str, pick: impl Fn(&KernelElement) -> bool) -> bool {
        let Some(s) = self.0.set(set) else { return false };
        let Some(k) = s.elements.iter().find(|(_, e)| pick(e)).map(|(k, _)| k.clone()) else { return false };
        s.elements.remove(&k);
        s.jumps.remove(&k);
        true
    }
    /// Adds an element with `key` (raw bytes) to `set`.
    pub fn add_element(&mut self, set: &str, key: Vec<u8>) {
        let s = self.0.set(set).expect("a set that exists");
        s.elements.insert((key.clone(), false), KernelElement { key, data: None, interval_end: false });
    }
    /// Adds an empty regular chain.
    pub fn add_chain(&mut self, name: &str) {
        self.0.chains.push(Chain { name: name.into(), hook: None, rules: Vec::new() });
    }
    /// Removes every rule of `chain`.
    pub fn flush_chain(&mut self, chain: &str) {
        if let Some(c) = self.0.chain(chain) {
            c.rules.clear();
        }
    }
    /// Gives base chain `chain` another priority.
    pub fn set_priority(&mut self, chain: &str, priority: i32) {
        if let Some(Chain { hook: Some(h), .. }) = self.0.chain(chain) {
            h.1 = priority;
        }
    }
    pub fn set_names(&self) -> Vec<String> {
        self.0.sets.iter().map(|s| s.name.clone()).collect()
    }
    pub fn elements(&self, set: &str) -> Vec<KernelElement> {
        self.0.sets.iter().find(|s| s.name == set).map(|s| s.elements.values().cloned().collect()).unwrap_or_default()
    }
}

/// The attribute that names the table, by message kind.
fn table_attr(kind: Option<MsgType>) -> Option<u16> {
    Some(match kind? {
        MsgType::NewTable | MsgType::DelTable => wire::table::NAME,
        MsgType::NewChain | MsgType::DelChain => wire::chain::TABLE,
        MsgType::NewRule | MsgType::DelRule => wire::rule::TABLE,
        MsgType::NewSet | MsgType::DelSet => wire::set::TABLE,
        MsgType::NewSetElem | MsgType::DelSetElem => wire::elem::LIST_TABLE,
        _ => return None,
    })
}

fn msg_table(op: &Op) -> Option<String> {
    op.msg.attrs.str_of(table_attr(op.msg.kind())?).ok().flatten()
}

fn apply(
    tables: &mut BTreeMap<(u8, String), Table>,
    op: &Op,
    handle: &mut u64,
    anon: &mut u32,
    ids: &mut BTreeMap<u32, String>,
) -> Result<(), NftError> {
    use libc::{EBUSY, EEXIST, EINVAL, ENOENT, EOPNOTSUPP};
    let excl = op.flags & NLM_F_EXCL != 0;
    let attrs = wire_attrs(&op.msg.attrs);
    let bad = |e: String| refuse(EINVAL, op, e);
    let kind = op.msg.kind().ok_or_else(|| refuse(EOPNOTSUPP, op, "not an nf_tables message"))?;
    let tname = table_attr(Some(kind))
        .and_then(|k| attrs.str_of(k).ok().flatten())
        .ok_or_else(|| refuse(EINVAL, op, "no table named"))?;
    let key = (op.msg.family, tname.clone());
    match kind {
        MsgType::NewTable => {
            match tables.entry(key) {
                std::collections::btree_map::Entry::Occupied(_) if excl => {
                    return Err(refuse(EEXIST, op, format!("table {tname} exists")))
                }
                std::collections::btree_map::Entry::Occupied(_) => {}
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(Table::default());
                }
            }
            return Ok(());
        }
        MsgType::DelTable => {
            return match tables.remove(&key) {
                Some(_) => Ok(()),
                None => Err(refuse(ENOENT, op, format!("no table {tname}"))),
            };
        }
        _ => {}
    }
    let t = tables.get_mut(&key).ok_or_else(|| refuse(ENOENT, op, format!("no table {tname}")))?;
    match kind {
        MsgType::NewChain => {
            let name = attrs.str_of(wire::chain::NAME).map_err(|e| bad(dec(e)))?.unwrap_or_default();
            let hook = match attrs.attr(wire::chain::HOOK) {
                Some(h) => {
                    let h = h.children().map_err(|e| bad(dec(e)))?;
                    Some((
                        h.u32_of(wire::chain::HOOK_HOOKNUM).map_err(|e| bad(dec(e)))?.unwrap_or(0),
                        h.u32_of(wire::chain::HOOK_PRIORITY).map_err(|e| bad(dec(e)))?.unwrap_or(0) as i32,
                        attrs.str_of(wire::chain::TYPE).map_err(|e| bad(dec(e)))?.unwrap_or_default(),
                    ))
                }
                None => None,
            };
            match t.chain(&name) {
                Some(_) if excl => return Err(refuse(EEXIST, op, format!("chain {name} exists"))),
                Some(c) if hook.is_some() && c.hook != hook => {
                    return Err(refuse(EOPNOTSUPP, op, format!("chain {name} exists with another hook")))
                }
                Some(_) => {}
                None => t.chains.push(Chain { name, hook, rules: Vec::new() }),
            }
        }
        MsgType::DelChain => {
            let name = attrs.str_of(wire::chain::NAME).map_err(|e| bad(dec(e)))?.unwrap_or_default();
            if t.chain(&name).is_none() {
                return Err(refuse(ENOENT, op, format!("no chain {name}")));
            }
            if t.chain_in_use(&name) {
                return Err(refuse(EBUSY, op, format!("chain {name} is jumped to")));
            }
            t.chains.retain(|c| c.name != name);
            t.drop_unbound_anonymous();
        }
        MsgType::NewRule => {
            let chain = attrs.str_of(wire::rule::CHAIN).map_err(|e| bad(dec(e)))?.unwrap_or_default();
            let mut exprs: Vec<Expr> = match attrs.attr(wire::rule::EXPRESSIONS) {
                Some(l) => l
                    .children()
                    .map_err(|e| bad(dec(e)))?
                    .iter()
                    .map(Expr::parse)
                    .collect::<Result<_, _>>()
                    .map_err(|e| bad(dec(e)))?,
                None => Vec::new(),
            };
            for e in &mut exprs {
                match e {
                    Expr::Lookup { set, set_id, .. } | Expr::Dynset { set, set_id, .. } => {
                        // A set of this batch is found by its ID (an anonymous set's name
                        // is the kernel's to choose), any other by name. The kernel
                        // lists the name only.
                        if let Some(name) = set_id.take().and_then(|id| ids.get(&id)) {
                            *set = name.clone();
                        }
                        if !t.sets.iter().any(|s| s.name == *set) {
                            return Err(refuse(ENOENT, op, format!("no set {set}")));
                        }
                    }
                    Expr::Immediate { data: Data::Verdict(v), .. } => {
                        if let Some(target) = &v.chain {
                            if !t.chains.iter().any(|c| c.name == *target) {
                                return Err(refuse(ENOENT, op, format!("no chain {target} to jump to")));
                            }
                        }
                    }
                    _ => {}
                }
            }
            let comment = attrs.attr(wire::rule::USERDATA).and_then(|u| lower::rule_comment(u.payload()));
            let c = t.chain(&chain).ok_or_else(|| refuse(ENOENT, op, format!("no chain {chain}")))?;
            *handle += 1;
            let rule = KernelRule { handle: *handle, exprs, comment };
            if op.flags & NLM_F_APPEND != 0 {
                c.rules.push(rule);
            } else {
                c.rules.insert(0, rule);
            }
        }
        MsgType::DelRule => {
            let chain = attrs.str_of(wire::rule::CHAIN).map_err(|e| bad(dec(e)))?.unwrap_or_default();
            let h = attrs.attr(wire::rule::HANDLE).map(Attr::as_u64).transpose().map_err(|e| bad(dec(e)))?;
            let c = t.chain(&chain).ok_or_else(|| refuse(ENOENT, op, format!("no chain {chain}")))?;
            match h {
                None => c.rules.clear(),
                Some(h) => {
                    let before = c.rules.len();
                    c.rules.retain(|r| r.handle != h);
                    if c.rules.len() == before {
                        return Err(refuse(ENOENT, op, format!("no rule with handle {h}")));
                    }
                }
            }
            t.drop_unbound_anonymous();
        }
        MsgType::NewSet => {
            let u32_of = |k| attrs.u32_of(k).map_err(|e| bad(dec(e)));
            let mut name = attrs.str_of(wire::set::NAME).map_err(|e| bad(dec(e)))?.unwrap_or_default();
            let flags = u32_of(wire::set::FLAGS)?.unwrap_or(0);
            let id = u32_of(wire::set::ID)?;
            if name.contains("%d") {
                *anon += 1;
                name = name.replace("%d", &anon.to_string());
            }
            let new = Set {
                name: name.clone(),
                flags,
                key_type: u32_of(wire::set::KEY_TYPE)?.unwrap_or(0),
                key_len: u32_of(wire::set::KEY_LEN)?.unwrap_or(0),
                data_type: u32_of(wire::set::DATA_TYPE)?,
                elements: BTreeMap::new(),
                jumps: BTreeMap::new(),
            };
            if let Some(id) = id {
                ids.insert(id, name.clone());
            }
            match t.set(&name) {
                Some(_) if excl => return Err(refuse(EEXIST, op, format!("set {name} exists"))),
                Some(s)
                    if (s.flags, s.key_type, s.key_len, s.data_type)
                        != (new.flags, new.key_type, new.key_len, new.data_type) =>
                {
                    return Err(refuse(EEXIST, op, format!("set {name} exists with another type")))
                }
                Some(_) => {}
                None => t.sets.push(new),
            }
        }
        MsgType::DelSet => {
            let name = attrs.str_of(wire::set::NAME).map_err(|e| bad(dec(e)))?.unwrap_or_default();
            if t.set(&name).is_none() {
                return Err(refuse(ENOENT, op, format!("no set {name}")));
            }
            if t.set_in_use(&name) {
                return Err(refuse(EBUSY, op, format!("set {name} is looked up by a rule")));
            }
            t.sets.retain(|s| s.name != name);
        }
        MsgType::NewSetElem | MsgType::DelSetElem => {
            let add = kind == MsgType::NewSetElem;
            let by_id = attrs.u32_of(wire::elem::LIST_SET_ID).map_err(|e| bad(dec(e)))?.and_then(|id| ids.get(&id));
            let name = match by_id {
                Some(n) => n.clone(),
                None => attrs.str_of(wire::elem::LIST_SET).map_err(|e| bad(dec(e)))?.unwrap_or_default(),
            };
            let list = match attrs.attr(wire::elem::LIST_ELEMENTS) {
                Some(l) => l.children().map_err(|e| bad(dec(e)))?,
                None => Vec::new(),
            };
            let chains: Vec<String> = t.chains.iter().map(|c| c.name.clone()).collect();
            let s = t.set(&name).ok_or_else(|| refuse(ENOENT, op, format!("no set {name}")))?;
            for a in &list {
                let e = list::parse_element(a).map_err(|e| bad(dec(e)))?;
                let k = (e.key.clone(), e.interval_end);
                if !add {
                    if s.elements.remove(&k).is_none() {
                        return Err(refuse(ENOENT, op, format!("no such element in set {name}")));
                    }
                    s.jumps.remove(&k);
                    continue;
                }
                let target = match a.children().map_err(|e| bad(dec(e)))?.attr(wire::elem::DATA) {
                    Some(d) => match expr::parse_data(d).map_err(|e| bad(dec(e)))? {
                        Data::Verdict(v) => v.chain,
                        Data::Value(_) => None,
                    },
                    None => None,
                };
                if let Some(c) = &target {
                    if !chains.contains(c) {
                        return Err(refuse(ENOENT, op, format!("no chain {c} to jump to")));
                    }
                }
                match s.elements.get(&k) {
                    Some(_) if excl => return Err(refuse(EEXIST, op, format!("element exists in set {name}"))),
                    Some(old) if old.data != e.data => {
                        return Err(refuse(EEXIST, op, format!("element exists with other data in set {name}")))
                    }
                    Some(_) => {}
                    None => {
                        if let Some(c) = target {
                            s.jumps.insert(k.clone(), c);
                        }
                        s.elements.insert(k, e);
                    }
                }
            }
        }
        _ => return Err(refuse(EOPNOTSUPP, op, format!("{kind:?} is not modelled"))),
    }
    Ok(())
}

impl Kernel for Fake {
    async fn transact(&mut self, ops: &[Op]) -> Result<TxStats, NftError> {
        self.our_batch(ops)
    }

    async fn transact_with<G>(&mut self, gen: G) -> Result<TxStats, NftError>
    where
        G: Fn(&mut dyn FnMut(Op)) -> Result<(), LowerError>,
    {
        let mut ops = Vec::new();
        gen(&mut |op| ops.push(op))?;
        self.our_batch(&ops)
    }

    async fn list_table(&mut self, table: &str) -> Result<Option<KernelTable>, NftError> {
        self.listings += 1;
        Ok(self.listing(table))
    }

    async fn generation(&mut self) -> Result<u32, NftError> {
        Ok(self.generation)
    }

    async fn next_event(&mut self) -> TableEvent {
        match self.events.pop_front() {
            Some(e) => e,
            None => std::future::pending().await,
        }
    }

    fn mute(&mut self) -> bool {
        self.muted = self.has_events;
        self.has_events
    }

    fn unmute(&mut self) {
        self.muted = false;
    }
}

#[cfg(test)]
#[path = "fake_tests.rs"]
mod tests;
