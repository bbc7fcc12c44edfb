//! Repair by difference: compare the kernel's copy of our table with the desired one
//! and send only what differs. A start on a table the previous run left in place, the
//! resync timer and a foreign change to our table all come here, so none of them
//! replaces the table (which would cost O(table) in the kernel for a one-object drift).

use crate::fxhash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::error::NftError;
use super::ir::*;
use super::list::{parse_element, KernelElement, KernelTable};
use super::lower::{element_attrs, LowerError, Lowerer, Op};
use super::packed::ElemRef;
use super::sync::Part;
use super::wire::Attr;

/// What it takes to make the kernel's table the desired one.
#[derive(Debug)]
pub enum Repair {
    /// Messages of one transaction (empty: the table is as desired).
    Ops(Vec<Op>),
    /// Something only a replacement can change (a base chain's hook, a set's type).
    Full(String),
}

fn lower_err(e: LowerError) -> NftError {
    NftError::Decode(e.to_string())
}

/// Compares `kernel` with `base` plus `parts` (borrowed, as a full sync streams them).
pub fn repair(base: &Ruleset, parts: &[Part<'_>], kernel: &KernelTable) -> Result<Repair, NftError> {
    let mut l = Lowerer::new(base.family, &base.table);
    let sets: Vec<&Set> = base.sets.iter().chain(parts.iter().flat_map(|p| p.sets)).collect();
    let chains: Vec<&(Chain, Vec<Rule>)> = base.chains.iter().chain(parts.iter().flat_map(|p| p.chains)).collect();
    let kchains: HashMap<&str, _> = kernel.chains.iter().map(|c| (c.name.as_str(), c)).collect();
    let ksets: HashMap<&str, _> = kernel.sets.iter().map(|s| (s.name.as_str(), s)).collect();

    let mut new_chains = Vec::new();
    let mut rules = Vec::new();
    for (c, want) in chains.iter().map(|c| (&c.0, &c.1)) {
        let Some(k) = kchains.get(c.name.as_str()) else {
            new_chains.push(l.new_chain(c));
            for (i, r) in want.iter().enumerate() {
                rules.extend(l.rule(&c.name, i, r).map_err(lower_err)?);
            }
            continue;
        };
        if c.base.is_some() != k.hook.is_some() || !same_hook(c, k.hook.as_ref()) {
            return Ok(Repair::Full(format!("chain {} has another hook", c.name)));
        }
        let mut same = want.len() == k.rules.len();
        if same {
            for (r, kr) in want.iter().zip(&k.rules) {
                let exprs: Vec<_> = l.rule_exprs(r).map_err(lower_err)?.iter().map(super::list::normalize).collect();
                let got: Vec<_> = kr.exprs.iter().map(super::list::normalize).collect();
                if exprs != got || r.comment != kr.comment {
                    same = false;
                    break;
                }
            }
        }
        if !same {
            rules.push(l.flush_chain(&c.name));
            for (i, r) in want.iter().enumerate() {
                rules.extend(l.rule(&c.name, i, r).map_err(lower_err)?);
            }
        }
    }

    // Desired elements per set, encoded as the kernel lists them.
    let mut want_elems = super::sync::merged_elements(base, parts);
    let mut new_sets = Vec::new();
    let mut removals = Vec::new();
    let mut additions = Vec::new();
    for s in &sets {
        let want = want_elems.remove(s.name.as_str()).unwrap_or_default();
        let probe = l.new_set(s).map_err(lower_err)?;
        let Some(k) = ksets.get(s.name.as_str()) else {
            new_sets.push(probe);
            if !want.is_empty() {
                l.elements_each(s, want.iter().map(ElemRef::get), true, &mut |op| additions.push(op))
                    .map_err(lower_err)?;
            }
            continue;
        };
        if !same_set_type(&probe, k) {
            return Ok(Repair::Full(format!("set {} has another type", s.name)));
        }
        let mut encoded: HashMap<KernelElement, Attr> =
            HashMap::with_capacity_and_hasher(want.len(), Default::default());
        for e in want {
            for a in element_attrs(s, &e.get(), true).map_err(lower_err)? {
                let ke = parse_element(&a).map_err(|e| NftError::Decode(e.to_string()))?;
                encoded.insert(ke, a);
            }
        }
        let have: HashSet<&KernelElement> = k.elements.iter().collect();
        if s.flags.interval {
            // Interval elements come in pairs; a differing interval set is rewritten.
            if have.len() != encoded.len() || encoded.keys().any(|e| !have.contains(e)) {
                return Ok(Repair::Full(format!("interval set {} differs", s.name)));
            }
            continue;
        }
        // A dynamic set's elements beyond ours are the packet path's (the clients an
        // affinity set remembers): state to keep, not drift.
        let gone: Vec<Attr> = k
            .elements
            .iter()
            .filter(|e| !s.flags.dynamic && !encoded.contains_key(*e))
            .map(|e| {
                Attr::nested(
                    super::wire::LIST_ELEM,
                    vec![super::expr::data_attr(super::wire::elem::KEY, &super::expr::Data::Value(e.key.clone()))],
                )
            })
            .collect();
        if !gone.is_empty() {
            l.raw_elements_each(&s.name, gone, false, &mut |op| removals.push(op));
        }
        let mut add: Vec<(KernelElement, Attr)> = encoded.into_iter().filter(|(e, _)| !have.contains(e)).collect();
        add.sort_by(|a, b| a.0.cmp(&b.0));
        if !add.is_empty() {
            l.raw_elements_each(&s.name, add.into_iter().map(|(_, a)| a), true, &mut |op| additions.push(op));
        }
    }
    if let Some(set) = want_elems.keys().next() {
        return Err(lower_err(LowerError {
            object: format!("elements of set {set}"),
            reason: "the ruleset declares no such set".into(),
        }));
    }

    // Order: chains and sets first (elements and rules refer to them), element removals
    // (which may release chains), additions, rules, then what is no longer wanted.
    let mut ops = new_chains;
    ops.extend(new_sets);
    ops.extend(removals);
    ops.extend(additions);
    ops.extend(rules);
    let want_chains: HashSet<&str> = chains.iter().map(|c| c.0.name.as_str()).collect();
    let want_sets: HashSet<&str> = sets.iter().map(|s| s.name.as_str()).collect();
    // Foreign chains may jump to each other: flush them all before deleting any.
    let gone_chains: Vec<&str> =
        kernel.chains.iter().map(|c| c.name.as_str()).filter(|n| !want_chains.contains(n)).collect();
    for c in &gone_chains {
        ops.push(l.flush_chain(c));
    }
    for c in &gone_chains {
        ops.push(l.del_chain(c));
    }
    for s in kernel.sets.iter().filter(|s| !want_sets.contains(s.name.as_str())) {
        ops.push(l.del_set(&s.name));
    }
    Ok(Repair::Ops(ops))
}

fn same_hook(c: &Chain, k: Option<&(u32, i32, String)>) -> bool {
    match (&c.base, k) {
        (None, None) => true,
        (Some(b), Some((hook, prio, kind))) => {
            let want_kind = match b.kind {
                ChainType::Filter => "filter",
                ChainType::Nat => "nat",
                ChainType::Route => "route",
            };
            super::lower::hook_number(b.hook) == *hook && b.priority == *prio && want_kind == kind
        }
        _ => false,
    }
}

/// Whether the kernel's set has the type we would create it with.
fn same_set_type(probe: &Op, k: &super::list::KernelSet) -> bool {
    use super::wire::{set, AttrList};
    let a = &probe.msg.attrs;
    let want_flags = a.u32_of(set::FLAGS).ok().flatten().unwrap_or(0);
    a.u32_of(set::KEY_TYPE).ok().flatten() == Some(k.key_type)
        && a.u32_of(set::KEY_LEN).ok().flatten() == Some(k.key_len)
        && a.u32_of(set::DATA_TYPE).ok().flatten() == k.data_type
        // The kernel adds flags of its own (e.g. for dynamic sets); ours must all be there.
        && k.flags & want_flags == want_flags
}
