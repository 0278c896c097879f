//! The AdmissionReview as received: the wire format of the request, parsed
//! once into typed values, with the pod object borrowed as raw JSON text
//! (never through `serde_json::Value`) and then parsed as a Pod: its length
//! is the pod's size as sent (what the injected pod's size is judged on,
//! not the whole body's), and a pod that does not parse is told from a
//! malformed review (HTTP 400) and answered. The review and its `request`
//! must be JSON objects: serde's derived `Deserialize` also takes a struct
//! from a JSON array of its fields in order, which no API server sends.

use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::core::admission::{AdmissionRequest, META_API_VERSION_V1, META_KIND, Operation};
use kube::core::{DynamicObject, GroupVersionKind, GroupVersionResource, TypeMeta};
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use super::annotations_view::AnnotationsView;
use kube_prestop_engine::shown::{MAX_SHOWN_VALUE_CHARS, shown};

/// Most characters of a parser's message or of a field path shown in an
/// error ([`ReviewError::NotJson`], [`InvalidPod`]): serde quotes the value
/// that does not parse whole (`invalid type: string "..."`, `unknown
/// variant ...`), and a path names map keys, both the client's.
const MAX_SHOWN_PARSE_ERROR_CHARS: usize = 256;

/// Why a body is not an AdmissionReview this webhook can answer (the
/// server answers HTTP 400 with this message, and logs it). The body's
/// strings are shown through [`shown`]: cut, with their length, control
/// characters escaped.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// Not JSON, or JSON of another shape.
    #[error(
        "not a JSON AdmissionReview: {}",
        shown(&.0.to_string(), MAX_SHOWN_PARSE_ERROR_CHARS)
    )]
    NotJson(serde_json::Error),
    /// JSON of another type than `admission.k8s.io/v1` `AdmissionReview`.
    #[error(
        "expected apiVersion {META_API_VERSION_V1} kind {META_KIND}, got apiVersion {} kind {}",
        shown(.api_version, MAX_SHOWN_VALUE_CHARS),
        shown(.kind, MAX_SHOWN_VALUE_CHARS)
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
    /// The review around its object (`request.options`,
    /// `request.userInfo`, ...) would cost more memory to parse than one
    /// review may take ([`super::ParseBudget::max_per_review`]); no API
    /// server sends that.
    #[error(
        "the AdmissionReview without its object would take about {bytes} bytes of memory to parse, over the {max_bytes}-byte bound per review{}",
        super::cost::longest_list_note(longest_list.as_ref())
    )]
    TooCostly {
        /// The estimate, bytes.
        bytes: usize,
        /// The bound, bytes.
        max_bytes: usize,
        /// The review's longest list and its length.
        longest_list: Option<(String, usize)>,
    },
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
#[serde(rename_all = "camelCase", bound(deserialize = "O: Deserialize<'de>"))]
struct WireReview<O> {
    api_version: String,
    kind: String,
    #[serde(default = "absent", deserialize_with = "optional_object")]
    request: Option<WireRequest<O>>,
}

/// An absent field's value: `None`.
fn absent<T>() -> Option<T> {
    None
}

/// Deserializes a `T` (a struct) only from a JSON object: a JSON array (of
/// its fields in order, which serde's derive also accepts) or any other
/// value is an `invalid type` error.
fn object<'de, T: Deserialize<'de>, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
    struct Only<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for Only<T> {
        type Value = T;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_map(Only(std::marker::PhantomData))
}

/// [`object`] for a field that may be absent or `null` (`None`).
fn optional_object<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    struct Opt<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for Opt<T> {
        type Value = Option<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object or null")
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Option<T>, E> {
            Ok(None)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Option<T>, E> {
            Ok(None)
        }
        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Option<T>, D2::Error> {
            object(d).map(Some)
        }
    }
    d.deserialize_option(Opt(std::marker::PhantomData))
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
    /// Not parsed: it would cost more memory than one review may take
    /// ([`super::ParseBudget::max_per_review`]). With its annotations'
    /// view, scanned from its JSON ([`AnnotationsView::scan`]), when the
    /// scan succeeds: enough to write [`kube_prestop_engine::annotations::SKIPPED`].
    TooCostly(super::Cost, Option<AnnotationsView>),
    /// Absent or null.
    Absent,
}

