//! A blocking client for code without an async runtime.
//!
//! [`Client`] wraps the async [`crate::Client`] and runs it on a private current-thread
//! Tokio runtime on a background thread. Calls can be made from any thread (also from
//! one that is itself inside a Tokio runtime, although blocking there stalls that
//! runtime's thread); they are pipelined on the one connection like the async client's.
//!
//! ```no_run
//! let client = idgen_client::blocking::Client::connect("127.0.0.1:7700")?;
//! let id = client.next_id()?;
//! let batch = client.next_ids(100)?;
//! assert!(batch[0] > id);
//! # Ok::<(), idgen_client::Error>(())
//! ```

use std::future::Future;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use idgen_protocol::ServerHello;
use tokio::runtime::Handle;

use crate::{ClientOptions, Error, Layout};

/// A blocking idgen client over one TCP connection.
///
/// Cheap to clone; all clones share the connection and the background thread. The thread
/// and its runtime stop, and the connection closes, when the last clone is dropped.
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: crate::Client,
    handle: Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            // The runtime thread only waits for `stop`; it ends promptly.
            let _ = thread.join();
        }
    }
}

impl Client {
    /// Connect to `addr` with default [`ClientOptions`], and do the HELLO handshake.
    pub fn connect(addr: impl ToSocketAddrs) -> Result<Client, Error> {
        Self::connect_with(addr, ClientOptions::default())
    }

    /// Connect to `addr` with `options`, and do the HELLO handshake. `addr` is resolved
    /// on the calling thread; each resolved address is tried in turn.
    pub fn connect_with(addr: impl ToSocketAddrs, options: ClientOptions) -> Result<Client, Error> {
        let addrs: Vec<SocketAddr> = addr.to_socket_addrs()?.collect();
        let (init_tx, init_rx) = std::sync::mpsc::sync_channel(1);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("idgen-client".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = init_tx.send(Err(Error::from(e)));
                        return;
                    }
                };
                runtime.block_on(async move {
                    match crate::Client::connect_with(&addrs[..], options).await {
                        Ok(client) => {
                            let _ = init_tx.send(Ok((client, Handle::current())));
                            // Drive the connection's tasks until the last clone drops.
                            let _ = stop_rx.await;
                        }
                        Err(e) => {
                            let _ = init_tx.send(Err(e));
                        }
                    }
                });
            })?;
        let (client, handle) = match init_rx.recv() {
            Ok(Ok(pair)) => pair,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(Error::Closed);
            }
        };
        Ok(Client {
            inner: Arc::new(Inner {
                client,
                handle,
                stop: Some(stop_tx),
                thread: Some(thread),
            }),
        })
    }

    /// One ID. See [`crate::Client::next_id`].
    pub fn next_id(&self) -> Result<u64, Error> {
        self.run(|c| async move { c.next_id().await })
    }

    /// `n` IDs, strictly increasing, all or nothing. See [`crate::Client::next_ids`].
    pub fn next_ids(&self, n: u32) -> Result<Vec<u64>, Error> {
        self.run(move |c| async move { c.next_ids(n).await })
    }

    /// Round-trip time of a PING. See [`crate::Client::ping`].
    pub fn ping(&self) -> Result<Duration, Error> {
        self.run(|c| async move { c.ping().await })
    }

    /// The server's HELLO_OK.
    pub fn hello(&self) -> &ServerHello {
        self.inner.client.hello()
    }

    /// The ID layout announced by the server.
    pub fn layout(&self) -> Layout {
        self.inner.client.layout()
    }

    /// Whether the connection has failed.
    pub fn is_closed(&self) -> bool {
        self.inner.client.is_closed()
    }

    /// Run one call of the async client on the background runtime and wait for it. The
    /// call's own request timeout bounds the wait.
    fn run<T, F, Fut>(&self, call: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce(crate::Client) -> Fut,
        Fut: Future<Output = Result<T, Error>> + Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let fut = call(self.inner.client.clone());
        self.inner.handle.spawn(async move {
            let _ = tx.send(fut.await);
        });
        // A dropped sender means the runtime is gone.
        rx.recv().unwrap_or(Err(Error::Closed))
    }
}
