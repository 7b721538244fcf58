//! [`AmqpTls`]: the TLS settings of an `amqps://` connection beyond the
//! system's root certificates: a private CA, a client certificate.

use std::path::{Path, PathBuf};

use lapin::tcp::{OwnedIdentity, OwnedTLSConfig};

use crate::error::{Error, Result};

/// TLS settings for `amqps://` (RabbitMQ's TLS listener, Amazon MQ,
/// CloudAMQP), given to [`AmqpEndpoint::with_tls`](crate::AmqpEndpoint::with_tls).
///
/// Without it, an `amqps://` URI trusts the system's root certificates,
/// which is what managed brokers with public certificates need. With it:
///
/// * [`with_ca_file`](Self::with_ca_file) adds a private CA to them;
/// * [`with_client_certificate`](Self::with_client_certificate) shows a
///   client certificate (for a broker that verifies peers, or
///   `auth_mechanism=external` in the URI to log in with it).
///
/// The broker's certificate must name the URI's host. Files are read at
/// each connection (a reconnect picks up a renewed certificate); one that
/// cannot be read fails that connection with [`Error::TlsFile`], naming
/// it. Needs the crate's `tls` feature.
///
/// ```
/// use consumer_amqp::AmqpTls;
///
/// let tls = AmqpTls::new()
///     .with_ca_file("/etc/rabbitmq/ca.pem")
///     .with_client_certificate("/etc/rabbitmq/client.pem", "/etc/rabbitmq/client.key");
/// # drop(tls);
/// ```
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct AmqpTls {
    ca_files: Vec<PathBuf>,
    client_certificate: Option<(PathBuf, PathBuf)>,
}

impl AmqpTls {
    /// The system's root certificates, and no client certificate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also trusts the CA certificates (PEM) in `path`. May be given more
    /// than once.
    pub fn with_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_files.push(path.into());
        self
    }

    /// Shows the certificate in `cert_file` (PEM, its chain after it) with
    /// the unencrypted private key in `key_file` (PEM: PKCS#8, PKCS#1 or
    /// SEC1) to the broker.
    pub fn with_client_certificate(
        mut self,
        cert_file: impl Into<PathBuf>,
        key_file: impl Into<PathBuf>,
    ) -> Self {
        self.client_certificate = Some((cert_file.into(), key_file.into()));
        self
    }

    pub(crate) fn has_client_certificate(&self) -> bool {
        self.client_certificate.is_some()
    }

    /// The files, read now, as lapin takes them.
    pub(crate) fn load(&self) -> Result<OwnedTLSConfig> {
        let mut chain = String::new();
        for path in &self.ca_files {
            let pem = read_pem("CA certificate", path)?;
            chain.push_str(&String::from_utf8_lossy(&pem));
            chain.push('\n');
        }
        let identity = match &self.client_certificate {
            Some((cert, key)) => Some(OwnedIdentity::PKCS8 {
                pem: read_pem("client certificate", cert)?,
                key: read_pem("client key", key)?,
            }),
            None => None,
        };
        Ok(OwnedTLSConfig {
            identity,
            cert_chain: (!chain.is_empty()).then_some(chain),
        })
    }
}

/// The PEM file at `path`, or an error naming it as `what`.
fn read_pem(what: &'static str, path: &Path) -> Result<Vec<u8>> {
    let file_error = |reason: String| Error::TlsFile {
        what,
        path: path.display().to_string(),
        reason,
    };
    let bytes = std::fs::read(path).map_err(|e| file_error(e.to_string()))?;
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(file_error(
            "it holds no PEM block (-----BEGIN ...)".to_owned(),
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_cannot_be_used_is_named() {
        let e = AmqpTls::new()
            .with_ca_file("/nonexistent/ca.pem")
            .load()
            .expect_err("missing");
        let message = e.to_string();
        assert!(
            message.contains("CA certificate file /nonexistent/ca.pem"),
            "{message}"
        );
        assert!(!e.is_retriable());

        let dir = std::env::temp_dir().join(format!("consumer-amqp-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let not_pem = dir.join("key.der");
        std::fs::write(&not_pem, [0x30, 0x82, 0x01]).expect("write");
        let e = AmqpTls::new()
            .with_client_certificate(&not_pem, &not_pem)
            .load()
            .expect_err("not PEM");
        assert!(e.to_string().contains("no PEM block"), "{e}");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
