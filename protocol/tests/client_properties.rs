//! Property tests of the sans-IO client (`idgen_protocol::client`): a pipelined conversation
//! read from a stream split anywhere gives the same answers as read whole, a closing ERROR
//! ends it, and arbitrary bytes never panic the handshake or the answer reader.

use idgen_id::WorkerRange;
use idgen_protocol::client::{After, Answer, Awaits, ClientConn, Handshake};
use idgen_protocol::{encode_error, encode_hello_ok, encode_ids, encode_pong, encode_ranges};
use idgen_protocol::{ServerHello, Status};
use proptest::prelude::*;

const HELLO: ServerHello = ServerHello {
    version: 2,
    epoch_ms: 1_704_067_200_000,
    timestamp_bits: 41,
    worker_bits: 10,
    sequence_bits: 12,
    region_bits: 0,
    max_batch: 64,
    max_request_frame: 64,
    workers: WorkerRange::new(0, 1024),
    shard: 0,
};

fn open() -> ClientConn {
    let mut wire = Vec::new();
    encode_hello_ok(&HELLO, &mut wire).unwrap();
    Handshake::new().receive(&wire).unwrap().unwrap().0
}

/// One request and how the server answers it: with what it asked for, or with an ERROR.
#[derive(Debug, Clone)]
enum Step {
    Ids(u32),
    Ranges(Vec<u32>),
    Ping(u64),
    Error(Awaits, u16),
}

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (1u32..=64).prop_map(Step::Ids),
        prop::collection::vec(1u32..=8, 1..5).prop_map(Step::Ranges),
        any::<u64>().prop_map(Step::Ping),
        (1u32..=64, any::<u16>()).prop_map(|(n, s)| Step::Error(Awaits::Ids(n), s)),
    ]
}

/// The request to record and the server's answer bytes.
fn play(step: &Step, wire: &mut Vec<u8>) -> Awaits {
    match step {
        Step::Ids(n) => {
            let ids: Vec<u64> = (0..u64::from(*n)).map(|i| 1000 + i).collect();
            encode_ids(&ids, wire);
            Awaits::Ids(*n)
        }
        Step::Ranges(counts) => {
            let mut first = 1u64 << 40;
            let runs: Vec<(u64, u32)> = counts
                .iter()
                .map(|&c| {
                    let run = (first, c);
                    first += u64::from(c) + 1;
                    run
                })
                .collect();
            encode_ranges(&runs, wire);
            Awaits::Ranges(counts.iter().sum())
        }
        Step::Ping(t) => {
            encode_pong(*t, wire);
            Awaits::Pong(*t)
        }
        Step::Error(awaits, status) => {
            encode_error(Status(*status), "refused", wire);
            *awaits
        }
    }
}

/// Decodes everything in `wire`, fed in pieces cut at `cuts`; stops at the first closing
/// ERROR. Returns a summary of each answer.
fn read_all(conn: &mut ClientConn, wire: &[u8], cuts: &[usize]) -> Vec<String> {
    let mut buf = Vec::new();
    let mut fed = 0;
    let mut got = Vec::new();
    let mut ends: Vec<usize> = cuts.iter().map(|&c| c % (wire.len() + 1)).collect();
    ends.push(wire.len());
    ends.sort_unstable();
    for end in ends {
        buf.extend_from_slice(&wire[fed..end.max(fed)]);
        fed = fed.max(end);
        while let Some((answer, used)) = conn.decode(&buf).expect("a well-formed conversation") {
            got.push(match answer {
                Answer::Ids(ids) => format!("ids {}", ids.len()),
                Answer::Ranges(r) => format!("ranges {}", r.total()),
                Answer::Pong(t) => format!("pong {t}"),
                Answer::Values(v) => format!("values {}", v.len()),
                Answer::Uuids(u) => format!("uuids {}", u.len()),
                Answer::MaskedIds(m) => format!("masked {}", m.ids().len()),
                Answer::Refused(r) => format!("refused {} {:?}", r.status.code(), r.after),
            });
            buf.drain(..used);
            if conn.is_closed() {
                return got;
            }
        }
    }
    got
}

proptest! {
    #[test]
    fn split_anywhere_reads_like_whole(steps in prop::collection::vec(arb_step(), 1..20), cuts in prop::collection::vec(any::<usize>(), 0..10)) {
        let mut wire = Vec::new();
        let mut a = open();
        let mut b = open();
        for s in &steps {
            let awaits = play(s, &mut wire);
            a.sent(awaits);
            b.sent(awaits);
        }
        let whole = read_all(&mut a, &wire, &[]);
        let split = read_all(&mut b, &wire, &cuts);
        prop_assert_eq!(&whole, &split);
        // Answers up to and including the first closing ERROR, nothing after it.
        let closing = steps.iter().position(|s| matches!(s, Step::Error(_, st) if Status(*st).closes_connection()));
        prop_assert_eq!(whole.len(), closing.map_or(steps.len(), |i| i + 1));
        prop_assert_eq!(a.is_closed(), closing.is_some());
        prop_assert_eq!(a.outstanding(), steps.len() - whole.len());
        for (s, g) in steps.iter().zip(&whole) {
            if let Step::Error(_, st) = s {
                prop_assert_eq!(g, &format!("refused {st} {:?}", After::of(Status(*st))));
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600), awaits in prop::collection::vec(1u32..=64, 0..4)) {
        for hs in [Handshake::new(), Handshake::offering(1, 1)] {
            if let Ok(Some((_, used))) = hs.receive(&bytes) {
                prop_assert!(used <= bytes.len());
            }
        }
        let mut conn = open();
        for n in awaits {
            conn.sent(Awaits::Ids(n));
        }
        let mut at = 0;
        while let Ok(Some((_, used))) = conn.decode(&bytes[at..]) {
            prop_assert!(used >= 5);
            at += used;
            if conn.is_closed() {
                break;
            }
        }
        prop_assert!(at <= bytes.len());
    }
}
