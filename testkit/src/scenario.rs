//! Behaviour scenarios (`clients/vectors/scenarios.json`, `SCENARIOS.md`): their fake nodes,
//! started from the scenario's scripts, and the check of what each node saw. The
//! `idgen-fake-nodes` binary serves them to the other languages' runners; the Rust client's
//! runner uses this module directly.

use std::sync::atomic::Ordering;
use std::time::Duration;

use idgen_protocol::Status;
use serde_json::{json, Value};

use crate::fake::{Action, Config, FakeServer};

/// Every scenario of a scenarios file.
pub fn load(path: &std::path::Path) -> Result<Vec<Value>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let all: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    all["scenarios"]
        .as_array()
        .cloned()
        .ok_or_else(|| format!("{}: no `scenarios` list", path.display()))
}

/// Starts `scenario`'s nodes on 127.0.0.1 on the current runtime, each with its script and its
/// own range of IDs (node k's IDs start at `k << 32` past the fake's base: an ID says which
/// node answered it).
pub async fn start_nodes(scenario: &Value) -> Result<Vec<FakeServer>, String> {
    let mut nodes = Vec::new();
    for (k, node) in scenario["nodes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let steps = node["script"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(action)
            .collect::<Result<Vec<_>, _>>()?;
        let server = FakeServer::start(Config {
            first_seq: (k as u64) << 32,
            script_pings: false,
            ..Config::default()
        })
        .await;
        server.control.script_at(&steps);
        nodes.push(server);
    }
    Ok(nodes)
}

pub fn action(step: &Value) -> Result<(u64, Action), String> {
    let at = step["at"]
        .as_u64()
        .ok_or_else(|| format!("a script step without `at`: {step}"))?;
    let action = match step["do"].as_str() {
        Some("error") => {
            let status = step["status"]
                .as_u64()
                .and_then(|s| u16::try_from(s).ok())
                .ok_or_else(|| format!("an error step without a status: {step}"))?;
            Action::Error(Status(status), "scripted by the scenario")
        }
        Some("drop") => Action::Drop,
        Some("hang") => Action::Hang(None),
        Some("serve") => Action::Serve,
        Some("wrong_count") => Action::WrongCount,
        Some("duplicate") => Action::Duplicate,
        Some("garbage") => Action::Raw(vec![0, 0, 0, 2, 0xee, 0xee]),
        Some("delay") => Action::Delay(Duration::from_millis(
            step["ms"].as_u64().ok_or("a delay step without ms")?,
        )),
        other => return Err(format!("unknown script action {other:?} in {step}")),
    };
    Ok((at, action))
}

pub fn report(nodes: &[FakeServer]) -> Value {
    Value::Array(
        nodes
            .iter()
            .map(|n| {
                json!({
                    "connections": n.control.connections.load(Ordering::Relaxed),
                    "id_requests": n.control.id_requests.load(Ordering::Relaxed),
                    "ids_served": n.control.ids_served(),
                })
            })
            .collect(),
    )
}

/// What differs between `nodes_after` and what the nodes saw (`None`: nothing).
pub fn check(scenario: &Value, nodes: &[FakeServer]) -> Option<String> {
    let seen = report(nodes);
    let mut wrong = Vec::new();
    let expected = scenario["nodes_after"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (i, want) in expected.iter().enumerate() {
        let Some(want) = want.as_object() else {
            continue;
        };
        for (key, value) in want {
            if value == "any" {
                continue;
            }
            let got = &seen[i][key.as_str()];
            if got != value {
                wrong.push(format!("node {i} {key}: expected {value}, saw {got}"));
            }
        }
    }
    (!wrong.is_empty()).then(|| format!("{} (saw {seen})", wrong.join("; ")))
}
