//! [`LinkProxy`]: a TCP proxy between a client and a broker (or a
//! database) whose link a test cuts, stalls, slows and restores, to see
//! what the client does when the network, not the server, misbehaves.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::AbortHandle;

/// What the link does to the bytes it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LinkState {
    /// Bytes flow as they come.
    Open,
    /// No byte goes through either way; connections stay open.
    Stalled,
    /// Each chunk read waits this long before it is forwarded.
    Slowed(Duration),
    /// Every connection, open or new, is reset at once.
    Down,
}

/// A TCP proxy on `127.0.0.1` in front of one upstream address, whose
/// link a test can break in the ways a network does:
///
/// * [`cut`](Self::cut): every open connection is reset (`SO_LINGER` 0,
///   so each side sees a reset, not a clean close); new connections go
///   through, as after a flapping link or a restarted load balancer.
/// * [`down`](Self::down): like `cut`, and every new connection is reset
///   as soon as it is accepted, until [`restore`](Self::restore).
/// * [`stall`](Self::stall): no byte goes through either way, on open
///   connections and on new ones (accepted, then silent), and nothing is
///   closed: a black-holed path. Heartbeats and session timeouts are what
///   notice it.
/// * [`black_hole`](Self::black_hole): the connections open now pass no
///   byte again, ever, and are never closed; new connections go through:
///   a NAT entry or a load balancer's flow lost without a reset. Only the
///   client's own timeout notices.
/// * [`slow`](Self::slow): each chunk of bytes waits before it is
///   forwarded, in each direction.
/// * [`restore`](Self::restore): bytes flow again; what a stall held back
///   is delivered (to a peer that may have given up on the connection).
///
/// Dropping the proxy resets every connection and stops listening.
///
/// ```no_run
/// # async fn demo() -> std::io::Result<()> {
/// use consumer_core::testing::LinkProxy;
/// let proxy = LinkProxy::start("127.0.0.1:5672").await?;
/// let url = format!("amqp://guest:guest@{}/%2f?heartbeat=1", proxy.addr());
/// // ... a consumer on `url` under load ...
/// proxy.stall();
/// # let _ = url;
/// tokio::time::sleep(std::time::Duration::from_secs(3)).await;
/// proxy.restore();
/// assert!(proxy.connections() >= 2, "the client reconnected");
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct LinkProxy {
    addr: SocketAddr,
    state: watch::Sender<LinkState>,
    shared: Arc<Shared>,
    accept: AbortHandle,
}

#[derive(Debug, Default)]
struct Shared {
    /// The tasks of the connections accepted so far (finished ones are
    /// pruned at each accept).
    connections: Mutex<Vec<AbortHandle>>,
    accepted: AtomicU64,
    /// Connections numbered below this (in accept order, from 0) are
    /// black-holed.
    black_holed_below: AtomicU64,
}

impl Shared {
    fn reset_all(&self) {
        for c in self
            .connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            c.abort();
        }
    }
}

impl LinkProxy {
    /// A proxy on a free port of `127.0.0.1` in front of `upstream`
    /// (`host:port`, connected to for each accepted connection).
    pub async fn start(upstream: impl Into<String>) -> io::Result<Self> {
        Self::bind(SocketAddr::from(([127, 0, 0, 1], 0)), upstream).await
    }

    /// A proxy listening on `listen` in front of `upstream`: for a client
    /// told the proxy's address by the server itself (a Kafka broker's
    /// advertised listener).
    pub async fn bind(listen: SocketAddr, upstream: impl Into<String>) -> io::Result<Self> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let (state, _) = watch::channel(LinkState::Open);
        let shared = Arc::new(Shared::default());
        let accept = tokio::spawn(accept_loop(
            listener,
            upstream.into(),
            state.clone(),
            Arc::clone(&shared),
        ))
        .abort_handle();
        Ok(Self {
            addr,
            state,
            shared,
            accept,
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Black-holes every open connection: no byte passes on it again (not
    /// after [`restore`](Self::restore) either) and it is never closed;
    /// new connections go through.
    pub fn black_hole(&self) {
        let accepted = self.shared.accepted.load(Ordering::SeqCst);
        self.shared
            .black_holed_below
            .store(accepted, Ordering::SeqCst);
    }

    /// Resets every open connection; new ones go through.
    pub fn cut(&self) {
        self.shared.reset_all();
    }

    /// Resets every open connection, and every new one as soon as it is
    /// accepted, until [`restore`](Self::restore).
    pub fn down(&self) {
        self.state.send_replace(LinkState::Down);
        self.shared.reset_all();
    }

    /// Stops every byte, both ways, on open and new connections, closing
    /// nothing, until [`restore`](Self::restore).
    pub fn stall(&self) {
        self.state.send_replace(LinkState::Stalled);
    }

    /// Delays each chunk of bytes by `delay`, in each direction, until
    /// [`restore`](Self::restore).
    pub fn slow(&self, delay: Duration) {
        self.state.send_replace(LinkState::Slowed(delay));
    }

    /// Lets bytes flow as they come again.
    pub fn restore(&self) {
        self.state.send_replace(LinkState::Open);
    }

    /// Connections accepted since the proxy started: more than the client
    /// opened at first means it reconnected.
    pub fn connections(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for LinkProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.shared.reset_all();
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: String,
    state: watch::Sender<LinkState>,
    shared: Arc<Shared>,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            // Out of file descriptors or similar: try again shortly rather
            // than spin.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let number = shared.accepted.fetch_add(1, Ordering::SeqCst);
        // A reset, not a clean close, whenever the proxy drops it.
        let _ = client.set_zero_linger();
        if *state.borrow() == LinkState::Down {
            drop(client);
            continue;
        }
        let link = Link {
            state: state.subscribe(),
            shared: Arc::clone(&shared),
            number,
        };
        let task = tokio::spawn(carry(client, upstream.clone(), link));
        let mut connections = shared
            .connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        connections.retain(|c| !c.is_finished());
        connections.push(task.abort_handle());
    }
}

/// What one connection's pumps read: the link's state, and whether it
/// has been black-holed.
#[derive(Clone)]
struct Link {
    state: watch::Receiver<LinkState>,
    shared: Arc<Shared>,
    number: u64,
}

impl Link {
    fn black_holed(&self) -> bool {
        self.number < self.shared.black_holed_below.load(Ordering::SeqCst)
    }
}

/// Carries one connection both ways until either side closes it.
async fn carry(client: TcpStream, upstream: String, link: Link) {
    let Ok(server) = TcpStream::connect(&upstream).await else {
        return;
    };
    let _ = server.set_zero_linger();
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    // Either direction ending ends the connection: the halves are dropped
    // together, as a broken link drops both.
    tokio::select! {
        _ = pump(client_read, server_write, link.clone()) => {}
        _ = pump(server_read, client_write, link) => {}
    }
}

/// Forwards one direction, chunk by chunk, as the link's state says.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut link: Link) -> io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return to.shutdown().await;
        }
        if link.black_holed() {
            // Held open, silent, for as long as the proxy lives.
            return std::future::pending().await;
        }
        loop {
            let now = *link.state.borrow_and_update();
            match now {
                LinkState::Open => break,
                LinkState::Slowed(delay) => {
                    tokio::time::sleep(delay).await;
                    break;
                }
                LinkState::Stalled => {
                    if link.state.changed().await.is_err() {
                        return Ok(());
                    }
                }
                LinkState::Down => return Ok(()),
            }
        }
        to.write_all(&buf[..n]).await?;
    }
}
