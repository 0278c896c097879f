//! The AdmissionReview as received: the wire format of the request, parsed
//! once, straight into typed values. The pod object is kept as raw JSON text
//! only when it does not parse as a Pod (never through `serde_json::Value`),
//! to tell a malformed review (HTTP 400) from a malformed object (an answer).

use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::core::admission::{AdmissionRequest, META_API_VERSION_V1, META_KIND, Operation};
use kube::core::{DynamicObject, GroupVersionKind, GroupVersionResource, TypeMeta};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

/// Why a body is not an AdmissionReview this webhook can answer (the
/// server answers HTTP 400 with this message).
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// Not JSON, or JSON of another shape.
    #[error("not a JSON AdmissionReview: {0}")]
    NotJson(serde_json::Error),
    /// JSON of another type than `admission.k8s.io/v1` `AdmissionReview`.
    #[error(
        "expected apiVersion {META_API_VERSION_V1} kind {META_KIND}, got apiVersion {api_version} kind {kind}"
    )]
    WrongType {
        /// `apiVersion` as sent.
        api_version: String,
        /// `kind` as sent.
        kind: String,
    },
    /// `request` is absent or null.
    #[error("the AdmissionReview has no request")]
    NoRequest,
    /// `request.uid` is empty: there is nothing to answer to.
    #[error("the AdmissionReview request has no uid")]
    NoUid,
}

/// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
pub(super) fn operation_name(operation: &Operation) -> &'static str {
    match operation {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

/// An AdmissionReview as received: the fields of kube's
/// `AdmissionReview`/`AdmissionRequest` with the same types (so the same
/// bodies are accepted and refused), except that `request.object` is `O`
/// (the `Pod` itself, or its raw JSON text) and `request.oldObject` is
/// skipped (never used).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireReview<O> {
    api_version: String,
    kind: String,
    request: Option<WireRequest<O>>,
}

/// See [`WireReview`]; fields as in kube's `AdmissionRequest`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireRequest<O> {
    uid: String,
    kind: GroupVersionKind,
    resource: GroupVersionResource,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    request_kind: Option<GroupVersionKind>,
    #[serde(default)]
    request_resource: Option<GroupVersionResource>,
    #[serde(default)]
    request_sub_resource: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    operation: Operation,
    user_info: UserInfo,
    object: Option<O>,
    #[serde(default, rename = "oldObject")]
    _old_object: Option<IgnoredAny>,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    options: Option<RawExtension>,
}

/// `request.object` of a parsed review.
// Lives on the stack for one call and is moved once; boxing the Pod would
// cost one more allocation per review.
#[allow(clippy::large_enum_variant)]
pub(super) enum Object {
    /// A Pod (or something that parses as one: only pod requests use it).
    Pod(Pod),
    /// Not a Pod: where and why.
    Invalid(InvalidPod),
    /// Absent or null.
    Absent,
}

/// Parse the body. A malformed pod still yields a request (with its uid) to
/// answer: the common case, a well-formed review of a well-formed pod, is
/// parsed in one pass straight into a `Pod`; only when that fails is the
/// body parsed again with the object kept as raw JSON text, to tell a
/// malformed review (400) from a malformed object (an answer).
pub(super) fn parse(body: &[u8]) -> Result<(AdmissionRequest<DynamicObject>, Object), ReviewError> {
    if let Ok(review) = serde_json::from_slice::<WireReview<Pod>>(body) {
        let (request, pod) = into_request(review)?;
        return Ok((request, pod.map_or(Object::Absent, Object::Pod)));
    }
    let review: WireReview<Box<RawValue>> =
        serde_json::from_slice(body).map_err(ReviewError::NotJson)?;
    let (request, raw) = into_request(review)?;
    let object = match raw {
        None => Object::Absent,
        Some(raw) => match parse_pod(raw.get()) {
            Ok(pod) => Object::Pod(pod),
            Err(e) => Object::Invalid(e),
        },
    };
    Ok((request, object))
}

/// Where and why a pod object does not parse, for the admission warning or
/// refusal and the log: `path` is the field, as
/// [`serde_path_to_error::Path`] prints it (`spec.containers[0].ports[0].containerPort`;
/// `.` for the object itself), `message` serde's reason without the
/// position (the object is one line of the review's JSON, so `line 1
/// column N` told a Job author nothing).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at {path}: {message}")]
pub struct InvalidPod {
    /// The field that does not parse.
    pub path: String,
    /// Why, e.g. `invalid type: string "80", expected i32`.
    pub message: String,
}

/// Parses `raw` as a Pod, naming the field that fails ([`InvalidPod`]).
fn parse_pod(raw: &str) -> Result<Pod, InvalidPod> {
    let mut de = serde_json::Deserializer::from_str(raw);
    serde_path_to_error::deserialize::<_, Pod>(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let text = inner.to_string();
        let position = format!(" at line {} column {}", inner.line(), inner.column());
        InvalidPod {
            path,
            message: text
                .strip_suffix(&position)
                .map_or_else(|| text.clone(), str::to_owned),
        }
    })
}

