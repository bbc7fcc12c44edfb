//! Object metadata the API server fills in.

use super::{Action, Stamp};
use crate::model::ObjectMeta;

pub(super) fn default_namespace(m: &mut ObjectMeta) {
    if m.namespace.as_deref().is_none_or(str::is_empty) {
        m.namespace = Some("default".into());
    }
}

/// Sets uid and creationTimestamp (kept from `old` on update, from the request or the
/// stamp on create) and carries the old resourceVersion over so an unchanged object
/// compares equal. Returns Created or Configured.
pub(super) fn stamp(m: &mut ObjectMeta, old: Option<&ObjectMeta>, stamp: &Stamp) -> Action {
    match old {
        Some(o) => {
            m.uid = o.uid.clone();
            m.creation_timestamp = o.creation_timestamp.clone();
            m.resource_version = o.resource_version.clone();
            Action::Configured
        }
        None => {
            if m.uid.as_deref().is_none_or(str::is_empty) {
                m.uid = Some(stamp.uid.clone());
            }
            if m.creation_timestamp.as_deref().is_none_or(str::is_empty) {
                m.creation_timestamp = Some(stamp.now.clone());
            }
            m.resource_version = None;
            Action::Created
        }
    }
}
