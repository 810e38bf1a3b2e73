//! A blocking connection to a running node, for the operator commands (`idgen get`,
//! `idgen decode --addr`): the protocol crate's sans-IO client (`idgen_protocol::client`) over a
//! standard TCP stream with timeouts. The server crate needs no client library for this: the
//! handshake, the framing and the reading of every status come from the protocol crate.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use idgen_protocol::client::{Answer, ClientConn, Handshake};
use idgen_protocol::ServerHello;

/// Connect, read and write timeouts of an operator command.
const TIMEOUT: Duration = Duration::from_secs(5);

/// An open connection after HELLO_OK.
pub struct NodeConn {
    stream: TcpStream,
    conn: ClientConn,
    /// Bytes read and not yet decoded.
    buf: Vec<u8>,
}

impl NodeConn {
    /// Connects to `addr` (`host:port`; every address it resolves to is tried in turn) and
    /// completes the handshake.
    pub fn connect(addr: &str) -> Result<NodeConn, String> {
        let mut last = format!("{addr}: resolves to no address");
        let addrs = addr.to_socket_addrs().map_err(|e| format!("{addr}: {e}"))?;
        for a in addrs {
            match TcpStream::connect_timeout(&a, TIMEOUT) {
                Ok(stream) => return NodeConn::handshake(stream),
                Err(e) => last = format!("{a}: {e}"),
            }
        }
        Err(last)
    }

    fn handshake(mut stream: TcpStream) -> Result<NodeConn, String> {
        let io = |e: std::io::Error| e.to_string();
        stream.set_read_timeout(Some(TIMEOUT)).map_err(io)?;
        stream.set_write_timeout(Some(TIMEOUT)).map_err(io)?;
        let _ = stream.set_nodelay(true);
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
fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<(), String> {
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
