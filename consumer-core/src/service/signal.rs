//! The signals a service stops on.

/// Resolves on SIGTERM or SIGINT (Ctrl-C): what an orchestrator or a
/// terminal sends to stop a service. Where a signal handler cannot be
/// installed, it resolves on Ctrl-C alone, and if that fails too it never
/// resolves (the service then stops only when a part fails).
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => tracing::info!(target: "consumer::service", "SIGTERM: stopping"),
                    _ = int.recv() => tracing::info!(target: "consumer::service", "SIGINT: stopping"),
                }
                return;
            }
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(target: "consumer::service", error = %e, "could not install the signal handlers; stopping on Ctrl-C only");
            }
        }
    }
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}
