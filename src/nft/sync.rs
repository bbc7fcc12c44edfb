//! The sync engine: makes the kernel's table match a desired [`Ruleset`] in one
//! atomic transaction, either replacing the whole table or touching only what
//! changed between two descriptions. Planning is pure; applying is one batch.

use crate::fxhash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::error::NftError;
use super::ir::*;
use super::lower::{LowerError, Lowerer, Op};
use super::packed::{self, ElemRef};
use super::socket::{NftSocket, TxStats};

/// What a sync did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncReport {
    pub stats: TxStats,
    /// A full replacement (asked for, or a partial sync that could not be partial).
    pub full: bool,
}

/// A partial sync's plan.
#[derive(Debug)]
pub enum Plan {
    /// Messages touching only what changed (may be empty: nothing to do).
    Partial(Vec<Op>),
    /// Something changed that cannot be changed in place (a base chain's hook,
    /// a set's type or flags, the table itself): replace the table.
    Full(&'static str),
}

/// Objects that come on top of a base ruleset (one service's, in the daemon),
/// borrowed from wherever they are kept, so a full sync needs no assembled copy.
#[derive(Debug, Clone, Copy, Default)]
pub struct Part<'a> {
    /// Sets and maps, after the base's and the earlier parts'.
    pub sets: &'a [Set],
    /// Chains with their rules, after the base's and the earlier parts'.
    pub chains: &'a [(Chain, Vec<Rule>)],
    /// Elements as (set name, element): of the base's sets or of any part's.
    pub elements: &'a [(SetName, Element)],
    /// More elements, packed (`nft::packed`): decoded one at a time as they are sent.
    pub packed: &'a [u8],
}

impl<'a> Part<'a> {
    /// Every element of this part as (set name, element).
    pub fn each_element(&self) -> impl Iterator<Item = (&'a str, ElemRef<'a>)> {
        let plain = self.elements.iter().map(|(set, e)| (&**set, ElemRef::Plain(e)));
        plain.chain(packed::entries(self.packed).map(|(set, e)| (set, ElemRef::Packed(e))))
    }
}

/// The elements of `r` and `parts`, by set name.
pub fn merged_elements<'a>(r: &'a Ruleset, parts: &[Part<'a>]) -> HashMap<&'a str, Vec<ElemRef<'a>>> {
    let mut m: HashMap<&str, Vec<ElemRef<'a>>> = HashMap::default();
    for (set, elems) in &r.elements {
        m.entry(set.as_str()).or_default().extend(elems.iter().map(ElemRef::Plain));
    }
    for p in parts {
        for (set, e) in p.each_element() {
            m.entry(set).or_default().push(e);
        }
    }
    m
}

fn plain_elements(r: &Ruleset) -> HashMap<&str, Vec<&Element>> {
    let mut m: HashMap<&str, Vec<&Element>> = HashMap::default();
    for (set, elems) in &r.elements {
        m.entry(set.as_str()).or_default().extend(elems.iter());
    }
    m
}

/// Every set that elements are `named` for must be declared by `r` or `parts`. Takes the
/// names once per set (the keys of [`merged_elements`]), not once per element.
fn check_refs<'a>(r: &Ruleset, parts: &[Part<'_>], named: impl Iterator<Item = &'a str>) -> Result<(), LowerError> {
    let sets: HashSet<&str> = r.sets.iter().chain(parts.iter().flat_map(|p| p.sets)).map(|s| s.name.as_str()).collect();
    // The first by name, whatever order `named` comes in.
    match named.filter(|set| !sets.contains(set)).min() {
        Some(set) => Err(LowerError {
            object: format!("elements of set {set}"),
            reason: "the ruleset declares no such set".into(),
        }),
        None => Ok(()),
    }
}

/// One transaction that replaces the table: add (so the delete cannot fail),
/// delete, then add it with everything. Chains come before the sets' elements
/// and the rules that jump to them; sets before the rules that look them up.
pub fn full_sync_ops(desired: &Ruleset) -> Result<Vec<Op>, LowerError> {
    let mut ops = Vec::new();
    full_sync_each(desired, &[], &mut |op| ops.push(op))?;
    Ok(ops)
}

