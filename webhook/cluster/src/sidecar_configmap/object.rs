//! The sidecar-binary ConfigMap object: its name, labels, annotation and
//! content, built from the binary (no I/O).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;

use super::binary::{BINARY_KEY, SidecarBinary};

/// Annotation holding the full sha256 of the binary, 64 lowercase hex digits.
pub const SHA256_ANNOTATION: &str = "kube-prestop.io/sha256";

/// Label key naming the manager of the objects.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY: &str = "kube-prestop";
/// Label key naming the objects' role.
pub const COMPONENT_LABEL: &str = "app.kubernetes.io/component";
/// Value of [`COMPONENT_LABEL`].
pub const COMPONENT: &str = "sidecar-binary";
/// Label key holding the architecture (`kubernetes.io/arch` value) of the
/// object's binary (informational: the name, a hash of the content, is
/// what the webhook goes by).
pub const ARCH_LABEL: &str = "kube-prestop.io/arch";

/// Label key holding the webhook version that created the object
/// (informational, not part of the selector).
pub const VERSION_LABEL: &str = "app.kubernetes.io/version";

/// Label selector of the watch: both labels every created object carries.
pub const LABEL_SELECTOR: &str =
    "app.kubernetes.io/managed-by=kube-prestop,app.kubernetes.io/component=sidecar-binary";

/// The ConfigMap to create in `namespace` for `binary` (see the module
/// documentation for its shape). Copies the bytes.
pub fn build_config_map(binary: &SidecarBinary, namespace: &str) -> ConfigMap {
    let labels = [
        (MANAGED_BY_LABEL, MANAGED_BY),
        (COMPONENT_LABEL, COMPONENT),
        (VERSION_LABEL, env!("CARGO_PKG_VERSION")),
        (ARCH_LABEL, binary.architecture()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(binary.name().to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                SHA256_ANNOTATION.to_owned(),
                binary.sha256().to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        immutable: Some(true),
        binary_data: Some(BTreeMap::from([(
            BINARY_KEY.to_owned(),
            ByteString(binary.bytes().to_vec()),
        )])),
        data: None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn binary(bytes: &[u8]) -> SidecarBinary {
        SidecarBinary::from_bytes(bytes.to_vec(), "arm64")
    }

    /// `key=value` pairs of a plain equality selector.
    fn selector_pairs(selector: &str) -> Vec<(&str, &str)> {
        selector
            .split(',')
            .map(|term| term.split_once('=').unwrap())
            .collect()
    }

    #[test]
    fn built_config_map() {
        let b = binary(b"\x7fELF and more");
        let cm = build_config_map(&b, "team-a");
        let meta = &cm.metadata;
        assert_eq!(meta.name.as_deref(), Some(b.name()));
        assert_eq!(meta.namespace.as_deref(), Some("team-a"));
        assert_eq!(cm.immutable, Some(true));
        assert_eq!(cm.data, None);
        let data = cm.binary_data.as_ref().unwrap();
        assert_eq!(data.len(), 1);
        assert_eq!(data[BINARY_KEY].0, b.bytes());
        let labels = meta.labels.as_ref().unwrap();
        assert_eq!(labels.len(), 4);
        assert_eq!(labels[ARCH_LABEL], "arm64");
        assert_eq!(labels[MANAGED_BY_LABEL], MANAGED_BY);
        assert_eq!(labels[COMPONENT_LABEL], COMPONENT);
        assert_eq!(labels[VERSION_LABEL], env!("CARGO_PKG_VERSION"));
        // The watch selects what is created.
        for (k, v) in selector_pairs(LABEL_SELECTOR) {
            assert_eq!(labels.get(k).map(String::as_str), Some(v), "{k}");
        }
        let annotations = meta.annotations.as_ref().unwrap();
        assert_eq!(annotations.len(), 1);
        assert_eq!(annotations[SHA256_ANNOTATION], b.sha256());
        assert_eq!(b.sha256().len(), 64);
        // The wire form: base64 under binaryData.
        let json = serde_json::to_value(&cm).unwrap();
        assert_eq!(json["immutable"], true);
        assert!(json["binaryData"][BINARY_KEY].is_string(), "{json}");
    }
}
