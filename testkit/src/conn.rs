//! One blocking protocol connection for tests: the handshake is the protocol crate's
//! (`idgen_protocol::client::Handshake`); after it, any request (valid or not) can be sent and
//! every answer is read as the server sent it.
//!
//! The `open`/`recv`/`get_ids` family panics on a transport fault or a bad frame (a test that
//! does not expect one fails with the reason); the `try_` family returns it as a message, for
//! tests that inject faults and keep going.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use bytes::BytesMut;
use idgen_protocol::client::Handshake;
use idgen_protocol::{
    decode_response, encode_request, max_response_frame, Request, Response, ServerHello, Status,
    DEFAULT_MAX_BATCH,
};

/// Limits of one test connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// For the TCP connect.
    pub connect: Duration,
    /// For each read and each write.
    pub io: Duration,
}

impl Default for Timeouts {
    /// 5 s to connect, 10 s per read or write.
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(5),
            io: Duration::from_secs(10),
        }
    }
}

/// A blocking protocol connection, plaintext or TLS.
pub struct TestConn {
    /// The TCP connection (under the TLS session, on a TLS connection).
    pub stream: TcpStream,
    /// The TLS session, on a TLS connection.
    pub tls: Option<Box<rustls::ClientConnection>>,
    buf: BytesMut,
    max_frame: u32,
    /// The server's HELLO_OK, once the handshake is done.
    pub hello: Option<ServerHello>,
}

impl TestConn {
    /// Connects without a handshake (panics if it cannot).
    pub fn raw(addr: SocketAddr) -> TestConn {
        Self::try_raw(addr, Timeouts::default()).unwrap_or_else(|e| panic!("{addr}: {e}"))
    }

    /// Connects without a handshake.
    pub fn try_raw(addr: SocketAddr, timeouts: Timeouts) -> Result<TestConn, String> {
        let stream = TcpStream::connect_timeout(&addr, timeouts.connect)
            .map_err(|e| format!("connect: {e}"))?;
        stream
            .set_read_timeout(Some(timeouts.io))
            .map_err(|e| e.to_string())?;
        stream
            .set_write_timeout(Some(timeouts.io))
            .map_err(|e| e.to_string())?;
        let _ = stream.set_nodelay(true);
        Ok(TestConn {
            stream,
            tls: None,
            buf: BytesMut::new(),
            max_frame: max_response_frame(DEFAULT_MAX_BATCH),
            hello: None,
        })
    }

    /// Connects and completes the handshake, speaking protocol version 1.
    pub fn open(addr: SocketAddr) -> TestConn {
        Self::open_version(addr, 1)
    }

    /// Connects offering versions `1..=max_version`.
    pub fn open_version(addr: SocketAddr, max_version: u16) -> TestConn {
        Self::try_open(
            addr,
            Handshake::offering(1, max_version),
            Timeouts::default(),
        )
        .unwrap_or_else(|e| panic!("{addr}: {e}"))
    }

    /// Connects and completes the TLS handshake (verifying the server's certificate for
    /// `server_name` under `config`), without the protocol's handshake. `Err` carries the
    /// TLS failure.
    pub fn try_raw_tls(
        addr: SocketAddr,
        config: std::sync::Arc<rustls::ClientConfig>,
        server_name: &str,
        timeouts: Timeouts,
    ) -> Result<TestConn, String> {
        let mut c = Self::try_raw(addr, timeouts)?;
        let name = rustls::pki_types::ServerName::try_from(server_name.to_owned())
            .map_err(|e| format!("server name {server_name:?}: {e}"))?;
        let mut tls =
            rustls::ClientConnection::new(config, name).map_err(|e| format!("TLS: {e}"))?;
        while tls.is_handshaking() {
            tls.complete_io(&mut c.stream)
                .map_err(|e| format!("TLS handshake: {e}"))?;
        }
        c.tls = Some(Box::new(tls));
        Ok(c)
    }

    /// Connects over TLS and completes `handshake`, as [`TestConn::try_open`].
    pub fn try_open_tls(
        addr: SocketAddr,
        config: std::sync::Arc<rustls::ClientConfig>,
        server_name: &str,
        handshake: Handshake,
        timeouts: Timeouts,
    ) -> Result<TestConn, String> {
        let c = Self::try_raw_tls(addr, config, server_name, timeouts)?;
        c.hello_with(handshake)
    }

    /// Connects and completes `handshake`; `Err` says what went wrong (connect, refusal, a
    /// bad or unexpected answer, a close).
    pub fn try_open(
        addr: SocketAddr,
        handshake: Handshake,
        timeouts: Timeouts,
    ) -> Result<TestConn, String> {
        Self::try_raw(addr, timeouts)?.hello_with(handshake)
    }