/// The messages of [`full_sync_ops`] for `base` plus `parts`, handed to `sink`
/// one at a time, so a caller that serializes each at once never holds the
/// whole transaction as messages. Deterministic: a second call yields the same
/// messages in the same order (the socket relies on it to name failures).
pub fn full_sync_each(base: &Ruleset, parts: &[Part<'_>], sink: &mut dyn FnMut(Op)) -> Result<(), LowerError> {
    let elems = merged_elements(base, parts);
    check_refs(base, parts, elems.keys().copied())?;
    let sets = || base.sets.iter().chain(parts.iter().flat_map(|p| p.sets));
    let chains = || base.chains.iter().chain(parts.iter().flat_map(|p| p.chains));
    let mut l = Lowerer::new(base.family, &base.table);
    sink(l.new_table());
    sink(l.del_table());
    sink(l.new_table());
    for (c, _) in chains() {
        sink(l.new_chain(c));
    }
    for s in sets() {
        sink(l.new_set(s)?);
    }
    for s in sets() {
        if let Some(e) = elems.get(s.name.as_str()) {
            l.elements_each(s, e.iter().map(ElemRef::get), true, sink)?;
        }
    }
    for (c, rules) in chains() {
        for (i, r) in rules.iter().enumerate() {
            for op in l.rule(&c.name, i, r)? {
                sink(op);
            }
        }
    }
    Ok(())
}

/// The messages that turn `previous` (what the kernel has, as we last
/// programmed it) into `desired`. Sets and chains are matched by name, which
/// the data plane derives from content, so a changed service is a new name.
pub fn partial_sync_ops(previous: &Ruleset, desired: &Ruleset) -> Result<Plan, LowerError> {
    check_refs(desired, &[], desired.elements.iter().map(|(set, _)| set.as_str()))?;
    if previous.family != desired.family || previous.table != desired.table {
        return Ok(Plan::Full("the table changed"));
    }
    let mut l = Lowerer::new(desired.family, &desired.table);
    let prev_sets: HashMap<&str, &Set> = previous.sets.iter().map(|s| (s.name.as_str(), s)).collect();
    let prev_chains: HashMap<&str, &(Chain, Vec<Rule>)> =
        previous.chains.iter().map(|c| (c.0.name.as_str(), c)).collect();
    let want_sets: HashSet<&str> = desired.sets.iter().map(|s| s.name.as_str()).collect();
    let want_chains: HashSet<&str> = desired.chains.iter().map(|c| c.0.name.as_str()).collect();

    for s in &desired.sets {
        if let Some(p) = prev_sets.get(s.name.as_str()) {
            if *p != s {
                return Ok(Plan::Full("a set's definition changed"));
            }
        }
    }
    for (c, _) in &desired.chains {
        if let Some(p) = prev_chains.get(c.name.as_str()) {
            if p.0 != *c {
                return Ok(Plan::Full("a chain's definition changed"));
            }
        }
    }

    let mut ops = Vec::new();
    // 1. New chains first: map elements and rules below may jump to them.
    for (c, _) in &desired.chains {
        if !prev_chains.contains_key(c.name.as_str()) {
            ops.push(l.new_chain(c));
        }
    }
    // 2. New sets, before rules that look them up.
    for s in &desired.sets {
        if !prev_sets.contains_key(s.name.as_str()) {
            ops.push(l.new_set(s)?);
        }
    }
    // 3. Elements: removals (which may release chains deleted below), then additions.
    let prev_elems = plain_elements(previous);
    let want_elems = plain_elements(desired);
    let mut adds = Vec::new();
    for s in &desired.sets {
        let want = want_elems.get(s.name.as_str()).cloned().unwrap_or_default();
        if !prev_sets.contains_key(s.name.as_str()) {
            if !want.is_empty() {
                adds.extend(l.elements(s, want.iter().copied(), true)?);
            }
            continue;
        }
        let had = prev_elems.get(s.name.as_str()).cloned().unwrap_or_default();
        let had_by_key: HashMap<&Vec<Value>, &Element> = had.iter().map(|e| (&e.key, *e)).collect();
        let want_by_key: HashMap<&Vec<Value>, &Element> = want.iter().map(|e| (&e.key, *e)).collect();
        let removed: Vec<&Element> =
            had.iter().filter(|e| want_by_key.get(&e.key).is_none_or(|w| *w != **e)).copied().collect();
        let added: Vec<&Element> =
            want.iter().filter(|e| had_by_key.get(&e.key).is_none_or(|h| *h != **e)).copied().collect();
        if !removed.is_empty() {
            ops.extend(l.elements(s, removed, false)?);
        }
        if !added.is_empty() {
            adds.extend(l.elements(s, added, true)?);
        }
    }
    ops.extend(adds);
    // 4. Rules of new chains, and changed chains flushed and rewritten.
    for (c, rules) in &desired.chains {
        match prev_chains.get(c.name.as_str()) {
            Some((_, old)) if old == rules => continue,
            Some(_) => ops.push(l.flush_chain(&c.name)),
            None => {}
        }
        for (i, r) in rules.iter().enumerate() {
            ops.extend(l.rule(&c.name, i, r)?);
        }
    }
    // 5. Chains gone: later chains jump to earlier ones, so delete in reverse.
    for (c, _) in previous.chains.iter().rev() {
        if !want_chains.contains(c.name.as_str()) {
            ops.push(l.del_chain(&c.name));
        }
    }
    // 6. Sets gone, now that no rule looks them up.
    for s in &previous.sets {
        if !want_sets.contains(s.name.as_str()) {
            ops.push(l.del_set(&s.name));
        }
    }
    Ok(Plan::Partial(ops))
}

/// Replaces our table with `desired` atomically.
pub async fn full_sync(sock: &mut NftSocket, desired: &Ruleset) -> Result<SyncReport, NftError> {
    full_sync_parts(sock, desired, &[]).await
}

/// Replaces our table with `base` plus `parts` atomically, lowering and
/// serializing one message at a time (see [`full_sync_each`]).
pub async fn full_sync_parts(sock: &mut NftSocket, base: &Ruleset, parts: &[Part<'_>]) -> Result<SyncReport, NftError> {
    let stats = sock.transact_with(None, |sink| full_sync_each(base, parts, sink)).await?;
    Ok(SyncReport { stats, full: true })
}

/// Applies only the difference between `previous` and `desired` (falling back
/// to a full replacement when the difference cannot be applied in place).
pub async fn partial_sync(sock: &mut NftSocket, previous: &Ruleset, desired: &Ruleset) -> Result<SyncReport, NftError> {
    match partial_sync_ops(previous, desired)? {
        Plan::Partial(ops) => Ok(SyncReport { stats: sock.transact(&ops, None).await?, full: false }),
        Plan::Full(_) => full_sync(sock, desired).await,
    }
}

/// Deletes one table (`nodeportd --cleanup`). Returns whether it existed; an
/// absent table is success.
pub async fn delete_table(sock: &mut NftSocket, family: Family, name: &str) -> Result<bool, NftError> {
    let l = Lowerer::new(Some(family), name);
    match sock.transact(&[l.del_table()], None).await {
        Ok(_) => Ok(true),
        Err(e) if e.errnos() == [libc::ENOENT] => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    use crate::nft::synthetic::{change_endpoint, ruleset as synthetic};

    fn count(p: Plan) -> usize {
        match p {
            Plan::Partial(ops) => ops.len(),
            Plan::Full(why) => panic!("unexpected full sync: {why}"),
        }
    }

    #[test]
    fn one_endpoint_change_does_not_grow_with_services() {
        let mut sizes = Vec::new();
        for n in [10, 100, 1000] {
            let prev = synthetic(n, 3);
            let mut next = synthetic(n, 3);
            change_endpoint(&mut next, 0);
            sizes.push(count(partial_sync_ops(&prev, &next).unwrap()));
        }
        assert!(sizes.iter().all(|s| *s == sizes[0]), "{sizes:?}");
        assert!(sizes[0] > 0 && sizes[0] < 20, "{sizes:?}");
    }

    #[test]
    fn elements_of_an_undeclared_set_are_refused_before_any_message() {
        let good = synthetic(3, 2);
        let mut bad = good.clone();
        let el = bad.elements[0].1[0].clone();
        bad.elements.push(("zz-missing".into(), vec![el.clone()]));
        bad.elements.push(("aa-missing".into(), vec![el.clone(), el]));
        // The first missing set by name, in both paths.
        for err in [full_sync_ops(&bad).unwrap_err(), partial_sync_ops(&good, &bad).err().unwrap()] {
            assert_eq!(err.object, "elements of set aa-missing");
            assert_eq!(err.reason, "the ruleset declares no such set");
        }
        // Packed parts are checked too, and nothing reaches the sink first.
        let (set, e) = (&good.elements[0].0, good.elements[0].1[0].clone());
        let packed = crate::nft::packed::pack(&[(std::borrow::Cow::Borrowed("nope"), e.clone())]);
        let part = Part { sets: &[], chains: &[], elements: &[], packed: &packed };
        let mut sent = 0;
        let err = full_sync_each(&good, &[part], &mut |_| sent += 1).unwrap_err();
        assert_eq!((err.object.as_str(), sent), ("elements of set nope", 0));
        let packed = crate::nft::packed::pack(&[(std::borrow::Cow::Owned(set.clone()), e)]);
        let part = Part { sets: &[], chains: &[], elements: &[], packed: &packed };
        full_sync_each(&good, &[part], &mut |_| sent += 1).unwrap();
        assert!(sent > 0);
    }

    #[test]
    fn no_change_is_no_message() {
        let r = synthetic(5, 2);
        assert_eq!(count(partial_sync_ops(&r, &r).unwrap()), 0);
    }

    #[test]
    fn deleted_chain_goes_after_the_element_that_jumped_to_it() {
        let prev = synthetic(3, 2);
        let mut next = prev.clone();
        let gone = next.chains.iter().position(|(c, _)| c.name.starts_with("svc-1-")).unwrap();
        let name = next.chains[gone].0.name.clone();
        next.chains.retain(|(c, _)| !c.name.starts_with("svc-1-") && !c.name.starts_with("ep-1-"));
        for (_, elems) in next.elements.iter_mut() {
            elems.retain(|e| e.data != Some(ElementData::Verdict(Verdict::Goto(name.clone()))));
        }
        let Plan::Partial(ops) = partial_sync_ops(&prev, &next).unwrap() else { panic!("expected partial") };
        let del_elem = ops.iter().position(|o| o.msg.kind() == Some(super::super::wire::MsgType::DelSetElem)).unwrap();
        let del_chain = ops.iter().position(|o| o.msg.kind() == Some(super::super::wire::MsgType::DelChain)).unwrap();
        assert!(del_elem < del_chain);
    }

    #[test]
    fn streamed_parts_yield_the_messages_of_the_assembled_ruleset() {
        let whole = synthetic(30, 3);
        let base = Ruleset { elements: vec![], chains: whole.chains[..2].to_vec(), ..whole.clone() };
        let flat: Vec<(SetName, Element)> =
            whole.elements.iter().flat_map(|(s, els)| els.iter().map(move |e| (s.clone().into(), e.clone()))).collect();
        let chains: Vec<&[(Chain, Vec<Rule>)]> = whole.chains[2..].chunks(4).collect();
        let elems: Vec<&[(SetName, Element)]> = flat.chunks(3).collect();
        // Every other part keeps its elements packed, as the planner does.
        let packed: Vec<Box<[u8]>> = elems.iter().map(|c| packed::pack(*c)).collect();
        let parts: Vec<Part> = (0..chains.len().max(elems.len()))
            .map(|i| Part {
                sets: &[],
                chains: chains.get(i).copied().unwrap_or_default(),
                elements: elems.get(i).copied().filter(|_| i % 2 == 0).unwrap_or_default(),
                packed: packed.get(i).filter(|_| i % 2 == 1).map_or(&[], |p| &**p),
            })
            .collect();
        assert!(parts.iter().filter(|p| !p.packed.is_empty()).count() >= 5, "{}", parts.len());
        let mut streamed = Vec::new();
        full_sync_each(&base, &parts, &mut |op| streamed.push((op.msg, op.flags, op.object))).unwrap();
        let collected: Vec<_> =
            full_sync_ops(&whole).unwrap().into_iter().map(|op| (op.msg, op.flags, op.object)).collect();
        assert!(collected.len() > 100);
        assert_eq!(streamed, collected);

        let orphan = [("nope".into(), whole.elements[0].1[0].clone())];
        let parts = [Part { elements: &orphan, ..Part::default() }];
        let e = full_sync_each(&base, &parts, &mut |_| {}).unwrap_err();
        assert!(e.to_string().contains("nope"), "{e}");
        let orphan = packed::pack(&orphan);
        let parts = [Part { packed: &orphan, ..Part::default() }];
        let e = full_sync_each(&base, &parts, &mut |_| {}).unwrap_err();
        assert!(e.to_string().contains("nope"), "{e}");
    }

    #[test]
    fn elements_of_an_undeclared_set_are_refused() {
        let mut r = synthetic(1, 1);
        r.elements.push((
            "nope".into(),
            vec![Element { key: vec![Value::Addr(IpAddr::V4(Ipv4Addr::LOCALHOST))], data: None, timeout: None }],
        ));
        let e = full_sync_ops(&r).unwrap_err();
        assert!(e.to_string().contains("nope"), "{e}");
    }
}