/// A parsed review: kube's request, its object, and the object's size.
pub(super) struct Parsed {
    /// The request (without its objects).
    pub request: AdmissionRequest<DynamicObject>,
    /// `request.object`.
    pub object: Object,
    /// Bytes of `request.object`'s JSON text as sent (0 when absent): the
    /// pod's own size, without the rest of the review (`userInfo`,
    /// `oldObject`, whitespace between fields). The API server sends its
    /// objects compact, so this is the pod's serialized size.
    pub object_bytes: usize,
}

/// Parse the body, which must be a JSON object (as must its `request`;
/// a JSON array is [`ReviewError::NotJson`]). One pass over the review
/// with the object borrowed as raw text, then one over the object into a
/// `Pod` (again, naming the field, only when that fails). A malformed pod
/// still yields a request (with its uid) to answer. With `too_costly`
/// the object is not parsed: it is [`Object::TooCostly`] (or
/// [`Object::Absent`]), with only its annotations scanned (in memory of
/// the largest annotation, whatever the pod's size); a scan that fails
/// leaves the view out.
pub(super) fn parse(body: &[u8], too_costly: Option<super::Cost>) -> Result<Parsed, ReviewError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let review: WireReview<&RawValue> = object(&mut de)
        .and_then(|review| de.end().map(|()| review))
        .map_err(ReviewError::NotJson)?;
    let (request, raw) = into_request(review)?;
    let object_bytes = raw.map_or(0, |raw| raw.get().len());
    let object = match (raw, too_costly) {
        (None, _) => Object::Absent,
        (Some(raw), Some(cost)) => Object::TooCostly(cost, AnnotationsView::scan(raw.get()).ok()),
        (Some(raw), None) => match serde_json::from_str::<Pod>(raw.get()) {
            Ok(pod) => Object::Pod(pod),
            Err(_) => match parse_pod(raw.get()) {
                Ok(pod) => Object::Pod(pod),
                Err(e) => Object::Invalid(e),
            },
        },
    };
    Ok(Parsed {
        request,
        object,
        object_bytes,
    })
}

/// Where and why a pod object does not parse, for the admission warning or
/// refusal and the log: `path` is the field, as
/// [`serde_path_to_error::Path`] prints it (`spec.containers[0].ports[0].containerPort`;
/// `.` for the object itself), `message` serde's reason without the
/// position (the object is one line of the review's JSON, so `line 1
/// column N` told a Job author nothing); both as [`shown`] shows them, to
/// [`MAX_SHOWN_PARSE_ERROR_CHARS`] (serde's message quotes the value whole).
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
        let message = text.strip_suffix(&position).unwrap_or(&text);
        InvalidPod {
            path: shown(&path, MAX_SHOWN_PARSE_ERROR_CHARS).to_string(),
            message: shown(message, MAX_SHOWN_PARSE_ERROR_CHARS).to_string(),
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
            let Ok(Parsed {
                object: Object::Invalid(e),
                ..
            }) = parse(&body, None)
            else {
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
            let new = parse(&body, None).ok().map(
                |Parsed {
                     request, object, ..
                 }| {
                    let object = match object {
                        Object::Pod(pod) => Some(serde_json::to_value(pod).unwrap()),
                        Object::Invalid(_) => Some(Value::Null),
                        Object::Absent => None,
                        Object::TooCostly(..) => unreachable!("parsed without a cost bound"),
                    };
                    (request.uid, object)
                },
            );
            assert_eq!(new, old, "{}", String::from_utf8_lossy(&body));
        }
    }
}
