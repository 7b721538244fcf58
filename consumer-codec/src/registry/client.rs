//! The registry client: the Confluent-compatible API's calls, each failure
//! classified (see [`Error`]), and what never changes cached.

use std::sync::Arc;

use reqwest::{Method, StatusCode, Url};
use serde::de::DeserializeOwned;

use super::api::{
    Compatibility, CompatibilityCheck, CompatibilityConfig, ErrorBody, RegisteredId, Schema,
    SubjectVersion, Version,
};
use super::cache::SchemaCache;
use super::config::{RegistryAuth, RegistryConfig};
use crate::error::{Error, Result};

const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

/// A client of a Confluent-compatible schema registry (Confluent's,
/// Apicurio's `/apis/ccompat/v7`, ...). Cheap to clone: clones share the
/// connection pool and the caches.
///
/// Schemas by id, numbered versions and the ids of registered schemas are
/// cached for the client's life (they never change); the latest version
/// and compatibility answers are asked each time.
#[derive(Debug, Clone)]
pub struct RegistryClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    http: reqwest::Client,
    base: Url,
    auth: Option<RegistryAuth>,
    cache: SchemaCache,
}

/// A 4xx reply other than 408 and 429: the caller says what it means.
struct Refusal {
    status: StatusCode,
    body: ErrorBody,
}

