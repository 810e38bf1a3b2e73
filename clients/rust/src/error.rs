//! The client's error type.

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
}

impl Error {
    /// `true` for a server status that says "this node cannot serve now, try another
    /// node" (`3xx` except `EXHAUSTED`, i.e. [`Status::retry_elsewhere`]).
    ///
    /// Transport failures ([`Error::Io`], [`Error::Closed`], [`Error::Timeout`]) are not
    /// included, although retrying them on another node is safe too.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Server { status, .. } if status.retry_elsewhere())
    }

    /// Whether the connection this error came from is unusable now: for
    /// [`Error::Server`], [`Status::closes_connection`]; `true` for every transport or
    /// protocol failure; `false` for [`Error::Timeout`].
    pub fn closes_connection(&self) -> bool {
        match self {
            Error::Server { status, .. } => status.closes_connection(),
            Error::Timeout => false,
            Error::Io(_) | Error::Closed | Error::Protocol(_) | Error::UnexpectedResponse(_) => {
                true
            }
        }
    }

    /// The wire status: the server's for [`Error::Server`], the fault's for
    /// [`Error::Protocol`], `None` otherwise.
    pub fn status(&self) -> Option<Status> {
        match self {
            Error::Server { status, .. } => Some(*status),
            Error::Protocol(e) => Some(e.status()),
            _ => None,
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(Arc::new(e))
    }
}

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
        assert_eq!(
            Error::Protocol(FrameError::EmptyFrame).status(),
            Some(Status::BAD_FRAME)
        );
    }
}
