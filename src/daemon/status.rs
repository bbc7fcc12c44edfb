//! The `status` result (CONTRACT.md, Socket API).

use serde_json::{json, Value};

use super::State;

pub fn status(st: &State) -> Value {
    let usage = st.registry.usage();
    let dp = &st.dataplane;
    json!({
        "version": crate::VERSION,
        "node": {
            "name": st.cfg.node_name,
            "addresses": st.node.addresses(),
            "selectors": st.node.selectors_json(),
            "unmatchedSelectors": st.node.unmatched(),
            "primary": st.node.primary_json(),
        },
        "nodePorts": usage.node_ports,
        "serviceCIDRs": usage.service_cidrs,
        "dataplane": {
            "table": format!("inet {}", st.cfg.table),
            "dryRun": st.dry_run,
            "inSync": dp.in_sync,
            "generation": dp.generation,
            "lastSyncMillis": dp.last_sync_millis,
            "lastSyncSecondsAgo": dp.last_sync_at.map(|t| t.elapsed().as_secs()),
            "startToInSyncMillis": dp.start_to_in_sync_millis,
            "lastError": dp.last_error,
            "transactions": dp.transactions,
            "fullSyncs": dp.full_syncs,
            "lastMessages": dp.last_messages,
            "conflicts": dp.conflicts,
        },
        "objects": {
            "services": st.registry.service_count(),
            "endpoints": st.registry.endpoints_count(),
            "endpointSlices": st.registry.endpoint_slice_count(),
            "nodes": st.registry.node_count(),
            "typed": st.registry.unpacked(),
        },
        "podRoutes": st.pod_routes.status_json(st.cfg.pod_routes),
        "healthChecks": st.health.status_json(),
        "problems": st.registry.problems(),
        "store": { "stateDir": st.cfg.state_dir.display().to_string(), "writes": st.store.writes(), "batches": st.store.batches() },
        "uptimeSeconds": st.started.elapsed().as_secs(),
        "cluster": cluster(st),
    })
}

/// `status.cluster`: the connection to the API server, `null` when not following one.
#[cfg(feature = "cluster")]
fn cluster(st: &State) -> Value {
    st.cluster.as_ref().map_or(Value::Null, |c| c.json(&st.registry))
}

/// A build without cluster mode never follows an API server.
#[cfg(not(feature = "cluster"))]
fn cluster(_: &State) -> Value {
    Value::Null
}
