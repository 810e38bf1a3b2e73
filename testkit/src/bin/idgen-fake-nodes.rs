//! `idgen-fake-nodes SCENARIOS.json NAME`: the fake nodes of one behaviour scenario
//! (`clients/vectors/SCENARIOS.md`), for every client's scenario runner.
//!
//! Starts the scenario's nodes on 127.0.0.1 (each a [`FakeServer`](idgen_testkit::fake::FakeServer) speaking protocol version
//! 1, its GET_IDS answered from its own range of IDs or as its script says), prints
//! `nodes ADDR ADDR ...`, then reads commands on stdin, one per line, answering each on one
//! line:
//!
//! | command | does | answer |
//! |---|---|---|
//! | `kill N` | node N closes its connections and every new one | `ok` |
//! | `revive N` | node N serves again | `ok` |
//! | `check` | compares what each node saw with the scenario's `nodes_after` | `ok`, or `mismatch WHAT` |
//! | `report` | what each node saw | one JSON line |
//!
//! It exits when stdin closes. A scenario it cannot read is exit status 2.

use std::io::{BufRead, Write};
use std::process::ExitCode;

use idgen_testkit::scenario;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [file, name] = args.as_slice() else {
        eprintln!("usage: idgen-fake-nodes SCENARIOS.json NAME");
        return ExitCode::from(2);
    };
    let found = scenario::load(std::path::Path::new(file))
        .map(|all| all.into_iter().find(|s| s["name"] == name.as_str()));
    let scn = match found {
        Ok(Some(s)) => s,
        Ok(None) => {
            eprintln!("idgen-fake-nodes: no scenario {name:?} in {file}");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("idgen-fake-nodes: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let nodes = match rt.block_on(scenario::start_nodes(&scn)) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("idgen-fake-nodes: {name}: {e}");
            return ExitCode::from(2);
        }
    };
    let addrs: Vec<String> = nodes.iter().map(|n| n.addr.to_string()).collect();
    let mut out = std::io::stdout().lock();
    if writeln!(out, "nodes {}", addrs.join(" "))
        .and_then(|()| out.flush())
        .is_err()
    {
        return ExitCode::FAILURE;
    }
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        let node = |w: Option<&&str>| {
            w.and_then(|n| n.parse::<usize>().ok())
                .and_then(|n| nodes.get(n))
        };
        let answer = match words.as_slice() {
            ["kill", n] => match node(Some(n)) {
                Some(s) => {
                    s.control.kill();
                    "ok".to_string()
                }
                None => format!("error no node {n}"),
            },
            ["revive", n] => match node(Some(n)) {
                Some(s) => {
                    s.control.revive();
                    "ok".to_string()
                }
                None => format!("error no node {n}"),
            },
            ["check"] => match scenario::check(&scn, &nodes) {
                None => "ok".to_string(),
                Some(what) => format!("mismatch {what}"),
            },
            ["report"] => scenario::report(&nodes).to_string(),
            [] => continue,
            _ => format!("error unknown command {line:?}"),
        };
        if writeln!(out, "{answer}")
            .and_then(|()| out.flush())
            .is_err()
        {
            break;
        }
    }
    drop(nodes);
    rt.shutdown_background();
    ExitCode::SUCCESS
}