impl RegistryClient {
    /// A client for the registry `config` names. Nothing is sent yet.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when the URL does not parse, is not `http(s)://`,
    /// or is `https://` without the `tls` feature.
    pub fn new(config: RegistryConfig) -> Result<Self> {
        let base = Url::parse(&config.url).map_err(|e| {
            Error::Config(format!(
                "the registry URL `{}` does not parse: {e}",
                config.url
            ))
        })?;
        match base.scheme() {
            "http" => {}
            "https" if cfg!(feature = "tls") => {}
            "https" => {
                return Err(Error::Config(format!(
                    "the registry URL `{}` is https://, and consumer-codec was built without its `tls` feature: enable it",
                    config.url
                )));
            }
            other => {
                return Err(Error::Config(format!(
                    "the registry URL `{}` has scheme `{other}`: expected http:// or https://",
                    config.url
                )));
            }
        }
        let http = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.connect_timeout)
            .build()
            .map_err(|e| {
                Error::Config(format!("the registry's HTTP client cannot be built: {e}"))
            })?;
        let inner = Inner {
            http,
            base,
            auth: config.auth,
            cache: SchemaCache::default(),
        };
        Ok(Self {
            inner: Arc::new(inner),
        })
    }

    /// The registry's base URL.
    pub fn url(&self) -> &str {
        self.inner.base.as_str()
    }

    /// The schema registered under `id` (`GET /schemas/ids/{id}`), cached.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownSchema`] (poison) when the registry does not know
    /// the id; [`Error::Unavailable`] (transient) when it does not answer.
    pub async fn schema_by_id(&self, id: u32) -> Result<Arc<Schema>> {
        if let Some(schema) = self.inner.cache.schema(id) {
            return Ok(schema);
        }
        let id_text = id.to_string();
        let reply = self
            .call::<Schema>(Method::GET, &["schemas", "ids", &id_text], None)
            .await?;
        let schema = Arc::new(reply.map_err(|refusal| match refusal.status {
            StatusCode::NOT_FOUND => Error::UnknownSchema {
                schema_id: id,
                registry: self.url().to_owned(),
            },
            _ => self.refused(Method::GET, &["schemas", "ids", &id_text], refusal),
        })?);
        tracing::debug!(target: "consumer::codec", schema_id = id, "schema fetched from the registry");
        self.inner.cache.keep_schema(id, Arc::clone(&schema));
        Ok(schema)
    }

    /// The writer's schema of a payload, which a codec of `expected` can
    /// use: [`Error::UnusableSchema`] (poison) when it is another type,
    /// [`Error::Unsupported`] when it refers to other schemas (not fetched
    /// yet).
    pub(crate) async fn writer_schema(
        &self,
        id: u32,
        expected: super::api::SchemaType,
    ) -> Result<Arc<Schema>> {
        let schema = self.schema_by_id(id).await?;
        let unusable = |reason: String| Error::UnusableSchema {
            schema_id: id,
            reason,
        };
        if schema.schema_type != expected {
            return Err(unusable(format!(
                "it is a {:?} schema, and this decoder reads {expected:?}",
                schema.schema_type
            )));
        }
        if !schema.references.is_empty() {
            return Err(Error::Unsupported {
                schema_id: id,
                what: "a schema that refers to other registered schemas".to_owned(),
            });
        }
        Ok(schema)
    }

    /// A version of `subject` (`GET /subjects/{subject}/versions/{version}`);
    /// numbered versions are cached, the latest is asked each time.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] when the subject or the version does not exist;
    /// [`Error::Unavailable`] when the registry does not answer.
    pub async fn subject_version(
        &self,
        subject: &str,
        version: Version,
    ) -> Result<Arc<SubjectVersion>> {
        let version_text = match version {
            Version::Number(n) => match self.inner.cache.version(subject, n) {
                Some(found) => return Ok(found),
                None => n.to_string(),
            },
            Version::Latest => "latest".to_owned(),
        };
        let path = ["subjects", subject, "versions", &version_text];
        let reply = self
            .call::<SubjectVersion>(Method::GET, &path, None)
            .await?;
        let found = Arc::new(reply.map_err(|refusal| match refusal.status {
            StatusCode::NOT_FOUND => {
                self.not_found(format!("version {version_text} of subject `{subject}`"))
            }
            _ => self.refused(Method::GET, &path, refusal),
        })?);
        self.inner.cache.keep_version(Arc::clone(&found));
        Ok(found)
    }

    /// Registers `schema` under `subject` (`POST /subjects/{subject}/versions`)
    /// and returns its id; a schema already there keeps its id. Cached.
    ///
    /// # Errors
    ///
    /// [`Error::Incompatible`] when the subject's compatibility rule refuses
    /// it (HTTP 409); [`Error::Refused`] when the registry finds it invalid;
    /// [`Error::Unavailable`] when the registry does not answer.
    pub async fn register(&self, subject: &str, schema: &Schema) -> Result<u32> {
        if let Some(id) = self.inner.cache.id(subject, schema) {
            return Ok(id);
        }
        let path = ["subjects", subject, "versions"];
        let reply = self
            .call::<RegisteredId>(Method::POST, &path, Some(schema.to_body()))
            .await?;
        let id = reply
            .map_err(|refusal| self.refused_schema(subject, &path, refusal))?
            .id;
        tracing::info!(target: "consumer::codec", subject, schema_id = id, "schema registered");
        self.inner.cache.keep_id(subject, schema, id);
        Ok(id)
    }

    /// The version of `subject` that holds `schema` (`POST /subjects/{subject}`),
    /// without registering anything: how a producer that may not register
    /// finds its schema's id. Cached.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] when the subject does not exist or does not
    /// hold the schema; [`Error::Unavailable`] when the registry does not
    /// answer.
    pub async fn lookup(&self, subject: &str, schema: &Schema) -> Result<Arc<SubjectVersion>> {
        let path = ["subjects", subject];
        let reply = self
            .call::<SubjectVersion>(Method::POST, &path, Some(schema.to_body()))
            .await?;
        let mut found = reply.map_err(|refusal| match refusal.status {
            StatusCode::NOT_FOUND => {
                self.not_found(format!("such schema under subject `{subject}`"))
            }
            _ => self.refused(Method::POST, &path, refusal),
        })?;
        // What was found is the schema sent, type included: Apicurio leaves
        // `schemaType` out of this reply, which would read as Avro.
        found.schema.schema_type = schema.schema_type;
        let found = Arc::new(found);
        self.inner.cache.keep_version(Arc::clone(&found));
        self.inner.cache.keep_id(subject, schema, found.id);
        Ok(found)
    }

    /// Whether `schema` could be registered as the next version of `subject`
    /// (`POST /compatibility/subjects/{subject}/versions/latest`).
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] when the subject does not exist;
    /// [`Error::Unavailable`] when the registry does not answer.
    pub async fn check_compatibility(
        &self,
        subject: &str,
        schema: &Schema,
    ) -> Result<CompatibilityCheck> {
        let path = ["compatibility", "subjects", subject, "versions", "latest"];
        let reply = self
            .call::<CompatibilityCheck>(Method::POST, &path, Some(schema.to_body()))
            .await?;
        reply.map_err(|refusal| match refusal.status {
            StatusCode::NOT_FOUND => {
                self.not_found(format!("subject `{subject}` to check against"))
            }
            _ => self.refused_schema(subject, &path, refusal),
        })
    }

    /// Sets the compatibility rule of `subject` (`PUT /config/{subject}`).
    ///
    /// # Errors
    ///
    /// [`Error::Refused`] when the registry refuses it;
    /// [`Error::Unavailable`] when it does not answer.
    pub async fn set_compatibility(
        &self,
        subject: &str,
        compatibility: Compatibility,
    ) -> Result<()> {
        let path = ["config", subject];
        let body = serde_json::json!(CompatibilityConfig { compatibility });
        let reply = self
            .call::<CompatibilityConfig>(Method::PUT, &path, Some(body))
            .await?;
        reply
            .map(drop)
            .map_err(|refusal| self.refused(Method::PUT, &path, refusal))
    }

    /// One request. `Err` is what a caller cannot give a meaning to
    /// (transient failures, bad settings); `Ok(Err)` a 4xx refusal.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &[&str],
        body: Option<serde_json::Value>,
    ) -> Result<Result<T, Refusal>> {
        // Segments are percent-encoded below, so a subject cannot reach
        // another path; an empty one would name a different resource.
        if path.iter().any(|segment| segment.is_empty()) {
            return Err(Error::Config(format!(
                "`{}` has an empty subject: name the subject",
                request_line(&method, path)
            )));
        }
        let mut url = self.inner.base.clone();
        url.path_segments_mut()
            .map_err(|()| {
                Error::Config(format!(
                    "the registry URL `{}` cannot have a path",
                    self.url()
                ))
            })?
            .pop_if_empty()
            .extend(path);
        let mut request = self
            .inner
            .http
            .request(method.clone(), url)
            .header("Accept", CONTENT_TYPE);
        request = match &self.inner.auth {
            Some(RegistryAuth::Basic { user, password }) => {
                request.basic_auth(user, Some(password))
            }
            Some(RegistryAuth::Bearer(token)) => request.bearer_auth(token),
            None => request,
        };
        if let Some(body) = body {
            request = request
                .header("Content-Type", CONTENT_TYPE)
                .body(body.to_string());
        }
        let unavailable = |reason: String, source: Option<reqwest::Error>| Error::Unavailable {
            registry: self.url().to_owned(),
            request: request_line(&method, path),
            reason,
            source: source.map(Into::into),
        };
        let response = request
            .send()
            .await
            .map_err(|e| unavailable(describe(&e), Some(e)))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| unavailable(describe(&e), Some(e)))?;
        if status.is_success() {
            return serde_json::from_slice(&bytes).map(Ok).map_err(|e| {
                unavailable(
                    format!("HTTP {status} with a body that is not the API's reply ({e})"),
                    None,
                )
            });
        }
        let body: ErrorBody = serde_json::from_slice(&bytes).unwrap_or_else(|_| ErrorBody {
            error_code: 0,
            message: String::from_utf8_lossy(&bytes).chars().take(200).collect(),
        });
        if status.is_server_error()
            || status == StatusCode::REQUEST_TIMEOUT
            || status == StatusCode::TOO_MANY_REQUESTS
        {
            return Err(unavailable(
                format!("HTTP {status}: {}", body.message),
                None,
            ));
        }
        Ok(Err(Refusal { status, body }))
    }

    fn not_found(&self, what: String) -> Error {
        Error::NotFound {
            registry: self.url().to_owned(),
            what,
        }
    }

    /// A refusal of a schema sent: 409 is the compatibility rule's.
    fn refused_schema(&self, subject: &str, path: &[&str], refusal: Refusal) -> Error {
        if refusal.status == StatusCode::CONFLICT {
            return Error::Incompatible {
                subject: subject.to_owned(),
                message: refusal.body.message,
            };
        }
        self.refused(Method::POST, path, refusal)
    }

    fn refused(&self, method: Method, path: &[&str], refusal: Refusal) -> Error {
        Error::Refused {
            registry: self.url().to_owned(),
            request: request_line(&method, path),
            status: refusal.status.as_u16(),
            error_code: refusal.body.error_code,
            message: refusal.body.message,
        }
    }
}

