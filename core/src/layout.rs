//! The ID model: the bit layout `0 | timestamp | worker | sequence`, its validation, the
//! decomposed parts, worker ranges and the text forms. Defined once in the `idgen-id` crate,
//! which the wire protocol and the clients share; re-exported here for the server's modules.

pub use idgen_id::{
    forms, Id, Layout, LayoutError, Parts, WorkerRange, DEFAULT_EPOCH_MS, DEFAULT_SEQUENCE_BITS,
    DEFAULT_TIMESTAMP_BITS, DEFAULT_WORKER_BITS, PAYLOAD_BITS,
};
