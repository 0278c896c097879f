//! Offline injection (`kube-prestop-webhook inject -f FILE`): read YAML or
//! JSON manifests, inject Pods and the pod templates of Jobs and CronJobs
//! exactly as the webhook would, pass other kinds through, and render the
//! result. All output is built in memory: on any error nothing is printed.

mod documents;
mod locate;
mod selector;
mod strict;
mod transform;

use serde_json::Value;

use kube_prestop_engine::EngineConfig;

pub use documents::{Document, parse_stream};
pub use selector::{COMPONENT_LABEL, EXCLUDED_POD_LABELS};

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    /// YAML documents separated by `---`.
    #[default]
    Yaml,
    /// JSON: the object for a single document, a `v1` `List` for several.
    Json,
}

/// Why `inject` failed. Every variant names the 1-based document number in
/// the stream and a 1-based line of the input.
#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    /// The input is not valid YAML/JSON.
    #[error("document {document}, line {line}: cannot parse: {message}")]
    Parse {
        /// Document number.
        document: usize,
        /// Line of the input.
        line: usize,
        /// Parser message.
        message: String,
    },
    /// A Pod/Job/CronJob with a field its type does not have.
    #[error(
        "document {document}, line {line}: unknown field `{path}` in {kind} (misspelt, or not in the Kubernetes API this tool knows)"
    )]
    UnknownField {
        /// Document number.
        document: usize,
        /// Best-effort line of the field.
        line: usize,
        /// Kind of the document.
        kind: String,
        /// Path of the field from the document root.
        path: String,
    },
    /// A Pod/Job/CronJob whose fields have the wrong shape.
    #[error("document {document}, line {line}: {message}")]
    Invalid {
        /// Document number.
        document: usize,
        /// Line where the document starts.
        line: usize,
        /// Message.
        message: String,
    },
    /// The engine could not handle the object.
    #[error("document {document}, line {line}: cannot inject {object}: {message}")]
    Engine {
        /// Document number.
        document: usize,
        /// Line of the offending annotation for an annotation error, else
        /// of the object (a `List` item's own line, or where the document
        /// starts).
        line: usize,
        /// `Kind/name`.
        object: String,
        /// Engine message.
        message: String,
    },
    /// The result could not be rendered.
    #[error("cannot render the output: {0}")]
    Render(String),
}

/// The rendered output and one summary line per document.
#[derive(Debug, Clone)]
pub struct InjectOutput {
    /// Text to print on stdout.
    pub text: String,
    /// `Kind/name: injected` / `not injected (reason)` / `passed through`.
    pub summaries: Vec<String>,
    /// Warnings (unknown `kube-prestop.io/` annotations, which the webhook
    /// ignores too), each naming the document, the line and the object.
    pub warnings: Vec<String>,
}

/// Inject every document of `input`.
///
/// `default_namespace` applies to documents without `metadata.namespace`.
pub fn run(
    input: &str,
    default_namespace: &str,
    config: &EngineConfig,
    format: OutputFormat,
) -> Result<InjectOutput, InjectError> {
    let docs = parse_stream(input)?;
    let mut values = Vec::with_capacity(docs.len());
    let mut summaries = Vec::with_capacity(docs.len());
    let mut warnings = Vec::new();
    for doc in &docs {
        let t = transform::transform(doc, &doc.value, &[], default_namespace, config)?;
        summaries.push(format!("document {}: {}", doc.number, t.summary));
        warnings.extend(t.warnings);
        values.push(t.value);
    }
    let text = render(values, format)?;
    Ok(InjectOutput {
        text,
        summaries,
        warnings,
    })
}

fn render(values: Vec<Value>, format: OutputFormat) -> Result<String, InjectError> {
    match format {
        OutputFormat::Json => {
            let value = if values.len() == 1 {
                values.into_iter().next().unwrap_or(Value::Null)
            } else {
                serde_json::json!({"apiVersion": "v1", "kind": "List", "items": values})
            };
            let mut text = serde_json::to_string_pretty(&value)
                .map_err(|e| InjectError::Render(e.to_string()))?;
            text.push('\n');
            Ok(text)
        }
        OutputFormat::Yaml => {
            let mut text = String::new();
            for (i, value) in values.iter().enumerate() {
                if i > 0 {
                    text.push_str("---\n");
                }
                let doc = serde_saphyr::to_string(value)
                    .map_err(|e| InjectError::Render(e.to_string()))?;
                text.push_str(&doc);
                if !doc.ends_with('\n') {
                    text.push('\n');
                }
            }
            Ok(text)
        }
    }
}