/// Checks the review's type and uid; kube's request and the object.
fn into_request<O>(
    review: WireReview<O>,
) -> Result<(AdmissionRequest<DynamicObject>, Option<O>), ReviewError> {
    if review.api_version != META_API_VERSION_V1 || review.kind != META_KIND {
        return Err(ReviewError::WrongType {
            api_version: review.api_version,
            kind: review.kind,
        });
    }
    let Some(r) = review.request else {
        return Err(ReviewError::NoRequest);
    };
    if r.uid.is_empty() {
        return Err(ReviewError::NoUid);
    }
    let request = AdmissionRequest {
        types: TypeMeta {
            api_version: review.api_version,
            kind: review.kind,
        },
        uid: r.uid,
        kind: r.kind,
        resource: r.resource,
        sub_resource: r.sub_resource,
        request_kind: r.request_kind,
        request_resource: r.request_resource,
        request_sub_resource: r.request_sub_resource,
        name: r.name,
        namespace: r.namespace,
        operation: r.operation,
        user_info: r.user_info,
        object: None,
        old_object: None,
        dry_run: r.dry_run,
        options: r.options,
    };
    Ok((request, r.object))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// How this module parsed before: the whole body into a `Value`,
    /// `object` and `oldObject` taken out, the rest into kube's
    /// `AdmissionReview`, the object then into a `Pod`.
    fn kube_parse(body: &[u8]) -> Option<(String, Option<Value>)> {
        let mut value: Value = serde_json::from_slice(body).ok()?;
        if value.get("apiVersion").and_then(Value::as_str) != Some(META_API_VERSION_V1)
            || value.get("kind").and_then(Value::as_str) != Some(META_KIND)
        {
            return None;
        }
        let mut object = None;
        if let Some(request) = value.get_mut("request").and_then(Value::as_object_mut) {
            object = request.remove("object").filter(|o| !o.is_null());
            request.remove("oldObject");
        }
        let review: kube::core::admission::AdmissionReview<DynamicObject> =
            serde_json::from_value(value).ok()?;
        let request: AdmissionRequest<DynamicObject> = review.try_into().ok()?;
        // The object as a Pod (round trip), `null` when it is not one.
        let object = object.map(|o| {
            serde_json::from_value::<Pod>(o)
                .map_or(Value::Null, |pod| serde_json::to_value(pod).unwrap())
        });
        (!request.uid.is_empty()).then_some((request.uid, object))
    }

    /// A pod that does not parse is answered naming the field and why,
    /// without serde's position in the review's one-line JSON.
    #[test]
    fn an_invalid_pod_names_the_field() {
        for (object, path, message) in [
            (
                json!({"spec": {"containers": [{"name": "c", "ports": [{"containerPort": "80"}]}]}}),
                "spec.containers[0].ports[0].containerPort",
                "invalid type: string \"80\", expected i32",
            ),
            (
                json!({"spec": {"containers": 5}}),
                "spec.containers",
                "invalid type: integer `5`, expected a sequence",
            ),
            (
                json!({"metadata": {"annotations": {"kube-prestop.io/inject": true}}}),
                "metadata.annotations.kube-prestop.io/inject",
                "invalid type: boolean `true`, expected a string",
            ),
            (
                json!("not a pod"),
                ".",
                "invalid type: string \"not a pod\", expected Pod",
            ),
        ] {
            let body = serde_json::to_vec(&json!({
                "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "resource": {"group": "", "version": "v1", "resource": "pods"},
                    "operation": "CREATE", "userInfo": {}, "object": object}
            }))
            .unwrap();
            let Ok((_, Object::Invalid(e))) = parse(&body) else {
                panic!("{object} parsed");
            };
            assert_eq!((e.path.as_str(), e.message.as_str()), (path, message));
            assert_eq!(
                crate::admission::PodError::Unparsable(e).to_string(),
                format!("the pod object does not parse at {path}: {message}")
            );
        }
    }

    #[test]
    fn parse_accepts_what_kubes_types_accept() {
        let seeds =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/admission");
        let mut bodies: Vec<Vec<u8>> = std::fs::read_dir(seeds)
            .unwrap()
            .map(|e| std::fs::read(e.unwrap().path()).unwrap())
            .collect();
        assert!(bodies.len() >= 5);
        let base = json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "operation": "CREATE",
                "userInfo": {"username": "x", "groups": ["a"], "extra": {"k": ["v"]}},
                "object": {"metadata": {"name": "p"}},
                "oldObject": {"any": ["thing", 1]},
                "options": {"kind": "CreateOptions"},
                "dryRun": true
            }
        });
        let variants: Vec<(&str, Value)> = vec![
            ("", Value::Null),
            (
                "/request/object",
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                       "spec": {"containers": [{"name": "c", "image": "i"}]}}),
            ),
            ("/request/object/spec", json!({"containers": 5})),
            ("/request/object/kind", json!("Deployment")),
            ("/request/object", Value::Null),
            ("/request/object", json!("not a pod")),
            ("/request/oldObject", json!(5)),
            ("/request/uid", json!("")),
            ("/request/uid", json!(5)),
            ("/request/operation", json!("PATCH")),
            ("/request/userInfo", json!(5)),
            ("/request/userInfo/groups", json!("a")),
            ("/request/kind", json!({"group": ""})),
            ("/request/resource/resource", Value::Null),
            ("/request/subResource", json!("status")),
            ("/request/dryRun", json!("yes")),
            ("/request", Value::Null),
            ("/kind", json!("Other")),
            ("/apiVersion", json!("admission.k8s.io/v1beta1")),
        ];
        for (path, value) in variants {
            let mut body = base.clone();
            if let Some((parent, key)) = path.rsplit_once('/') {
                body.pointer_mut(parent)
                    .unwrap()
                    .as_object_mut()
                    .unwrap()
                    .insert(key.to_owned(), value);
            }
            bodies.push(serde_json::to_vec(&body).unwrap());
        }
        for body in bodies {
            let old = kube_parse(&body);
            let new = parse(&body).ok().map(|(request, object)| {
                let object = match object {
                    Object::Pod(pod) => Some(serde_json::to_value(pod).unwrap()),
                    Object::Invalid(_) => Some(Value::Null),
                    Object::Absent => None,
                };
                (request.uid, object)
            });
            assert_eq!(new, old, "{}", String::from_utf8_lossy(&body));
        }
    }
}
