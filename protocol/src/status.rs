//! Wire status codes carried by ERROR frames.
//!
//! Every property of a status (its constant, name, whether the server closes the
//! connection after sending it, whether the client should retry on another node, and
//! the one-line meaning) comes from the single `status_table!` list below. The table in
//! `PROTOCOL.md` is checked against the same list by a unit test, so the two cannot drift.

use std::fmt;

/// A wire status code, as carried by an ERROR frame (`u16`, big-endian).
///
/// Codes are grouped by class:
///
/// * `100..=199` — the frame stream is broken; the server closes the connection.
/// * `200..=299` — the client's request was refused; the connection stays usable.
/// * `300..=399` — this node cannot serve now; try another node.
/// * `500..=599` — internal server fault; the server closes the connection.
///
/// Codes not known to this version fall back to their class (see
/// [`Status::closes_connection`] and [`Status::retry_elsewhere`]).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Status(pub u16);

/// One row of the status table, as exposed by [`Status::TABLE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusInfo {
    /// The status code.
    pub status: Status,
    /// The upper-case name, e.g. `"BAD_FRAME"`.
    pub name: &'static str,
    /// Whether the server closes the connection after sending this status.
    pub closes_connection: bool,
    /// Whether the client should retry the request on another node.
    pub retry_elsewhere: bool,
    /// One-line meaning (the spec table's last column).
    pub meaning: &'static str,
}

macro_rules! status_table {
    ($( $code:literal $name:ident closes=$closes:literal retry=$retry:literal $meaning:literal; )*) => {
        impl Status {
            $(
                #[doc = $meaning]
                pub const $name: Status = Status($code);
            )*

            /// Every known status, in table order (the order of `PROTOCOL.md`).
            pub const TABLE: &'static [StatusInfo] = &[
                $(StatusInfo {
                    status: Status($code),
                    name: stringify!($name),
                    closes_connection: $closes,
                    retry_elsewhere: $retry,
                    meaning: $meaning,
                },)*
            ];

            /// The table row for this code, if it is known to this version.
            pub const fn info(self) -> Option<&'static StatusInfo> {
                let mut i = 0;
                while i < Self::TABLE.len() {
                    if Self::TABLE[i].status.0 == self.0 {
                        return Some(&Self::TABLE[i]);
                    }
                    i += 1;
                }
                None
            }
        }
    };
}

status_table! {
    100 BAD_FRAME           closes=true  retry=false "Malformed frame: length 0, wrong length for a known opcode, bad magic, or garbage.";
    101 FRAME_TOO_LARGE     closes=true  retry=false "The length prefix exceeds the receiver's frame limit.";
    102 HANDSHAKE_REQUIRED  closes=true  retry=false "The first frame was not HELLO, or a second HELLO was sent.";
    103 UNSUPPORTED_VERSION closes=true  retry=false "HELLO offered no version the server supports.";
    200 INVALID_COUNT       closes=false retry=false "GET_IDS with count 0.";
    201 BATCH_TOO_LARGE     closes=false retry=false "GET_IDS with count above max_batch.";
    202 UNKNOWN_OPCODE      closes=false retry=false "Well-formed frame within the size limit with an unknown opcode; the frame is skipped.";
    203 UNKNOWN_SEQUENCE    closes=false retry=false "GET_VALUES named a sequence the cluster's namespace does not have (never created, or dropped).";
    204 INVALID_SEQUENCE_NAME closes=false retry=false "GET_VALUES with a name that is not 1 to 64 bytes of a-z, 0-9, '.', '_' and '-' starting with a letter or a digit.";
    205 INVALID_OPTION      closes=false retry=false "GET_IDS_WITH with an option the node cannot honour: an unknown option bit, an after that is not an ID of the cluster or lies more than 60 s ahead of the node's clock, a key that is not 1 to 64 visible ASCII bytes, or a key or masking the node has not enabled.";
    206 IDEMPOTENCY_KEY_REUSED closes=false retry=false "The idempotency key came with another request (count or options) within its window: use a new key.";
    207 IDEMPOTENCY_KEY_IN_FLIGHT closes=false retry=false "The first request with this idempotency key is still being answered: retry it on the same node shortly.";
    300 UNAVAILABLE_LEASE   closes=false retry=true  "The node holds no usable lease (lease ceiling reached or no lease).";
    301 UNAVAILABLE_CLOCK   closes=false retry=true  "The node's clock is at fault: it moved backwards further than the server waits out, or stood still.";
    302 SHUTTING_DOWN       closes=true  retry=true  "The server is shutting down; it closes after answering the requests it has read.";
    303 OVERLOADED          closes=true  retry=true  "Connection limit reached.";
    304 EXHAUSTED           closes=false retry=false "The layout's timestamp range has run out; no node of this cluster can help.";
    305 RANGE_CHANGED       closes=true  retry=true  "The node's worker range changed after this connection's HELLO_OK; it closes: reconnect to learn the new range, or try another node.";
    306 BUSY                closes=false retry=true  "Demand above this node's capacity: the request waited its turn for the node's limit and got no IDs; the connection stays open: retry later or on another node.";
    307 SEQUENCE_USED_UP    closes=false retry=false "The sequence reached its maximum: no node can hand out more of it until an operator raises the maximum.";
    308 SEQUENCE_UNAVAILABLE closes=false retry=true "The node could not reserve the sequence's values in time (its coordination store is slow, unreachable or contended); no value was handed out: retry later or on another node.";
    500 INTERNAL            closes=true  retry=false "Internal server error.";
}

