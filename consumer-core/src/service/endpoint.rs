//! A small HTTP endpoint for an orchestrator's probes: `GET /livez` and
//! `GET /readyz` answer 200 or 503 with the parts' states as text.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::Health;

/// Longest request head read; probes send a few hundred bytes.
const MAX_REQUEST: usize = 8 * 1024;

/// Binds `addr` now (so a port in use shows when the service is built).
pub(super) fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Serves probes on `listener` until the returned task is aborted.
pub(super) fn serve(
    listener: std::net::TcpListener,
    health: Health,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let listener = TcpListener::from_std(listener)?;
    let bound = listener.local_addr()?;
    tracing::info!(target: "consumer::service", %bound, "health endpoint: GET /livez, /readyz");
    Ok(tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let health = health.clone();
            tokio::spawn(async move {
                if let Err(e) = answer(stream, &health).await {
                    tracing::debug!(target: "consumer::service", error = %e, "health probe connection failed");
                }
            });
        }
    }))
}

async fn answer(mut stream: TcpStream, health: &Health) -> std::io::Result<()> {
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
    if tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .is_err()
    {
        return Ok(());
    }
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let (status, body) = if method != "GET" {
        ("405 Method Not Allowed", "use GET\n".to_owned())
    } else {
        match path {
            "/livez" => probe(health.is_live(), "live", health),
            "/readyz" => probe(health.is_ready(), "ready", health),
            _ => ("404 Not Found", "GET /livez or /readyz\n".to_owned()),
        }
    };
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

fn probe(ok: bool, what: &str, health: &Health) -> (&'static str, String) {
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
        if let Some(e) = part.error {
            body.push_str(&format!(": {e}"));
        }
        body.push('\n');
    }
    (
        if ok {
            "200 OK"
        } else {
            "503 Service Unavailable"
        },
        body,
    )
}
