//! A small HTTP endpoint for an orchestrator's probes and a metrics
//! scraper: `GET /livez` and `GET /readyz` answer 200 or 503 with the
//! parts' states as text; `GET /metrics`, when the service has metrics,
//! the Prometheus text exposition.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use super::Health;

/// Renders the metrics for `GET /metrics`.
pub(super) type Scrape = std::sync::Arc<dyn Fn() -> Result<String, String> + Send + Sync>;

/// What the endpoint serves.
#[derive(Clone)]
pub(super) struct Served {
    pub(super) health: Health,
    pub(super) metrics: Option<Scrape>,
    /// JSON documents by path (the AsyncAPI document), rendered before
    /// the start.
    pub(super) documents: Vec<(&'static str, std::sync::Arc<String>)>,
    /// The admin routes, when the service has them.
    pub(super) admin: Option<super::admin::Admin>,
}

/// Longest request head read; probes send a few hundred bytes.
const MAX_REQUEST: usize = 8 * 1024;

/// How long a connection may take to send its request head.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a connection may take to read its answer (a scraper that
/// stops reading a large `/metrics` page would hold its slot for ever).
const WRITE_TIMEOUT: Duration = if cfg!(test) {
    Duration::from_millis(300)
} else {
    Duration::from_secs(10)
};

/// Connections served at once; more are closed unanswered, so a flood
/// holds at most this many of the descriptors the broker and database
/// connections need too.
const MAX_CONNECTIONS: usize = if cfg!(test) { 8 } else { 64 };

/// The wait after a failed accept: its causes (no descriptor left, no
/// buffer) outlast an immediate retry, which would spin a core.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// A failing accept is logged at most once per this, with how many
/// failures went unlogged.
const ACCEPT_LOG_EVERY: Duration = Duration::from_secs(10);

/// Binds `addr` now (so a port in use shows when the service is built).
pub(super) fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Serves probes (and metrics) on `listener` until the returned task is
/// aborted.
pub(super) fn serve(
    listener: std::net::TcpListener,
    served: Served,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let listener = TcpListener::from_std(listener)?;
    let bound = listener.local_addr()?;
    let metrics = if served.metrics.is_some() {
        ", /metrics"
    } else {
        ""
    };
    let documents: String = served
        .documents
        .iter()
        .map(|(path, _)| format!(", {path}"))
        .collect();
    let admin = if served.admin.is_some() {
        ", admin: POST /admin/pause/{handler}, /admin/resume/{handler}, GET /admin/paused"
    } else {
        ""
    };
    tracing::info!(target: "consumer::service", %bound, "health endpoint: GET /livez, /readyz{metrics}{documents}{admin}");
    Ok(tokio::spawn(accept(listener, served)))
}

/// Accepts until aborted. The connections are tasks of its own, so they
/// end with it and never outnumber [`MAX_CONNECTIONS`].
async fn accept(listener: TcpListener, served: Served) {
    let mut open = JoinSet::new();
    let mut last_logged: Option<Instant> = None;
    let mut unlogged = 0u64;
    loop {
        let accepted = tokio::select! {
            // Frees the slots of finished connections before taking more.
            biased;
            Some(_) = open.join_next() => continue,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _)) if open.len() >= MAX_CONNECTIONS => {
                tracing::debug!(target: "consumer::service", "health endpoint: {MAX_CONNECTIONS} connections open; closing a new one");
                drop(stream);
            }
            Ok((stream, _)) => {
                let served = served.clone();
                open.spawn(async move {
                    if let Err(e) = answer(stream, &served).await {
                        tracing::debug!(target: "consumer::service", error = %e, "health probe connection failed");
                    }
                });
            }
            Err(e) => {
                if last_logged.is_none_or(|at| at.elapsed() >= ACCEPT_LOG_EVERY) {
                    tracing::warn!(target: "consumer::service", error = %e, unlogged, "health endpoint cannot accept connections; retrying");
                    last_logged = Some(Instant::now());
                    unlogged = 0;
                } else {
                    unlogged += 1;
                }
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// What a request gets back.
pub(super) struct Response {
    status: &'static str,
    content_type: &'static str,
    body: String,
}

impl Response {
    pub(super) fn text(status: &'static str, body: String) -> Self {
        Self {
            status,
            content_type: "text/plain; charset=utf-8",
            body,
        }
    }
}

/// One route per path.
fn respond(method: &str, path: &str, served: &Served) -> Response {
    if method != "GET" {
        return Response::text("405 Method Not Allowed", "use GET\n".to_owned());
    }
    let health = &served.health;
    if let Some((_, body)) = served.documents.iter().find(|(p, _)| *p == path) {
        return Response {
            status: "200 OK",
            content_type: "application/json",
            body: body.as_ref().clone(),
        };
    }
    match (path, &served.metrics) {
        ("/livez", _) => probe(health.is_live(), "live", health),
        ("/readyz", _) => probe(health.is_ready(), "ready", health),
        ("/metrics", Some(scrape)) => match scrape() {
            Ok(body) => Response {
                status: "200 OK",
                content_type: "text/plain; version=0.0.4; charset=utf-8",
                body,
            },
            Err(e) => Response::text("500 Internal Server Error", format!("{e}\n")),
        },
        _ => Response::text(
            "404 Not Found",
            "GET /livez, /readyz or /metrics\n".to_owned(),
        ),
    }
}

async fn answer(mut stream: TcpStream, served: &Served) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let read = async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        Ok::<_, std::io::Error>(())
    };
    if tokio::time::timeout(READ_TIMEOUT, read).await.is_err() {
        return Ok(());
    }
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let answered = match &served.admin {
        Some(admin) if path.starts_with("/admin/") => {
            let head = String::from_utf8_lossy(&head);
            admin.respond(method, path, &head).await
        }
        _ => respond(method, path, served),
    };
    let Response {
        status,
        content_type,
        body,
    } = answered;
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let write = async {
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await
    };
    match tokio::time::timeout(WRITE_TIMEOUT, write).await {
        Ok(written) => written,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("the client read no answer within {WRITE_TIMEOUT:?}"),
        )),
    }
}

