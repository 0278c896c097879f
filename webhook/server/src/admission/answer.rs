//! The answer as the API server reads it, serialized in one pass: an
//! `admission.k8s.io/v1` AdmissionReview with the JSON Patch as the API
//! server encodes a `[]byte` field (a base64 string), built straight from
//! the engine's list of changes.

use std::collections::HashMap;

use base64::Engine as _;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, META_API_VERSION_V1, META_KIND};
use kube::core::{DynamicObject, Status, TypeMeta};
use serde::Serialize;
use serde_json::value::RawValue;

/// Initial capacity of the JSON Patch buffer: a one-container Job pod's
/// patch is about 2.4 kB; growing a `Vec` from serde_json's default of 128
/// bytes took five reallocations.
pub(super) const PATCH_CAPACITY: usize = 4096;

/// A response echoing the request uid, typed `admission.k8s.io/v1`
/// `AdmissionReview`, allowed, no patch.
pub(super) fn base_response(request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
    let mut response = AdmissionResponse::from(request);
    response.types = TypeMeta {
        api_version: META_API_VERSION_V1.to_owned(),
        kind: META_KIND.to_owned(),
    };
    response
}

/// The answer as the API server reads it: an `admission.k8s.io/v1`
/// AdmissionReview whose `response` has the fields of kube's
/// `AdmissionResponse`, with `patch` in the API server's encoding of a
/// `[]byte` field, a base64 string (kube would write an array of numbers),
/// and `patchType` when there is a patch.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewBody<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: ResponseBody<'a>,
}

/// See [`ReviewBody`].
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseBody<'a> {
    uid: &'a str,
    allowed: bool,
    status: &'a Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "HashMap::is_empty")]
    audit_annotations: &'a HashMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    warnings: Option<&'a [String]>,
}

impl<'a> ReviewBody<'a> {
    /// `response` with the JSON Patch `patch` (a JSON string of base64, see
    /// [`base64_string`]). The patch travels apart because kube's
    /// `AdmissionResponse::with_patch` wants it as a `json_patch::Patch`
    /// of `serde_json::Value`s, which is what this module avoids building;
    /// `response.patch` is never set here.
    fn of(response: &'a AdmissionResponse, patch: Option<&'a RawValue>) -> Self {
        Self {
            api_version: META_API_VERSION_V1,
            kind: META_KIND,
            response: ResponseBody {
                uid: &response.uid,
                allowed: response.allowed,
                status: &response.result,
                patch,
                patch_type: patch.map(|_| "JSONPatch"),
                audit_annotations: &response.audit_annotations,
                warnings: response.warnings.as_deref(),
            },
        }
    }
}

/// `bytes` as a JSON string of standard (padded) base64. Base64 has no
/// character JSON escapes, so the string is built as is and checked by
/// serde_json once (a fast scan) instead of going through the escaping
/// serializer character by character.
pub(super) fn base64_string(bytes: &[u8]) -> Result<Box<RawValue>, serde_json::Error> {
    let mut text = String::with_capacity(bytes.len().div_ceil(3) * 4 + 2);
    text.push('"');
    base64::engine::general_purpose::STANDARD.encode_string(bytes, &mut text);
    text.push('"');
    RawValue::from_string(text)
}

/// `response` (with `patch`, see [`base64_string`]) as the bytes of the
/// AdmissionReview sent back.
///
/// Errors: serde_json's, which plain data cannot cause; returned rather
/// than assumed.
pub(super) fn encode(
    response: &AdmissionResponse,
    patch: Option<&RawValue>,
) -> Result<Vec<u8>, serde_json::Error> {
    let mut body = Vec::with_capacity(patch.map_or(0, |p| p.get().len()) + 512);
    serde_json::to_writer(&mut body, &ReviewBody::of(response, patch))?;
    Ok(body)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// A minimal pod CREATE request with `uid`.
    fn pod_create_request(uid: &str) -> AdmissionRequest<DynamicObject> {
        serde_json::from_value(json!({
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "userInfo": {}
        }))
        .unwrap()
    }

    #[test]
    fn patch_is_sent_as_base64() {
        let request = pod_create_request("u1");
        let patch = base64_string(br#"[{"op":"add","path":"/a","value":1}]"#).unwrap();
        let body = encode(&base_response(&request), Some(&patch)).unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(body["kind"], "AdmissionReview");
        assert_eq!(body["response"]["uid"], "u1");
        assert_eq!(body["response"]["patchType"], "JSONPatch");
        // base64 of [{"op":"add","path":"/a","value":1}]
        assert_eq!(
            body["response"]["patch"],
            "W3sib3AiOiJhZGQiLCJwYXRoIjoiL2EiLCJ2YWx1ZSI6MX1d"
        );
    }

    /// The encoding this module had before: kube's own `AdmissionReview`
    /// through `serde_json::Value`, the patch's array of numbers replaced by
    /// base64.
    fn kube_encoding(response: &AdmissionResponse) -> Value {
        let mut review = serde_json::to_value(response.clone().into_review()).unwrap();
        if let Some(patch) = review.pointer_mut("/response/patch") {
            let bytes: Vec<u8> = patch
                .as_array()
                .unwrap()
                .iter()
                .map(|n| u8::try_from(n.as_u64().unwrap()).unwrap())
                .collect();
            *patch = Value::String(base64::engine::general_purpose::STANDARD.encode(bytes));
        }
        review
    }

    #[test]
    fn body_is_kubes_review_with_a_base64_patch() {
        let request = pod_create_request("u1");
        let patch: json_patch::Patch = serde_json::from_value(
            json!([{"op": "add", "path": "/metadata/annotations/a~1b", "value": "x\"y"}]),
        )
        .unwrap();
        let patch_text = serde_json::to_vec(&patch).unwrap();
        let patch_b64 = base64_string(&patch_text).unwrap();
        let mut warned = base_response(&request);
        warned.warnings = Some(vec!["careful".to_owned()]);
        warned
            .audit_annotations
            .insert("k".to_owned(), "v".to_owned());
        let mut denied = base_response(&request);
        denied.allowed = false;
        denied.result = Status::failure("no", "InternalError").with_code(500);
        let patched = base_response(&request).with_patch(patch).unwrap();
        for (response, patch, kube) in [
            (base_response(&request), None, base_response(&request)),
            (base_response(&request), Some(&*patch_b64), patched),
            (warned.clone(), None, warned),
            (denied.clone(), None, denied),
        ] {
            let body = serde_json::to_vec(&ReviewBody::of(&response, patch)).unwrap();
            let body: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(body, kube_encoding(&kube));
        }
    }
}
