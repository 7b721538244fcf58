//! Avro payloads in the Confluent wire format: decoded with the writer's
//! schema (fetched by the id the payload names) resolved into the reader's,
//! then into a serde type; encoded under a subject's registered schema.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::types::Value;
use apache_avro::writer::datum::GenericDatumWriter;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::registration::Registration;
use crate::registry::{LastId, RegistryClient, Schema, SchemaType};
use crate::subject::{MessagePart, SubjectNameStrategy};
use crate::wire::{decode_frame, write_header};

/// Decodes Avro payloads into the reader's schema, whatever version of the
/// subject wrote them: the writer's schema comes from the registry by the
/// payload's schema id (parsed once per id), and Avro's schema resolution
/// carries the record into the reader's (fields the reader lacks are
/// dropped, fields the writer lacks take the reader's defaults).
#[derive(Debug)]
pub struct AvroDecoder {
    registry: RegistryClient,
    reader: apache_avro::Schema,
    /// The reader's Parsing Canonical Form: a writer's equal to it writes
    /// exactly the reader's bytes.
    reader_canonical: String,
    writers: RwLock<HashMap<u32, Writer>>,
    /// The last writer's id found to be the reader's own schema: one
    /// atomic load answers for a topic on the reader's version.
    last_readers: LastId,
}

/// A writer's schema, parsed once, and whether it is the reader's.
#[derive(Debug, Clone)]
pub(crate) struct Writer {
    pub(crate) schema: Arc<apache_avro::Schema>,
    /// Its canonical form is the reader's: its records read as the
    /// reader's type directly, with no resolution.
    pub(crate) is_readers: bool,
}

impl AvroDecoder {
    /// A decoder into `reader_schema` (Avro's JSON form), the schema the
    /// application's type was written for.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSchema`] when the schema does not parse.
    pub fn new(registry: RegistryClient, reader_schema: &str) -> Result<Self> {
        let reader =
            apache_avro::Schema::parse_str(reader_schema).map_err(|e| Error::InvalidSchema {
                reason: format!("the reader's Avro schema does not parse: {e}"),
            })?;
        Ok(Self::with_reader(registry, reader))
    }

    /// A decoder into `reader`, a parsed schema (what
    /// `apache_avro::AvroSchema::get_schema` returns for a derived type).
    pub fn with_reader(registry: RegistryClient, reader: apache_avro::Schema) -> Self {
        Self {
            registry,
            reader_canonical: reader.canonical_form(),
            reader,
            writers: RwLock::new(HashMap::new()),
            last_readers: LastId::default(),
        }
    }

    /// Decodes a framed payload into `T` through the reader's schema.
    ///
    /// # Errors
    ///
    /// Poison ([`Error::is_poison`]): bad framing, an id the registry does
    /// not know, a writer's schema that is not Avro, a payload that does not
    /// decode with it or does not resolve into the reader's schema or `T`.
    /// Transient ([`Error::is_transient`]): the registry did not answer.
    pub async fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T> {
        let (schema_id, value) = self.decode_value(bytes).await?;
        apache_avro::from_value(&value).map_err(|e| Error::Undecodable {
            schema_id,
            reason: format!(
                "the record does not fit the reader's type {}: {e}",
                std::any::type_name::<T>()
            ),
        })
    }

    /// Decodes a framed payload into an Avro value of the reader's schema,
    /// with the writer's schema id.
    ///
    /// # Errors
    ///
    /// As [`decode`](Self::decode), but for the last step.
    pub async fn decode_value(&self, bytes: &[u8]) -> Result<(u32, Value)> {
        let frame = decode_frame(bytes)?;
        let schema_id = frame.schema_id;
        let writer = self.writer(schema_id).await?.schema;
        let undecodable = |reason: String| Error::Undecodable { schema_id, reason };
        let reader = GenericDatumReader::builder(&writer)
            .reader_schema(&self.reader)
            .build()
            .map_err(|e| {
                undecodable(format!(
                    "the writer's schema does not resolve into the reader's: {e}"
                ))
            })?;
        let mut rest = frame.payload;
        let value = reader
            .read_value(&mut rest)
            .map_err(|e| undecodable(format!("the Avro record does not decode or resolve: {e}")))?;
        if !rest.is_empty() {
            return Err(undecodable(format!(
                "{} byte(s) are left after the record: it was not written with this schema",
                rest.len()
            )));
        }
        Ok((schema_id, value))
    }

    /// Whether `schema_id` is the last id found to be the reader's own
    /// schema: no lock, no await.
    pub(crate) fn is_last_readers(&self, schema_id: u32) -> bool {
        self.last_readers.is(schema_id)
    }