fn probe(ok: bool, what: &str, health: &Health) -> Response {
    let mut body = if ok {
        format!("{what}\n")
    } else {
        format!("not {what}\n")
    };
    for part in health.parts() {
        body.push_str(&format!(
            "{} {} {}",
            part.kind,
            part.name,
            part.state.as_str()
        ));
        if !part.paused.is_empty() {
            body.push_str(&format!(" (paused: {})", part.paused.join(", ")));
        }
        if !part.circuits_open.is_empty() {
            body.push_str(&format!(
                " (circuit open: {})",
                part.circuits_open.join(", ")
            ));
        }
        if let Some(e) = part.error {
            body.push_str(&format!(": {e}"));
        }
        body.push('\n');
    }
    let status = if ok {
        "200 OK"
    } else {
        "503 Service Unavailable"
    };
    Response::text(status, body)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream
            .write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
            .await
            .expect("write");
        let mut out = String::new();
        stream.read_to_string(&mut out).await.expect("read");
        out
    }

    #[tokio::test]
    async fn connections_beyond_the_cap_are_closed_at_once_and_a_freed_slot_serves_again() {
        let listener = bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let addr = listener.local_addr().expect("addr");
        let health = Health {
            parts: Arc::default(),
            stopping: Arc::default(),
        };
        let server = serve(
            listener,
            Served {
                health,
                metrics: None,
                documents: Vec::new(),
                admin: None,
            },
        )
        .expect("serve");
        // Silent connections: each holds a slot while its head is awaited.
        let mut held = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            held.push(TcpStream::connect(addr).await.expect("connect"));
        }
        // Accepted in connection order, so this one finds every slot taken.
        // Closed with its request unread, it may see a reset: either way,
        // no answer.
        let mut over = TcpStream::connect(addr).await.expect("connect");
        let _ = over.write_all(b"GET /livez HTTP/1.1\r\n\r\n").await;
        let mut out = Vec::new();
        let _ = over.read_to_end(&mut out).await;
        assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
        // A held connection is still served, and its slot serves again.
        let mut first = held.swap_remove(0);
        first
            .write_all(b"GET /livez HTTP/1.1\r\n\r\n")
            .await
            .expect("write");
        let mut answer = String::new();
        first.read_to_string(&mut answer).await.expect("read");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        // On this one-thread runtime its task has ended by now, and the
        // endpoint frees finished slots before it accepts.
        let again = get(addr, "/livez").await;
        assert!(again.starts_with("HTTP/1.1 200"), "{again}");
        server.abort();
    }

    #[tokio::test]
    async fn clients_that_never_read_their_answer_give_their_slots_back() {
        let listener = bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let addr = listener.local_addr().expect("addr");
        let health = Health {
            parts: Arc::default(),
            stopping: Arc::default(),
        };
        // Larger than what the sockets' buffers take: writing it waits for
        // a reader.
        let big = Arc::new("x".repeat(32 * 1024 * 1024));
        let served = Served {
            health,
            metrics: None,
            documents: vec![("/big", big)],
            admin: None,
        };
        let server = serve(listener, served).expect("serve");
        let mut stalled = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            let mut s = TcpStream::connect(addr).await.expect("connect");
            s.write_all(b"GET /big HTTP/1.1\r\n\r\n")
                .await
                .expect("write");
            stalled.push(s);
        }
        // Without a write timeout every slot stays taken and this is never
        // answered; the deadline only keeps a broken build from hanging.
        let answered = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                // Closed unanswered (or reset) while every slot is taken.
                let Ok(mut probe) = TcpStream::connect(addr).await else {
                    continue;
                };
                let _ = probe.write_all(b"GET /livez HTTP/1.1\r\n\r\n").await;
                let mut answer = Vec::new();
                let _ = probe.read_to_end(&mut answer).await;
                if answer.starts_with(b"HTTP/1.1 200") {
                    return answer;
                }
            }
        })
        .await;
        assert!(
            answered.is_ok(),
            "the stalled readers still hold every slot"
        );
        drop(stalled);
        server.abort();
    }
}