    fn hello_with(self, handshake: Handshake) -> Result<TestConn, String> {
        let mut c = self;
        c.write_bytes(&handshake.hello())
            .map_err(|e| format!("write: {e}"))?;
        loop {
            match handshake.receive(&c.buf) {
                Ok(Some((conn, used))) => {
                    let _ = c.buf.split_to(used);
                    c.max_frame = conn.max_frame();
                    c.hello = Some(*conn.hello());
                    return Ok(c);
                }
                Ok(None) => c.read_more()?,
                Err(e) => return Err(format!("HELLO: {e}")),
            }
        }
    }

    /// The HELLO_OK (panics before the handshake).
    pub fn hello(&self) -> &ServerHello {
        self.hello
            .as_ref()
            .expect("no handshake on this connection")
    }

    pub fn send(&mut self, req: &Request) {
        self.try_send(req).unwrap_or_else(|e| panic!("{e}"));
    }

    pub fn try_send(&mut self, req: &Request) -> Result<(), String> {
        let mut out = BytesMut::new();
        encode_request(req, &mut out);
        self.write_bytes(&out).map_err(|e| format!("write: {e}"))
    }

    pub fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.write_bytes(bytes)
    }

    /// Writes all of `bytes`, through the TLS session on a TLS connection.
    fn write_bytes(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match &mut self.tls {
            None => self.stream.write_all(bytes),
            Some(tls) => {
                let mut s = rustls::Stream::new(tls.as_mut(), &mut self.stream);
                s.write_all(bytes)?;
                s.flush()
            }
        }
    }

    /// Reads what has arrived (plaintext, after TLS), as `Read::read`.
    fn read_bytes(&mut self, chunk: &mut [u8]) -> std::io::Result<usize> {
        match &mut self.tls {
            None => self.stream.read(chunk),
            Some(tls) => match rustls::Stream::new(tls.as_mut(), &mut self.stream).read(chunk) {
                // A close without close_notify: the server went away all the same.
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(0),
                other => other,
            },
        }
    }

    /// The next answer; `None` when the server closed (or reset) the connection. Panics on a
    /// bad frame or another read error.
    pub fn recv(&mut self) -> Option<Response> {
        loop {
            match decode_response(&self.buf, self.max_frame) {
                Ok(Some((resp, used))) => {
                    let owned = resp.into_owned();
                    let _ = self.buf.split_to(used);
                    return Some(owned);
                }
                Ok(None) => {}
                Err(e) => panic!("server sent a bad frame: {e}"),
            }
            let mut chunk = [0u8; 65536];
            match self.read_bytes(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if e.kind() == std::io::ErrorKind::ConnectionReset
                        || e.kind() == std::io::ErrorKind::BrokenPipe =>
                {
                    return None
                }
                Err(e) => panic!("read: {e}"),
            }
        }
    }

    /// The next answer; `Err` for a bad frame, a close or a read error (timeouts included).
    pub fn try_recv(&mut self) -> Result<Response, String> {
        loop {
            match decode_response(&self.buf, self.max_frame) {
                Ok(Some((resp, used))) => {
                    let owned = resp.into_owned();
                    let _ = self.buf.split_to(used);
                    return Ok(owned);
                }
                Ok(None) => self.read_more()?,
                Err(e) => return Err(format!("bad frame from the server: {e}")),
            }
        }
    }

    fn read_more(&mut self) -> Result<(), String> {
        let mut chunk = [0u8; 65536];
        match self.read_bytes(&mut chunk) {
            Ok(0) => Err("closed by the server".into()),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(())
            }
            Err(e) => Err(format!("read: {e}")),
        }
    }

    /// GET_IDS: the IDs, or the error status and message. Panics on anything else.
    pub fn get_ids(&mut self, n: u32) -> Result<Vec<u64>, (Status, String)> {
        self.send(&Request::GetIds { count: n });
        match self.recv() {
            Some(Response::Ids(ids)) => Ok(ids),
            Some(Response::Error { status, message }) => Err((status, message)),
            other => panic!("unexpected answer {other:?}"),
        }
    }

    /// GET_IDS without panicking: `Ok(Ok(ids))`, `Ok(Err((status, message)))` for an ERROR,
    /// `Err` for a transport fault, a bad frame or an answer of another kind.
    pub fn try_get_ids(&mut self, n: u32) -> Result<Result<Vec<u64>, (Status, String)>, String> {
        self.try_send(&Request::GetIds { count: n })?;
        match self.try_recv()? {
            Response::Ids(ids) => Ok(Ok(ids)),
            Response::Error { status, message } => Ok(Err((status, message))),
            other => Err(format!("GET_IDS answered with {other:?}")),
        }
    }
}
