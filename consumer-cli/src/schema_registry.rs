//! `schema registry-check`: may a schema become a subject's next version?
//! The registry's own compatibility rule answers; nothing is registered.

use std::io::Write;

use consumer_codec::registry::{RegistryClient, RegistryConfig, Schema, SchemaType};
use serde_json::json;

use crate::args::{RegistryCheckArgs, SchemaFormat};
use crate::error::{Error, Result};

/// Prints the registry's answer; `Err(RegistryIncompatible)` (exit 8) when
/// the schema may not be the subject's next version.
pub async fn check(args: &RegistryCheckArgs, out: &mut impl Write) -> Result<()> {
    let text = std::fs::read_to_string(&args.schema_file).map_err(Error::io(format!(
        "reading the schema {}",
        args.schema_file.display()
    )))?;
    let schema = Schema {
        schema_type: match args.format {
            SchemaFormat::Avro => SchemaType::Avro,
            SchemaFormat::Protobuf => SchemaType::Protobuf,
            SchemaFormat::Json => SchemaType::Json,
        },
        schema: text,
        references: Vec::new(),
    };
    let registry = RegistryClient::new(config(args)?).map_err(|e| registry_error(args, e))?;
    let (compatible, messages, first) =
        match registry.check_compatibility(&args.subject, &schema).await {
            Ok(check) => (check.is_compatible, check.messages, false),
            // No version yet: the first one is compatible with nothing to
            // break.
            Err(consumer_codec::Error::NotFound { .. }) => (true, Vec::new(), true),
            Err(e) => return Err(registry_error(args, e)),
        };
    let written = |e: std::io::Error| Error::io("writing the output")(e);
    if args.json {
        let document = json!({
            "subject": args.subject,
            "schema": args.schema_file,
            "compatible": compatible,
            "first_version": first,
            "messages": messages,
        });
        writeln!(out, "{document:#}").map_err(written)?;
    } else if first {
        writeln!(
            out,
            "{}: no version yet; {} would be its first",
            args.subject,
            args.schema_file.display()
        )
        .map_err(written)?;
    } else {
        let verdict = if compatible {
            "compatible"
        } else {
            "INCOMPATIBLE"
        };
        writeln!(
            out,
            "{}: {} is {verdict} with the latest version under the subject's rule",
            args.subject,
            args.schema_file.display()
        )
        .map_err(written)?;
        for message in &messages {
            writeln!(out, "  {message}").map_err(written)?;
        }
    }
    if compatible {
        Ok(())
    } else {
        Err(Error::RegistryIncompatible {
            subject: args.subject.clone(),
        })
    }
}

fn config(args: &RegistryCheckArgs) -> Result<RegistryConfig> {
    let config = RegistryConfig::new(&args.registry);
    match (&args.registry_token, &args.registry_user, &args.registry_password) {
        (Some(_), Some(_), _) => Err(Error::Usage(
            "--registry-token and --registry-user both given: a registry takes one kind of credentials"
                .to_owned(),
        )),
        (Some(token), None, _) => Ok(config.with_bearer_token(token)),
        (None, Some(user), password) => {
            Ok(config.with_basic_auth(user, password.clone().unwrap_or_default()))
        }
        (None, None, _) => Ok(config),
    }
}

/// What the registry's failure means for the tool's exit code.
fn registry_error(args: &RegistryCheckArgs, e: consumer_codec::Error) -> Error {
    match e {
        consumer_codec::Error::Config(reason) => Error::Usage(reason),
        e if e.is_transient() => Error::Unreachable {
            service: "the schema registry",
            address: crate::error::redact(&args.registry),
            reason: e.to_string(),
            hint: "--registry or REGISTRY_URL",
        },
        e => Error::Other(e.to_string()),
    }
}
