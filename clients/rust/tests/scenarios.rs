//! The shared behaviour scenarios (`clients/vectors/scenarios.json`, `SCENARIOS.md`) run
//! against `Pool`: the scenario's fake nodes (the test kit's, as `idgen-fake-nodes` serves
//! them to the other languages), its steps, and what each node saw afterwards.

use std::path::Path;
use std::time::Duration;

use idgen_client::{Error, Pool};
use idgen_testkit::scenario;
use serde_json::Value;

fn ms(v: &Value, key: &str, default: u64) -> Duration {
    Duration::from_millis(v[key].as_u64().unwrap_or(default))
}

/// The scenario vocabulary's name for what a call returned.
fn outcome(got: &Result<Vec<u64>, Error>) -> (String, Option<u16>) {
    match got {
        Ok(_) => ("ok".into(), None),
        Err(Error::InvalidArgument(_)) => ("invalid_argument".into(), None),
        Err(e) => match e.status() {
            Some(s) if !s.retry_elsewhere() && !s.closes_connection() => {
                ("server_error".into(), Some(s.0))
            }
            _ => ("unavailable".into(), None),
        },
    }
}

async fn run(s: &Value) -> Result<(), String> {
    let name = s["name"].as_str().unwrap_or("?");
    let nodes = scenario::start_nodes(s).await?;
    let addrs: Vec<String> = nodes.iter().map(|n| n.addr.to_string()).collect();
    let client = &s["client"];
    // Built lazily: nothing is connected before the first call, as in the other clients.
    let pool = Pool::builder()
        .nodes(&addrs)
        .connect_timeout(ms(client, "connect_timeout_ms", 1000))
        .request_timeout(ms(client, "timeout_ms", 2000))
        .build()
        .map_err(|e| format!("{name}: build: {e}"))?;
    for (i, step) in s["steps"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        if let Some(k) = step["kill"].as_u64() {
            nodes[k as usize].control.kill();
        } else if let Some(k) = step["revive"].as_u64() {
            nodes[k as usize].control.revive();
        } else if let Some(t) = step["sleep_ms"].as_u64() {
            tokio::time::sleep(Duration::from_millis(t)).await;
        } else if step["call"] == "next_ids" {
            let count = step["count"].as_u64().unwrap_or(1) as usize;
            let got = pool.next_ids(count as u32).await;
            if let Ok(ids) = &got {
                if ids.len() != count {
                    return Err(format!("{name}, step {i}: {} IDs for {count}", ids.len()));
                }
            }
            let (kind, status) = outcome(&got);
            let want = step["expect"].as_str().unwrap_or("?");
            let want_status = step["status"].as_u64().map(|s| s as u16);
            if kind != want || (want == "server_error" && status != want_status) {
                return Err(format!(
                    "{name}, step {i}: expected {want} {want_status:?}, got {got:?}"
                ));
            }
        } else {
            return Err(format!("{name}, step {i}: unknown step {step}"));
        }
    }
    match scenario::check(s, &nodes) {
        None => Ok(()),
        Some(what) => Err(format!("{name}: {what}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_behaviour_scenario() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors/scenarios.json");
    let all = scenario::load(&file).expect("the scenarios");
    assert!(all.len() >= 15, "only {} scenarios", all.len());
    let mut failed = Vec::new();
    for s in &all {
        match tokio::time::timeout(Duration::from_secs(20), run(s)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failed.push(e),
            Err(_) => failed.push(format!("{}: took over 20 s", s["name"])),
        }
    }
    assert!(
        failed.is_empty(),
        "{} scenarios failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}
