//! Listing our table from the kernel (chains, rules, sets, elements) and
//! comparing it with a desired ruleset, to verify a sync and detect drift.

use crate::fxhash::{FxHashMap as HashMap, FxHashSet as HashSet};

use netlink_packet_core::DecodeError;

use super::error::NftError;
use super::expr::{self, Data, Expr};
use super::ir::Ruleset;
use super::lower::{self, family_code, Lowerer};
use super::socket::NftSocket;
use super::wire::{self, Attr, AttrList, MsgType, NfMsg};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelTable {
    pub chains: Vec<KernelChain>,
    pub sets: Vec<KernelSet>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelChain {
    pub name: String,
    /// Hook number, priority and type of a base chain.
    pub hook: Option<(u32, i32, String)>,
    pub rules: Vec<KernelRule>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelRule {
    pub handle: u64,
    pub exprs: Vec<Expr>,
    pub comment: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSet {
    pub name: String,
    pub flags: u32,
    pub key_type: u32,
    pub key_len: u32,
    pub data_type: Option<u32>,
    pub elements: Vec<KernelElement>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KernelElement {
    pub key: Vec<u8>,
    /// Verdict or value, as its wire form (comparable).
    pub data: Option<String>,
    pub interval_end: bool,
}

fn dec(e: DecodeError) -> NftError {
    NftError::Decode(e.to_string())
}

fn data_repr(d: &Data) -> String {
    match d {
        Data::Value(v) => format!("{v:02x?}"),
        Data::Verdict(v) => format!("{}:{}", v.code, v.chain.as_deref().unwrap_or("")),
    }
}

/// Parses one `NFTA_LIST_ELEM` of an element list (ours or the kernel's).
pub fn parse_element(a: &Attr) -> Result<KernelElement, DecodeError> {
    let k = a.children()?;
    let key = match k.attr(wire::elem::KEY) {
        Some(a) => match expr::parse_data(a)? {
            Data::Value(v) => v,
            Data::Verdict(_) => return Err(DecodeError::from("element key is a verdict")),
        },
        None => vec![],
    };
    let data = k.attr(wire::elem::DATA).map(expr::parse_data).transpose()?;
    Ok(KernelElement {
        key,
        data: data.as_ref().map(data_repr),
        interval_end: k.u32_of(wire::elem::FLAGS)?.unwrap_or(0) & wire::elem::F_INTERVAL_END != 0,
    })
}

/// Reads our table; `None` when it does not exist.
pub async fn list_table(sock: &mut NftSocket, family: u8, table: &str) -> Result<Option<KernelTable>, NftError> {
    let get = NfMsg::new(MsgType::GetTable, family, vec![Attr::str(wire::table::NAME, table)]);
    match sock.get(get).await {
        Ok(_) => {}
        Err(e) if e.errnos() == [libc::ENOENT] => return Ok(None),
        Err(e) => return Err(e),
    }
    let mut chains = Vec::new();
    for m in sock.dump(NfMsg::new(MsgType::GetChain, family, vec![])).await? {
        if m.family != family || m.attrs.str_of(wire::chain::TABLE).map_err(dec)?.as_deref() != Some(table) {
            continue;
        }
        let name = m.attrs.str_of(wire::chain::NAME).map_err(dec)?.unwrap_or_default();
        let hook = match m.attrs.attr(wire::chain::HOOK) {
            Some(h) => {
                let h = h.children().map_err(dec)?;
                Some((
                    h.u32_of(wire::chain::HOOK_HOOKNUM).map_err(dec)?.unwrap_or(0),
                    h.u32_of(wire::chain::HOOK_PRIORITY).map_err(dec)?.unwrap_or(0) as i32,
                    m.attrs.str_of(wire::chain::TYPE).map_err(dec)?.unwrap_or_default(),
                ))
            }
            None => None,
        };
        chains.push(KernelChain { name, hook, rules: vec![] });
    }
    let index: HashMap<String, usize> = chains.iter().enumerate().map(|(i, c)| (c.name.clone(), i)).collect();
    let rules = sock.dump(NfMsg::new(MsgType::GetRule, family, vec![Attr::str(wire::rule::TABLE, table)])).await?;
    for m in rules {
        if m.attrs.str_of(wire::rule::TABLE).map_err(dec)?.as_deref() != Some(table) {
            continue;
        }
        let chain = m.attrs.str_of(wire::rule::CHAIN).map_err(dec)?.unwrap_or_default();
        let exprs = match m.attrs.attr(wire::rule::EXPRESSIONS) {
            Some(l) => {
                l.children().map_err(dec)?.iter().map(Expr::parse).collect::<Result<Vec<_>, _>>().map_err(dec)?
            }
            None => vec![],
        };
        let rule = KernelRule {
            handle: m.attrs.attr(wire::rule::HANDLE).map(Attr::as_u64).transpose().map_err(dec)?.unwrap_or(0),
            exprs,
            comment: m.attrs.attr(wire::rule::USERDATA).and_then(|u| lower::rule_comment(u.payload())),
        };
        if let Some(&i) = index.get(&chain) {
            chains[i].rules.push(rule);
        }
    }
    let mut sets = Vec::new();
    let dumped = sock.dump(NfMsg::new(MsgType::GetSet, family, vec![Attr::str(wire::set::TABLE, table)])).await?;
    for m in dumped {
        if m.attrs.str_of(wire::set::TABLE).map_err(dec)?.as_deref() != Some(table) {
            continue;
        }
        let flags = m.attrs.u32_of(wire::set::FLAGS).map_err(dec)?.unwrap_or(0);
        if flags & wire::set::F_ANONYMOUS != 0 {
            continue;
        }
        let name = m.attrs.str_of(wire::set::NAME).map_err(dec)?.unwrap_or_default();
        let mut elements = Vec::new();
        let req = NfMsg::new(
            MsgType::GetSetElem,
            family,
            vec![Attr::str(wire::elem::LIST_TABLE, table), Attr::str(wire::elem::LIST_SET, &name)],
        );
        for em in sock.dump(req).await? {
            if let Some(list) = em.attrs.attr(wire::elem::LIST_ELEMENTS) {
                for e in list.children().map_err(dec)? {
                    elements.push(parse_element(&e).map_err(dec)?);
                }
            }
        }
        elements.sort();
        sets.push(KernelSet {
            name,
            flags,
            key_type: m.attrs.u32_of(wire::set::KEY_TYPE).map_err(dec)?.unwrap_or(0),
            key_len: m.attrs.u32_of(wire::set::KEY_LEN).map_err(dec)?.unwrap_or(0),
            data_type: m.attrs.u32_of(wire::set::DATA_TYPE).map_err(dec)?,
            elements,
        });
    }
    Ok(Some(KernelTable { chains, sets }))
}

/// Makes kernel-assigned details comparable with what we send.
pub fn normalize(e: &Expr) -> Expr {
    match e {
        Expr::Lookup { set, sreg, dreg, invert, .. } if set.starts_with("__") => {
            Expr::Lookup { set: "__anonymous".into(), set_id: None, sreg: *sreg, dreg: *dreg, invert: *invert }
        }
        Expr::Dynset { set, sreg_key, timeout_ms, .. } => Expr::Dynset {
            set: set.clone(),
            set_id: None,
            sreg_key: *sreg_key,
            timeout_ms: timeout_ms.filter(|t| *t != 0),
        },
        other => other.clone(),
    }
}

/// The differences between the kernel's table and `desired` (empty: in sync).
pub fn diff(desired: &Ruleset, kernel: &KernelTable) -> Result<Vec<String>, NftError> {
    let mut out = Vec::new();
    let mut l = Lowerer::new(desired.family, &desired.table);
    let kchains: HashMap<&str, &KernelChain> = kernel.chains.iter().map(|k| (k.name.as_str(), k)).collect();
    let want_chains: HashSet<&str> = desired.chains.iter().map(|(c, _)| c.name.as_str()).collect();
    for (c, rules) in &desired.chains {
        let Some(k) = kchains.get(c.name.as_str()) else {
            out.push(format!("chain {} is missing", c.name));
            continue;
        };
        if c.base.is_some() != k.hook.is_some() {
            out.push(format!("chain {}: base/regular mismatch", c.name));
        }
        if rules.len() != k.rules.len() {
            out.push(format!("chain {}: {} rules, want {}", c.name, k.rules.len(), rules.len()));
            continue;
        }
        for (i, (r, kr)) in rules.iter().zip(&k.rules).enumerate() {
            let want: Vec<Expr> = l.rule_exprs(r)?.iter().map(normalize).collect();
            let got: Vec<Expr> = kr.exprs.iter().map(normalize).collect();
            if want != got {
                out.push(format!("chain {} rule #{i} differs: want {want:?}, kernel has {got:?}", c.name));
            } else if r.comment != kr.comment {
                out.push(format!("chain {} rule #{i}: comment differs", c.name));
            }
        }
    }
    for k in &kernel.chains {
        if !want_chains.contains(k.name.as_str()) {
            out.push(format!("unexpected chain {}", k.name));
        }
    }
    for s in &desired.sets {
        let Some(k) = kernel.sets.iter().find(|k| k.name == s.name) else {
            out.push(format!("set {} is missing", s.name));
            continue;
        };
        let mut want = Vec::new();
        for (name, elems) in &desired.elements {
            if *name != s.name {
                continue;
            }
            for op in l.elements(s, elems, true)? {
                if let Some(list) = op.msg.attrs.attr(wire::elem::LIST_ELEMENTS) {
                    for e in list.children().map_err(dec)? {
                        want.push(parse_element(&e).map_err(dec)?);
                    }
                }
            }
        }
        want.sort();
        // The packet path adds to a dynamic set: only ours must be there.
        let differs = if s.flags.dynamic { want.iter().any(|e| !k.elements.contains(e)) } else { want != k.elements };
        if differs {
            out.push(format!(
                "set {}: {} elements in the kernel, want {} (or contents differ)",
                s.name,
                k.elements.len(),
                want.len()
            ));
        }
    }
    for k in &kernel.sets {
        if !desired.sets.iter().any(|s| s.name == k.name) {
            out.push(format!("unexpected set {}", k.name));
        }
    }
    Ok(out)
}

/// Lists our table and compares it with `desired`.
pub async fn verify(sock: &mut NftSocket, desired: &Ruleset) -> Result<Vec<String>, NftError> {
    match list_table(sock, family_code(desired.family), &desired.table).await? {
        None => Ok(vec![format!("table {} does not exist", desired.table)]),
        Some(k) => diff(desired, &k),
    }
}
