//! The client's error type.

use std::fmt;
use std::sync::Arc;

use idgen_protocol::{FrameError, Status};

/// Everything a client call can fail with.
///
/// `Error` is `Clone` (I/O errors are shared behind an [`Arc`]) because one connection
/// failure is reported to every caller that was waiting on that connection.
///
/// Retrying on another node is always safe: IDs are never re-sent, so a request that
/// failed (or timed out) cannot produce a duplicate elsewhere.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The transport failed: connect refused, reset, or the server closed the connection
    /// with this request unanswered (kind [`std::io::ErrorKind::UnexpectedEof`]). The
    /// connection is unusable afterwards.
    #[error("i/o error: {0}")]
    Io(#[source] Arc<std::io::Error>),
    /// No answer within the connect timeout (for [`connect`](crate::Client::connect)) or
    /// the request timeout (for a call). A timed-out call leaves the connection usable:
    /// its late answer is read and discarded.
    #[error("timed out")]
    Timeout,
    /// The connection had already failed (or the client is shutting down); the request was
    /// not sent.
    #[error("connection closed")]
    Closed,
    /// The server sent a malformed frame; the client dropped the connection.
    #[error("bad frame from server: {0}")]
    Protocol(#[from] FrameError),
    /// The server sent a well-formed frame that does not answer the request it stands for
    /// (a PONG for GET_IDS, a wrong ID count, a wrong PONG token, an unexpected HELLO_OK, an
    /// unsupported negotiated version, an answer with no request outstanding). The client
    /// dropped the connection.
    #[error("unexpected response from server: {0}")]
    UnexpectedResponse(String),
    /// The server answered with an ERROR frame. Whether the connection survives follows
    /// from `status` (see [`Error::closes_connection`]); callers should act on `status`
    /// only, `message` is for logs.
    #[error("server error {status}: {message}")]
    Server {
        /// The wire status code.
        status: Status,
        /// The server's human-readable message.
        message: String,
    },
    /// A TLS connection failed: the handshake (the server's certificate did not verify, the
    /// server refused this client's certificate or its absence, the peer does not speak
    /// TLS), or the TLS configuration could not be made
    /// (`TlsConfig`, feature `tls`). [`TlsError::kind`] names the
    /// cause. The connection (if any) is unusable.
    #[error("TLS: {0}")]
    Tls(TlsError),
    /// An argument of the call is out of its range: a sequence name that is not 1 to 64
    /// bytes of `a-z`, `0-9`, `.`, `_` and `-` starting with a letter or a digit, or a count
    /// of values outside `1..=max_batch` (and at most 1048576). Nothing was sent; the
    /// message says what is wrong.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The node negotiated a protocol version without the call's requests: named sequences
    /// need version 3, and a node that answered HELLO with version 1 or 2 has none over
    /// this protocol. Nothing was sent, and a [`Pool`](crate::Pool) tries no other node for
    /// it. The connection stays usable for IDs.
    #[error("the node speaks protocol version {version}; {} need version {required}", needs(.required))]
    NodeVersion {
        /// The version the node negotiated.
        version: u16,
        /// The version the call needs.
        required: u16,
    },
    /// A call with an idempotency key failed on the one node its key picks (a
    /// [`Pool`](crate::Pool)) in a way that would have sent a call without a key to another
    /// node. It was not: another node would issue new IDs. Retry it later with the same key
    /// (within the node's window it answers the same IDs), or without the key elsewhere (new
    /// IDs).
    #[error("the idempotency key's node {node} failed, and the call was not tried on another node (that would issue new IDs): {cause}")]
    KeyNodeFailed {
        /// The node the key picks.
        node: String,
        /// What the node (or the connection to it) answered.
        cause: Box<Error>,
    },
}

/// What a call that needs protocol `required` asks for: named sequences (3), UUIDs (4), calls
/// with options (5).
fn needs(required: &u16) -> &'static str {
    if *required >= crate::client::WITH_VERSION {
        "after, idempotency keys and masked IDs"
    } else if *required >= crate::client::UUIDS_VERSION {
        "UUIDs"
    } else {
        "named sequences"
    }
}

impl Error {
    /// `true` for a server status that says "this node cannot serve now, try another
    /// node" (`3xx` except `EXHAUSTED` and `SEQUENCE_USED_UP`, i.e.
    /// [`Status::retry_elsewhere`]).
    ///
    /// Transport failures ([`Error::Io`], [`Error::Closed`], [`Error::Timeout`]) are not
    /// included, although retrying them on another node is safe too.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Server { status, .. } if status.retry_elsewhere())
    }

    /// Whether the connection this error came from is unusable now: for
    /// [`Error::Server`], [`Status::closes_connection`]; `true` for every transport or
    /// protocol failure; `false` for [`Error::Timeout`] and for the refusals made before
    /// sending ([`Error::InvalidArgument`], [`Error::NodeVersion`]).
    pub fn closes_connection(&self) -> bool {
        match self {
            Error::Server { status, .. } => status.closes_connection(),
            Error::KeyNodeFailed { cause, .. } => cause.closes_connection(),
            Error::Timeout | Error::InvalidArgument(_) | Error::NodeVersion { .. } => false,
            Error::Io(_)
            | Error::Closed
            | Error::Protocol(_)
            | Error::UnexpectedResponse(_)
            | Error::Tls(_) => true,
        }
    }

    /// The TLS failure, for [`Error::Tls`].
    pub fn tls(&self) -> Option<&TlsError> {
        match self {
            Error::Tls(e) => Some(e),
            _ => None,
        }
    }

    /// The wire status: the server's for [`Error::Server`], the fault's for
    /// [`Error::Protocol`], `None` otherwise.
    pub fn status(&self) -> Option<Status> {
        match self {
            Error::Server { status, .. } => Some(*status),
            Error::Protocol(e) => Some(e.status()),
            Error::KeyNodeFailed { cause, .. } => cause.status(),
            _ => None,
        }
    }
}

