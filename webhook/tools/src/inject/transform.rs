//! Injection of one document: Pods as they are, the pod templates of Jobs
//! and CronJobs as the webhook would see the Job controller's pods; other
//! kinds unchanged. The result is the input document with the engine's
//! changes applied as a JSON Patch, so fields the engine did not touch keep
//! the user's spelling.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use serde::Serialize;
use serde_json::Value;

use super::InjectError;
use super::documents::{Document, locate_path};
use super::selector;
use super::strict::{StrictError, display_path, from_value_strict};
use kube_prestop_engine::{
    self as engine, ClusterContext, Decision, EngineConfig, EngineError, OwnerHint, SkipReason,
    TemplateDecision,
};

/// What happened to one document.
#[derive(Debug, Clone)]
pub struct Transformed {
    /// The output document.
    pub value: Value,
    /// `Kind/name` and what was done, for the summary on stderr.
    pub summary: String,
    /// Warnings for stderr, each naming the document, the line and the
    /// object (unknown `kube-prestop.io/` annotations).
    pub warnings: Vec<String>,
}

/// Paths (from the object) of the pod metadata the engine reads.
const POD_METADATA: &[&str] = &["metadata"];
const JOB_POD_METADATA: &[&str] = &["spec", "template", "metadata"];
const CRONJOB_POD_METADATA: &[&str] = &["spec", "jobTemplate", "spec", "template", "metadata"];