fn request_line(method: &Method, path: &[&str]) -> String {
    format!("{method} /{}", path.join("/"))
}

fn describe(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        "no reply within the timeout".to_owned()
    } else if error.is_connect() {
        "could not connect".to_owned()
    } else {
        "the request failed".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_that_is_not_http_is_a_configuration_error() {
        for url in ["not a url", "ftp://registry/"] {
            let error = RegistryClient::new(RegistryConfig::new(url)).expect_err(url);
            assert!(matches!(error, Error::Config(_)), "{error}");
        }
    }

    #[test]
    fn https_needs_the_tls_feature() {
        let built = RegistryClient::new(RegistryConfig::new("https://registry.example"));
        assert_eq!(built.is_ok(), cfg!(feature = "tls"), "{built:?}");
    }

    #[tokio::test]
    async fn an_empty_subject_is_refused_before_anything_is_sent() {
        // Nothing listens on port 9 here: a request sent would be transient.
        let client =
            RegistryClient::new(RegistryConfig::new("http://127.0.0.1:9")).expect("an http:// URL");
        let error = client
            .subject_version("", Version::Latest)
            .await
            .expect_err("an empty subject");
        assert!(matches!(error, Error::Config(_)), "{error}");
    }

    #[test]
    fn request_lines_name_the_path_under_the_base() {
        assert_eq!(
            request_line(&Method::GET, &["schemas", "ids", "7"]),
            "GET /schemas/ids/7"
        );
    }
}
