//! Injection of one document: Pods as they are, the pod templates of Jobs
//! and CronJobs as the webhook would see the Job controller's pods; other
//! kinds unchanged. The result is the input document with the engine's
//! changes applied as a JSON Patch, so fields the engine did not touch keep
//! the user's spelling.

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use serde::Serialize;
use serde_json::Value;

use super::InjectError;
use super::documents::{Document, locate_path};
use super::selector;
use super::strict::{StrictError, display_path, from_value_strict};
use kube_prestop_engine::{
    self as engine, ClusterContext, EngineConfig, EngineError, OwnerHint, SkipReason, Verdict,
    Warning,
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
            let site = Site {
                doc,
                at,
                pod_metadata: POD_METADATA,
                label: &label,
            };
            match selector::excluded_by(pod.metadata.labels.as_ref()) {
                Some(excluded_by) => {
                    warnings = site.unknown_annotation_warnings(&pod);
                    Err(excluded(excluded_by, "pod"))
                }
                None => {
                    let verdict = engine::review(&pod, &context, config);
                    warnings = site.warnings(&verdict);
                    site.injected(&pod, &verdict, &[], |after: Pod| {
                        serde_json::to_value(after)
                    })?
                }
            }
        }
        ("batch/v1", "Job") => {
            let job: Job = strict(doc, value, at, kind)?;
            let site = Site {
                doc,
                at,
                pod_metadata: JOB_POD_METADATA,
                label: &label,
            };
            match job.spec.as_ref().map(|s| &s.template) {
                None => Err("no spec.template".to_owned()),
                Some(template) => {
                    let (decided, w) = site.template(
                        template,
                        &context,
                        config,
                        &["spec", "template"],
                        |after| {
                            let mut injected = job.clone();
                            if let Some(spec) = injected.spec.as_mut() {
                                spec.template = after;
                            }
                            serde_json::to_value(injected)
                        },
                    )?;
                    warnings = w;
                    decided
                }
            }
        }
        ("batch/v1", "CronJob") => {
            let cron: CronJob = strict(doc, value, at, kind)?;
            let site = Site {
                doc,
                at,
                pod_metadata: CRONJOB_POD_METADATA,
                label: &label,
            };
            let template = cron
                .spec
                .as_ref()
                .and_then(|s| s.job_template.spec.as_ref())
                .map(|s| &s.template);
            match template {
                None => Err("no spec.jobTemplate.spec.template".to_owned()),
                Some(template) => {
                    let at_template = ["spec", "jobTemplate", "spec", "template"];
                    let (decided, w) =
                        site.template(template, &context, config, &at_template, |after| {
                            let mut injected = cron.clone();
                            if let Some(job_spec) = injected
                                .spec
                                .as_mut()
                                .and_then(|s| s.job_template.spec.as_mut())
                            {
                                job_spec.template = after;
                            }
                            serde_json::to_value(injected)
                        })?;
                    warnings = w;
                    decided
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
        Ok(injected) => {
            let mut out = value.clone();
            let value = match injected
                .patch
                .as_ref()
                .map(|p| json_patch::patch(&mut out, p))
            {
                Some(Ok(())) => out,
                // The input's own spelling did not take the patch (e.g. a
                // number where the type has a string, or a template without
                // metadata): emit the typed result.
                _ => injected.typed,
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

/// An injected object: the engine's patch with its paths from the object's
/// root (`None` when the pointers could not be rebased), and the typed
/// object with the mutation applied.
struct Injected {
    patch: Option<json_patch::Patch>,
    typed: Value,
}

/// Where an object sits: its document, its path in it, where its pod
/// metadata is (from the object) and its `Kind/name`.
struct Site<'a> {
    doc: &'a Document,
    at: &'a [String],
    pod_metadata: &'a [&'a str],
    label: &'a str,
}

impl Site<'_> {
    /// The engine's verdict on a pod: `Ok(Ok(..))` injected, with the patch
    /// rebased under `under` (the pod template's path in the object; empty
    /// for a Pod) and the typed object `typed` makes of the injected pod;
    /// `Ok(Err(reason))` not injected; `Err` the engine's error, located.
    fn injected<T: serde::de::DeserializeOwned>(
        &self,
        pod: &Pod,
        verdict: &Verdict,
        under: &[&str],
        typed: impl FnOnce(T) -> serde_json::Result<Value>,
    ) -> Result<Result<Injected, String>, InjectError> {
        let plan = verdict
            .plan
            .as_ref()
            .map_err(|e| engine_error(self.doc, self.at, self.pod_metadata, self.label, e))?;
        if let engine::Plan::Skip(reason) = plan {
            return Ok(Err(skip_label(reason)));
        }
        let invalid = |message: String| InjectError::Invalid {
            document: self.doc.number,
            line: self.doc.first_line,
            message,
        };
        let patch = verdict.patch(pod).map_err(|e| invalid(e.to_string()))?;
        let after = verdict.injected(pod).unwrap_or_else(|| pod.clone());
        let after: T = if under.is_empty() {
            serde_json::from_value(serde_json::to_value(after).map_err(|e| invalid(e.to_string()))?)
        } else {
            serde_json::from_value(
                serde_json::to_value(PodTemplateSpec {
                    metadata: Some(after.metadata),
                    spec: after.spec,
                })
                .map_err(|e| invalid(e.to_string()))?,
            )
        }
        .map_err(|e| invalid(e.to_string()))?;
        let typed = typed(after).map_err(|e| invalid(e.to_string()))?;
        Ok(Ok(Injected {
            patch: rebase(patch, under),
            typed,
        }))
    }

    /// [`Self::injected`] for a Job's or CronJob's pod template at `under`,
    /// as the webhook would see the Job controller's pods, unless the
    /// webhook configuration's `objectSelector` keeps them from being sent
    /// to it at all; with the warnings.
    fn template(
        &self,
        template: &PodTemplateSpec,
        context: &ClusterContext,
        config: &EngineConfig,
        under: &[&str],
        typed: impl FnOnce(PodTemplateSpec) -> serde_json::Result<Value>,
    ) -> Result<(Result<Injected, String>, Vec<String>), InjectError> {
        let (pod, verdict) = engine::review_template(template, OwnerHint::Job, context, config);
        let labels = template.metadata.as_ref().and_then(|m| m.labels.as_ref());
        if let Some(label) = selector::excluded_by(labels) {
            let warnings = self.unknown_annotation_warnings(&pod);
            return Ok((Err(excluded(label, "pod template")), warnings));
        }
        let warnings = self.warnings(&verdict);
        Ok((self.injected(&pod, &verdict, under, typed)?, warnings))
    }

    /// The verdict's warnings, each with the line of the annotation it is
    /// about: the webhook sends the same ones as admission warnings.
    fn warnings(&self, verdict: &Verdict) -> Vec<String> {
        verdict
            .warnings
            .iter()
            .map(|warning| {
                let key = match warning {
                    Warning::UnknownAnnotation(unknown) => unknown.key.as_str(),
                    // No key of its own: the line of the annotations.
                    Warning::MoreUnknownAnnotations(_) => engine::annotations::PREFIX,
                    Warning::OptedInButSkipped(_) => engine::annotations::INJECT,
                };
                let text = warning.to_string();
                let text = text.strip_prefix("kube-prestop: ").unwrap_or(&text);
                format!(
                    "document {}, line {}: {}: {text}",
                    self.doc.number,
                    self.annotation_line(key),
                    self.label
                )
            })
            .collect()
    }

    /// The unknown-annotation warnings alone (for an object the API server
    /// never sends to the webhook, which the engine does not review).
    fn unknown_annotation_warnings(&self, pod: &Pod) -> Vec<String> {
        let unknown = engine::annotations::unknown_annotations(pod.metadata.annotations.as_ref());
        let mut warnings: Vec<String> = unknown
            .listed
            .iter()
            .map(|unknown| {
                format!(
                    "document {}, line {}: {}: {unknown}",
                    self.doc.number,
                    self.annotation_line(&unknown.key),
                    self.label
                )
            })
            .collect();
        if unknown.more > 0 {
            let more = Warning::MoreUnknownAnnotations(unknown.more).to_string();
            let more = more.strip_prefix("kube-prestop: ").unwrap_or(&more);
            warnings.push(format!(
                "document {}, line {}: {}: {more}",
                self.doc.number,
                self.annotation_line(engine::annotations::PREFIX),
                self.label
            ));
        }
        warnings
    }

    /// The line of annotation `key` of the pod metadata.
    fn annotation_line(&self, key: &str) -> usize {
        let mut path = self.at.to_vec();
        path.extend(self.pod_metadata.iter().map(|s| (*s).to_owned()));
        path.push("annotations".to_owned());
        path.push(key.to_owned());
        locate_path(self.doc, &path)
    }
}

/// `patch` (paths from a pod's root) with every path put under `under`;
/// `None` when a pointer does not rebase (not expected).
fn rebase(patch: json_patch::Patch, under: &[&str]) -> Option<json_patch::Patch> {
    if under.is_empty() {
        return Some(patch);
    }
    let mut value = serde_json::to_value(patch).ok()?;
    let prefix: String = under.iter().map(|t| format!("/{t}")).collect();
    for op in value.as_array_mut()? {
        let path = op.get_mut("path")?;
        let rebased = format!("{prefix}{}", path.as_str()?);
        *path = Value::String(rebased);
    }
    serde_json::from_value(value).ok()
}

/// Why an object is not injected when its pods carry a label the webhook
/// configuration's `objectSelector` excludes (`whose`: `pod`, `pod template`).
fn excluded((key, value): (&str, &str), whose: &str) -> String {
    format!(
        "the {whose} is labelled {key}={value}, which the webhook configuration's objectSelector excludes: the API server never sends such pods to the webhook (object_selector)"
    )
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