/// Inject one document (recursing into `v1` `List` items). `value` is the
/// object at path `at` of the document (empty: the document itself).
pub fn transform(
    doc: &Document,
    value: &Value,
    at: &[String],
    default_namespace: &str,
    config: &EngineConfig,
) -> Result<Transformed, InjectError> {
    let api_version = value
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = value
        .pointer("/metadata/name")
        .or_else(|| value.pointer("/metadata/generateName"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let namespace = value
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or(default_namespace)
        .to_owned();
    let context = ClusterContext {
        namespace,
        limit_ranges: Vec::new(),
        // Offline: no ConfigMap is known to exist and nothing is known of
        // the nodes, so the install init container copies the binary.
        binary: Default::default(),
    };
    let label = format!("{kind}/{name}");
    let mut warnings = Vec::new();
    let decided = match (api_version, kind) {
        ("v1", "Pod") => {
            let pod: Pod = strict(doc, value, at, kind)?;
            let annotations = pod.metadata.annotations.as_ref();
            warnings = unknown_annotation_warnings(doc, at, POD_METADATA, &label, annotations);
            if let Some(label) = selector::excluded_by(pod.metadata.labels.as_ref()) {
                Err(excluded(label, "pod"))
            } else {
                let decision = engine::inject(&pod, &context, config)
                    .map_err(|e| engine_error(doc, at, POD_METADATA, &label, &e))?;
                match decision {
                    Decision::Skip(reason) => Err(skip_label(&reason)),
                    Decision::Inject(after) => Ok(diff(doc, &pod, &*after)?),
                }
            }
        }
        ("batch/v1", "Job") => {
            let job: Job = strict(doc, value, at, kind)?;
            let template = job.spec.as_ref().map(|s| &s.template);
            let annotations = template.and_then(template_annotations);
            warnings = unknown_annotation_warnings(doc, at, JOB_POD_METADATA, &label, annotations);
            match template
                .map(|t| inject_template(t, &context, config))
                .transpose()
            {
                Err(e) => return Err(engine_error(doc, at, JOB_POD_METADATA, &label, &e)),
                Ok(None) => Err("no spec.template".to_owned()),
                Ok(Some(Err(reason))) => Err(reason),
                Ok(Some(Ok(after))) => {
                    let mut injected = job.clone();
                    if let Some(spec) = injected.spec.as_mut() {
                        spec.template = after;
                    }
                    Ok(diff(doc, &job, &injected)?)
                }
            }
        }
        ("batch/v1", "CronJob") => {
            let cron: CronJob = strict(doc, value, at, kind)?;
            let template = cron
                .spec
                .as_ref()
                .and_then(|s| s.job_template.spec.as_ref())
                .map(|s| &s.template);
            let annotations = template.and_then(template_annotations);
            warnings =
                unknown_annotation_warnings(doc, at, CRONJOB_POD_METADATA, &label, annotations);
            match template
                .map(|t| inject_template(t, &context, config))
                .transpose()
            {
                Err(e) => {
                    return Err(engine_error(doc, at, CRONJOB_POD_METADATA, &label, &e));
                }
                Ok(None) => Err("no spec.jobTemplate.spec.template".to_owned()),
                Ok(Some(Err(reason))) => Err(reason),
                Ok(Some(Ok(after))) => {
                    let mut injected = cron.clone();
                    if let Some(job_spec) = injected
                        .spec
                        .as_mut()
                        .and_then(|s| s.job_template.spec.as_mut())
                    {
                        job_spec.template = after;
                    }
                    Ok(diff(doc, &cron, &injected)?)
                }
            }
        }
        ("v1", "List") => {
            let mut out = value.clone();
            let mut summaries = Vec::new();
            let mut warnings = Vec::new();
            if let Some(items) = out.get_mut("items").and_then(Value::as_array_mut) {
                for (i, item) in items.iter_mut().enumerate() {
                    let item_at = [at, &["items".to_owned(), format!("[{i}]")]].concat();
                    let t = transform(doc, item, &item_at, default_namespace, config)?;
                    *item = t.value;
                    summaries.push(t.summary);
                    warnings.extend(t.warnings);
                }
            }
            return Ok(Transformed {
                value: out,
                summary: format!("List [{}]", summaries.join("; ")),
                warnings,
            });
        }
        _ => {
            return Ok(Transformed {
                value: value.clone(),
                summary: format!("{label}: passed through (not a Pod, Job or CronJob)"),
                warnings,
            });
        }
    };
    Ok(match decided {
        Ok((patch, typed_after)) => {
            let mut out = value.clone();
            let value = match json_patch::patch(&mut out, &patch) {
                Ok(()) => out,
                // The input's own spelling did not take the patch (e.g. a
                // number where the type has a string): emit the typed result.
                Err(_) => typed_after,
            };
            Transformed {
                value,
                summary: format!("{label}: injected"),
                warnings,
            }
        }
        Err(reason) => Transformed {
            value: value.clone(),
            summary: format!("{label}: not injected ({reason})"),
            warnings,
        },
    })
}

/// Run the engine on a pod template, as the webhook would see the pods the
/// Job controller makes from it, unless the webhook configuration's
/// `objectSelector` keeps them from being sent to it at all.
/// `Ok(Err(reason))`: not injected.
fn inject_template(
    template: &PodTemplateSpec,
    context: &ClusterContext,
    config: &EngineConfig,
) -> Result<Result<PodTemplateSpec, String>, EngineError> {
    let labels = template.metadata.as_ref().and_then(|m| m.labels.as_ref());
    if let Some(label) = selector::excluded_by(labels) {
        return Ok(Err(excluded(label, "pod template")));
    }
    Ok(
        match engine::inject_template(template, OwnerHint::Job, context, config)? {
            TemplateDecision::Skip(reason) => Err(skip_label(&reason)),
            TemplateDecision::Inject(template) => Ok(*template),
        },
    )
}

fn template_annotations(template: &PodTemplateSpec) -> Option<&BTreeMap<String, String>> {
    template.metadata.as_ref()?.annotations.as_ref()
}

/// Why an object is not injected when its pods carry a label the webhook
/// configuration's `objectSelector` excludes (`whose`: `pod`, `pod template`).
fn excluded((key, value): (&str, &str), whose: &str) -> String {
    format!(
        "the {whose} is labelled {key}={value}, which the webhook configuration's objectSelector excludes: the API server never sends such pods to the webhook (object_selector)"
    )
}

/// One warning per unknown `kube-prestop.io/` annotation of the pod
/// metadata at `pod_metadata` (from the object at `at`), with its line:
/// the webhook ignores them too, and reports them as admission warnings.
fn unknown_annotation_warnings(
    doc: &Document,
    at: &[String],
    pod_metadata: &[&str],
    label: &str,
    annotations: Option<&BTreeMap<String, String>>,
) -> Vec<String> {
    engine::annotations::unknown_annotations(annotations)
        .into_iter()
        .map(|unknown| {
            let mut path = at.to_vec();
            path.extend(pod_metadata.iter().map(|s| (*s).to_owned()));
            path.push("annotations".to_owned());
            path.push(unknown.key.clone());
            let line = locate_path(doc, &path);
            format!("document {}, line {line}: {label}: {unknown}", doc.number)
        })
        .collect()
}

/// `reason (label)`, e.g. `no regular container has ... (no_exec_prestop)`.
fn skip_label(reason: &SkipReason) -> String {
    format!("{reason} ({})", reason.as_str())
}

fn strict<T: serde::de::DeserializeOwned + Serialize>(
    doc: &Document,
    value: &Value,
    at: &[String],
    kind: &str,
) -> Result<T, InjectError> {
    from_value_strict(value).map_err(|e| match e {
        StrictError::Invalid(message, path) => InjectError::Invalid {
            document: doc.number,
            line: locate_path(doc, &[at, &path].concat()),
            message: if path.is_empty() {
                format!("not a valid {kind}: {message}")
            } else {
                format!("not a valid {kind}: {}: {message}", display_path(&path))
            },
        },
        StrictError::UnknownField(path) => InjectError::UnknownField {
            document: doc.number,
            line: locate_path(doc, &[at, &path].concat()),
            kind: kind.to_owned(),
            path: display_path(&path),
        },
    })
}

/// An engine error on the object at `at`, whose pod metadata is at
/// `pod_metadata` (from the object): an annotation error points at the
/// annotation's line, any other at the object's.
fn engine_error(
    doc: &Document,
    at: &[String],
    pod_metadata: &[&str],
    label: &str,
    e: &EngineError,
) -> InjectError {
    let mut path = at.to_vec();
    if let EngineError::InvalidAnnotation { annotation, .. } = e {
        path.extend(pod_metadata.iter().map(|s| (*s).to_owned()));
        path.push("annotations".to_owned());
        path.push(annotation.clone());
    }
    InjectError::Engine {
        document: doc.number,
        line: locate_path(doc, &path),
        object: label.to_owned(),
        message: e.to_string(),
    }
}

/// The patch from `before` to `after` (both serialized through their type)
/// and `after` as JSON.
fn diff<T: Serialize>(
    doc: &Document,
    before: &T,
    after: &T,
) -> Result<(json_patch::Patch, Value), InjectError> {
    let to_value = |v: &T| {
        serde_json::to_value(v).map_err(|e| InjectError::Invalid {
            document: doc.number,
            line: doc.first_line,
            message: e.to_string(),
        })
    };
    let after = to_value(after)?;
    Ok((json_patch::diff(&to_value(before)?, &after), after))
}