    /// Whether `schema_id` names the reader's own schema (its records read
    /// straight into the reader's type).
    pub(crate) async fn is_readers(&self, schema_id: u32) -> Result<bool> {
        if self.last_readers.is(schema_id) {
            return Ok(true);
        }
        let is_readers = self.writer(schema_id).await?.is_readers;
        if is_readers {
            self.last_readers.hold(schema_id);
        }
        Ok(is_readers)
    }

    /// The writer's schema of `schema_id`, parsed once.
    pub(crate) async fn writer(&self, schema_id: u32) -> Result<Writer> {
        if let Some(known) = self
            .writers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&schema_id)
        {
            return Ok(known.clone());
        }
        let registered = self
            .registry
            .writer_schema(schema_id, SchemaType::Avro)
            .await?;
        let unusable = |reason: String| Error::UnusableSchema { schema_id, reason };
        let parsed = apache_avro::Schema::parse_str(&registered.schema)
            .map_err(|e| unusable(format!("the registry's Avro schema does not parse: {e}")))?;
        let writer = Writer {
            is_readers: parsed.canonical_form() == self.reader_canonical,
            schema: Arc::new(parsed),
        };
        let mut writers = self.writers.write().unwrap_or_else(PoisonError::into_inner);
        writers.insert(schema_id, writer.clone());
        Ok(writer)
    }
}

/// Encodes values as Avro payloads in the Confluent wire format under one
/// subject's schema. The schema's id is found once: registered when
/// auto-registration is on, else looked up (it must have been registered
/// beforehand, as in production, where a deploy step or `consumer schemas`
/// registers it after the compatibility check).
#[derive(Debug)]
pub struct AvroEncoder {
    registration: Registration,
    parsed: apache_avro::Schema,
}

impl AvroEncoder {
    /// An encoder of `schema` (Avro's JSON form) under `subject`, with
    /// auto-registration off.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSchema`] when the schema does not parse.
    pub fn new(registry: RegistryClient, subject: impl Into<String>, schema: &str) -> Result<Self> {
        let parsed = apache_avro::Schema::parse_str(schema).map_err(|e| Error::InvalidSchema {
            reason: format!("the Avro schema to produce with does not parse: {e}"),
        })?;
        Ok(Self {
            registration: Registration::new(registry, subject.into(), Schema::avro(schema)),
            parsed,
        })
    }

    /// An encoder for `part` of the records on `topic`, its subject named by
    /// `strategy` from the topic and the schema's full name.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSchema`] when the schema does not parse;
    /// [`Error::Config`] when the strategy needs a record name and the
    /// schema has none (it is not a named type).
    pub fn for_topic(
        registry: RegistryClient,
        strategy: SubjectNameStrategy,
        topic: &str,
        part: MessagePart,
        schema: &str,
    ) -> Result<Self> {
        let mut encoder = Self::new(registry, String::new(), schema)?;
        let record_name = encoder.parsed.name().map(|name| name.fullname(None));
        encoder.registration.subject = strategy.subject(topic, part, record_name.as_deref())?;
        Ok(encoder)
    }

    /// Registers the schema under the subject when it is not there yet: for
    /// development. Off by default, so that a producer cannot add a version
    /// nobody checked.
    pub fn with_auto_register(mut self, auto_register: bool) -> Self {
        self.registration.auto_register = auto_register;
        self
    }

    /// The subject the schema is registered under.
    pub fn subject(&self) -> &str {
        &self.registration.subject
    }

    /// The registry's id of the schema, found on first use.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] when auto-registration is off and the subject
    /// does not hold the schema; [`Error::Incompatible`] when registering
    /// is refused; [`Error::Unavailable`] when the registry does not answer.
    pub async fn schema_id(&self) -> Result<u32> {
        self.registration.schema_id().await
    }

    /// Encodes `value`: the header with the schema's id, then the Avro
    /// record.
    ///
    /// # Errors
    ///
    /// [`Error::Unencodable`] when the value does not fit the schema, and
    /// what [`schema_id`](Self::schema_id) returns.
    pub async fn encode<T: Serialize>(&self, value: &T) -> Result<Vec<u8>> {
        let schema_id = self.schema_id().await?;
        let unencodable = |e: apache_avro::Error| Error::Unencodable {
            subject: self.registration.subject.clone(),
            reason: e.to_string(),
        };
        let writer = GenericDatumWriter::builder(&self.parsed)
            .build()
            .map_err(unencodable)?;
        let mut out = Vec::with_capacity(64);
        write_header(schema_id, &mut out);
        writer.write_ser(&mut out, value).map_err(unencodable)?;
        Ok(out)
    }
}