impl From<std::io::Error> for Error {
    /// [`Error::Io`], or [`Error::Tls`] for the I/O error of a TLS stream that carries a TLS
    /// failure.
    fn from(e: std::io::Error) -> Self {
        #[cfg(feature = "tls")]
        if let Some(tls) = crate::tls::classify(&e) {
            return Error::Tls(tls);
        }
        Error::Io(Arc::new(e))
    }
}

/// What made a TLS connection fail, from [`TlsError::kind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TlsErrorKind {
    /// The node's certificate does not chain to any certificate of the CA bundle (the wrong
    /// bundle, or a certificate from another authority).
    UnknownIssuer,
    /// The node's certificate is valid, but not for the server name verified (the host
    /// dialed, or the name set with `TlsConfigBuilder::server_name`).
    NameMismatch,
    /// The node's certificate has expired.
    Expired,
    /// The node's certificate is not valid yet.
    NotYetValid,
    /// The node's certificate is unacceptable for another reason (bad signature, not for
    /// server authentication, revoked, malformed).
    BadCertificate,
    /// The node requires a client certificate and this client sent none.
    ClientCertificateRequired,
    /// The node rejected this client's certificate (from an authority it does not trust,
    /// expired, revoked, or otherwise unacceptable).
    ClientCertificateRejected,
    /// Any other handshake failure: no common protocol version or cipher suite, no common
    /// ALPN protocol, a peer that does not speak TLS (e.g. a plaintext port), a malformed
    /// message.
    Handshake,
    /// The local TLS configuration is unusable: an unreadable or malformed PEM file, no
    /// certificate in the CA bundle, a key that does not match its certificate, a server name
    /// that is neither a DNS name nor an IP address.
    Config,
}

impl TlsErrorKind {
    /// Whether the node's certificate failed verification (the first five kinds).
    pub fn is_server_certificate(self) -> bool {
        matches!(
            self,
            TlsErrorKind::UnknownIssuer
                | TlsErrorKind::NameMismatch
                | TlsErrorKind::Expired
                | TlsErrorKind::NotYetValid
                | TlsErrorKind::BadCertificate
        )
    }
}

/// A TLS failure: its [`kind`](TlsError::kind) and a message for logs (which names the
/// cause, the file or the server name concerned, never key material).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsError {
    kind: TlsErrorKind,
    message: String,
}

impl TlsError {
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    pub(crate) fn new(kind: TlsErrorKind, message: impl Into<String>) -> TlsError {
        TlsError {
            kind,
            message: message.into(),
        }
    }

    /// What failed.
    pub fn kind(&self) -> TlsErrorKind {
        self.kind
    }

    /// The human-readable description.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TlsError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_status_maps() {
        for info in Status::TABLE {
            let e = Error::Server {
                status: info.status,
                message: String::new(),
            };
            assert_eq!(e.is_unavailable(), info.retry_elsewhere, "{}", info.name);
            assert_eq!(
                e.closes_connection(),
                info.closes_connection,
                "{}",
                info.name
            );
            assert_eq!(e.status(), Some(info.status));
        }
        // Unknown codes follow their class.
        let server = |code| Error::Server {
            status: Status(code),
            message: String::new(),
        };
        assert!(!server(299).closes_connection() && !server(299).is_unavailable());
        assert!(!server(399).closes_connection() && server(399).is_unavailable());
        assert!(server(499).closes_connection() && !server(499).is_unavailable());
        assert!(Error::Closed.closes_connection());
        assert!(!Error::Timeout.closes_connection());
        let invalid = Error::InvalidArgument("n is 0".into());
        assert!(!invalid.closes_connection() && !invalid.is_unavailable());
        assert_eq!(invalid.status(), None);
        assert_eq!(invalid.to_string(), "invalid argument: n is 0");
        let old = Error::NodeVersion {
            version: 2,
            required: 3,
        };
        assert!(!old.closes_connection() && !old.is_unavailable());
        assert_eq!(old.status(), None);
        assert_eq!(
            old.to_string(),
            "the node speaks protocol version 2; named sequences need version 3"
        );
        assert_eq!(
            Error::Protocol(FrameError::EmptyFrame).status(),
            Some(Status::BAD_FRAME)
        );
    }
}