impl Status {
    /// The upper-case name (`"BAD_FRAME"`), or `None` for a code unknown to this version.
    pub const fn name(self) -> Option<&'static str> {
        match self.info() {
            Some(info) => Some(info.name),
            None => None,
        }
    }

    /// Whether the server closes the connection after sending this status.
    ///
    /// Unknown codes use their class: `2xx` and `3xx` keep the connection open,
    /// everything else closes it.
    pub const fn closes_connection(self) -> bool {
        match self.info() {
            Some(info) => info.closes_connection,
            None => !matches!(self.0, 200..=399),
        }
    }

    /// Whether the client should retry the request on another node.
    ///
    /// Unknown codes use their class: `3xx` is "retry elsewhere", everything else is not.
    pub const fn retry_elsewhere(self) -> bool {
        match self.info() {
            Some(info) => info.retry_elsewhere,
            None => matches!(self.0, 300..=399),
        }
    }

    /// The numeric code.
    pub const fn code(self) -> u16 {
        self.0
    }
}

impl fmt::Display for Status {
    /// `BAD_FRAME(100)`, or `UNKNOWN(499)` for a code unknown to this version.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.name().unwrap_or("UNKNOWN"), self.0)
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Status::{}", self)
    }
}

impl From<u16> for Status {
    fn from(code: u16) -> Self {
        Status(code)
    }
}

impl From<Status> for u16 {
    fn from(status: Status) -> Self {
        status.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parse the status table of PROTOCOL.md (between the `status-table` markers) and check
    /// it is exactly the Rust table: same rows, same order, same flags, same meanings.
    #[test]
    fn protocol_md_table_matches_rust_table() {
        let md = include_str!("../PROTOCOL.md");
        let begin = md
            .find("<!-- status-table:begin -->")
            .expect("begin marker in PROTOCOL.md");
        let end = md
            .find("<!-- status-table:end -->")
            .expect("end marker in PROTOCOL.md");
        let rows: Vec<Vec<String>> = md[begin..end]
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with('|'))
            .map(|l| {
                l.trim_matches('|')
                    .split('|')
                    .map(|c| c.trim().trim_matches('`').to_string())
                    .collect()
            })
            .collect();
        assert!(rows.len() >= 2, "table header and separator present");
        assert_eq!(
            rows[0],
            [
                "code",
                "name",
                "closes connection",
                "retry elsewhere",
                "meaning"
            ]
        );
        let body = &rows[2..];
        let yes_no = |b: bool| if b { "yes" } else { "no" }.to_string();
        let expected: Vec<Vec<String>> = Status::TABLE
            .iter()
            .map(|i| {
                vec![
                    i.status.0.to_string(),
                    i.name.to_string(),
                    yes_no(i.closes_connection),
                    yes_no(i.retry_elsewhere),
                    i.meaning.to_string(),
                ]
            })
            .collect();
        if body != expected.as_slice() {
            let generated: String = expected
                .iter()
                .map(|r| {
                    format!(
                        "| `{}` | `{}` | {} | {} | {} |\n",
                        r[0], r[1], r[2], r[3], r[4]
                    )
                })
                .collect();
            panic!("PROTOCOL.md status table drifted from status.rs; expected rows:\n{generated}");
        }
    }

    #[test]
    fn classes_match_the_brief() {
        for info in Status::TABLE {
            let code = info.status.0;
            if (100..200).contains(&code) || code == 500 {
                assert!(info.closes_connection, "{}", info.status);
            }
            if (200..300).contains(&code) {
                assert!(!info.closes_connection, "{}", info.status);
            }
            // Every 3xx but the two that no node can help with is "try another node".
            let nowhere = [Status::EXHAUSTED, Status::SEQUENCE_USED_UP];
            assert_eq!(
                info.retry_elsewhere,
                (300..400).contains(&code) && !nowhere.contains(&info.status),
                "{}",
                info.status
            );
        }
    }

    #[test]
    fn names_display_and_unknown_codes() {
        assert_eq!(Status::BAD_FRAME.name(), Some("BAD_FRAME"));
        assert_eq!(Status::EXHAUSTED.to_string(), "EXHAUSTED(304)");
        assert_eq!(format!("{:?}", Status::INTERNAL), "Status::INTERNAL(500)");
        assert_eq!(Status(499).name(), None);
        assert_eq!(Status(499).to_string(), "UNKNOWN(499)");
        assert!(Status(199).closes_connection());
        assert!(!Status(250).closes_connection());
        assert!(!Status(399).closes_connection());
        assert!(Status(399).retry_elsewhere());
        assert!(Status(599).closes_connection());
        assert!(!Status(599).retry_elsewhere());
        assert!(Status::SHUTTING_DOWN.closes_connection());
        assert!(Status::OVERLOADED.retry_elsewhere());
        assert!(!Status::EXHAUSTED.retry_elsewhere());
        assert!(!Status::EXHAUSTED.closes_connection());
        assert_eq!(u16::from(Status::from(201)), 201);
        assert!(Status::RANGE_CHANGED.closes_connection());
        assert!(Status::RANGE_CHANGED.retry_elsewhere());
        assert!(!Status::BUSY.closes_connection());
        assert!(Status::BUSY.retry_elsewhere());
        assert_eq!(Status::TABLE.len(), 22);
    }
}
