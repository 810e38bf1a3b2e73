//! A blocking connection to a running node, for the operator commands (`idgen get`,
//! `idgen decode --addr`): the protocol crate's sans-IO client (`idgen_protocol::client`) over a
//! standard TCP stream with timeouts, or TLS over it (rustls). The server crate needs no client library for this: the
//! handshake, the framing and the reading of every status come from the protocol crate.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use idgen_protocol::client::{Answer, ClientConn, Handshake};
use idgen_protocol::ServerHello;

use super::exit::Failure;
use super::tls::{ClientTls, Connector};

/// Connect, read and write timeouts of an operator command.
const TIMEOUT: Duration = Duration::from_secs(5);

/// The connection under the protocol: TCP, or TLS over TCP.
enum Stream {
    Tcp(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// An open connection after HELLO_OK.
pub struct NodeConn {
    stream: Stream,
    conn: ClientConn,
    /// Bytes read and not yet decoded.
    buf: Vec<u8>,
}

impl NodeConn {
    /// Connects to `addr` (`host:port`; every address it resolves to is tried in turn), over
    /// TLS if `tls` says so, and completes the handshake. TLS files that cannot be read are a
    /// [`Failure::Usage`]; a node that cannot be reached or refuses, a [`Failure::Runtime`].
    /// The caller names `addr` in its message; these name only what `addr` does not say (the
    /// address a host name resolved to).
    pub fn connect(addr: &str, tls: &ClientTls) -> Result<NodeConn, Failure> {
        let connector = tls.connector(addr, b"idgen/1").map_err(Failure::Usage)?;
        let mut last = "resolves to no address".to_string();
        let addrs = addr
            .to_socket_addrs()
            .map_err(|e| Failure::Runtime(e.to_string()))?;
        for a in addrs {
            match TcpStream::connect_timeout(&a, TIMEOUT) {
                Ok(stream) => {
                    return NodeConn::handshake(stream, connector.as_ref())
                        .map_err(Failure::Runtime)
                }
                Err(e) if a.to_string() == addr => last = e.to_string(),
                Err(e) => last = format!("{a}: {e}"),
            }
        }
        Err(Failure::Runtime(last))
    }

    fn handshake(tcp: TcpStream, tls: Option<&Connector>) -> Result<NodeConn, String> {
        let io = |e: std::io::Error| e.to_string();
        tcp.set_read_timeout(Some(TIMEOUT)).map_err(io)?;
        tcp.set_write_timeout(Some(TIMEOUT)).map_err(io)?;
        let _ = tcp.set_nodelay(true);
        let mut stream = match tls {
            None => Stream::Tcp(tcp),
            Some(c) => {
                let session = rustls::ClientConnection::new(Arc::clone(&c.config), c.name.clone())
                    .map_err(|e| format!("TLS: {e}"))?;
                let mut s = rustls::StreamOwned::new(session, tcp);
                while s.conn.is_handshaking() {
                    s.conn
                        .complete_io(&mut s.sock)
                        .map_err(|e| format!("TLS handshake: {e}"))?;
                }
                Stream::Tls(Box::new(s))
            }
        };
        let hs = Handshake::new();
        stream.write_all(&hs.hello()).map_err(io)?;
        let mut buf = Vec::new();
        loop {
            if let Some((conn, used)) = hs.receive(&buf).map_err(|e| e.to_string())? {
                buf.drain(..used);
                return Ok(NodeConn { stream, conn, buf });
            }
            read_more(&mut stream, &mut buf)?;
        }
    }

    /// The node's HELLO_OK.
    pub fn hello(&self) -> &ServerHello {
        self.conn.hello()
    }

    /// `count` IDs, in requests of at most the node's `max_batch`. Any refusal is an error
    /// naming its status and the server's message (an operator command asks one node only).
    pub fn ids(&mut self, count: u64) -> Result<Vec<u64>, String> {
        let max = u64::from(self.hello().max_batch.max(1));
        let mut ids = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
        let mut left = count;
        while left > 0 {
            let n = left.min(max);
            // n ≤ max_batch, a u32.
            let mut out = Vec::new();
            self.conn.get_ids(n as u32, &mut out);
            self.stream.write_all(&out).map_err(|e| e.to_string())?;
            loop {
                match self.conn.decode(&self.buf).map_err(|e| e.to_string())? {
                    Some((Answer::Ids(got), used)) => {
                        ids.extend(got.iter());
                        self.buf.drain(..used);
                        break;
                    }
                    Some((Answer::Refused(r), _)) => {
                        return Err(format!("{}: {}", r.status, r.message));
                    }
                    Some((other, _)) => return Err(format!("unexpected answer {other:?}")),
                    None => read_more(&mut self.stream, &mut self.buf)?,
                }
            }
            left -= n;
        }
        Ok(ids)
    }
}

/// Reads what the socket has onto `buf`; the end of the stream is an error (an answer is due).
fn read_more(stream: &mut Stream, buf: &mut Vec<u8>) -> Result<(), String> {
    let mut chunk = [0u8; 64 * 1024];
    match stream.read(&mut chunk) {
        Ok(0) => Err("the node closed the connection".to_string()),
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            Ok(())
        }
        Err(e) => Err(e.to_string()),
    }
}
