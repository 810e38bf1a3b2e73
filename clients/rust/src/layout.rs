//! Taking IDs apart with the layout the server announced.

use idgen_protocol::ServerHello;

/// The ID layout of a cluster, as announced in HELLO_OK: the epoch and the bit widths.
///
/// An ID is `0 | timestamp | worker | sequence` from the top bit down; the top
/// `region_bits` of the worker field are the region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    /// Unix time in milliseconds of timestamp 0.
    pub epoch_ms: u64,
    /// Width of the timestamp field.
    pub timestamp_bits: u8,
    /// Width of the worker field (region bits included).
    pub worker_bits: u8,
    /// Width of the sequence field.
    pub sequence_bits: u8,
    /// How many of the worker field's top bits are the region (0 = no regions).
    pub region_bits: u8,
}

/// One ID split into its fields (see [`Layout::decode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IdParts {
    /// Unix time in milliseconds: `epoch_ms + timestamp`.
    pub unix_ms: u64,
    /// The timestamp field: milliseconds since the layout's epoch.
    pub timestamp: u64,
    /// The whole worker field (region bits included).
    pub worker: u64,
    /// The top `region_bits` of the worker field (0 without regions).
    pub region: u64,
    /// The sequence field.
    pub sequence: u64,
}

impl Layout {
    /// The layout announced in `hello`.
    pub const fn from_hello(hello: &ServerHello) -> Self {
        Layout {
            epoch_ms: hello.epoch_ms,
            timestamp_bits: hello.timestamp_bits,
            worker_bits: hello.worker_bits,
            sequence_bits: hello.sequence_bits,
            region_bits: hello.region_bits,
        }
    }

    /// Split `id` into its fields (PROTOCOL.md section 10).
    pub const fn decode(&self, id: u64) -> IdParts {
        // One implementation of the arithmetic: the protocol crate's.
        let hello = ServerHello {
            version: 0,
            epoch_ms: self.epoch_ms,
            timestamp_bits: self.timestamp_bits,
            worker_bits: self.worker_bits,
            sequence_bits: self.sequence_bits,
            region_bits: self.region_bits,
            max_batch: 0,
            max_request_frame: 0,
            worker_first: 0,
            worker_count: 0,
            shard: 0,
        };
        let p = hello.decompose(id);
        IdParts {
            unix_ms: p.unix_ms,
            timestamp: p.ms_since_epoch,
            worker: p.worker,
            region: p.region,
            sequence: p.sequence,
        }
    }
}

impl From<&ServerHello> for Layout {
    fn from(hello: &ServerHello) -> Self {
        Layout::from_hello(hello)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_example() {
        let layout = Layout {
            epoch_ms: 1_704_067_200_000,
            timestamp_bits: 41,
            worker_bits: 10,
            sequence_bits: 12,
            region_bits: 0,
        };
        let p = layout.decode(264_543_142_405_996_545);
        assert_eq!(
            p,
            IdParts {
                unix_ms: 1_767_139_200_123,
                timestamp: 63_072_000_123,
                worker: 512,
                region: 0,
                sequence: 1,
            }
        );
        let regions = Layout {
            region_bits: 3,
            ..layout
        };
        assert_eq!(regions.decode(264_543_142_405_996_545).region, 4);
    }
}
