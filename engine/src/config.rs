//! Engine configuration: what the operator chooses for every pod (the server
//! and the `inject` command fill it from flags).

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::EngineError;
use super::delivery::{SHIPPED_ARCHITECTURES, SidecarBinarySource};
use super::quantity;
use super::workload::WorkloadKind;

/// Install image used when none is configured:
/// `ghcr.io/kube-prestop/kube-prestop-sidecar:<crate version>`.
pub const DEFAULT_INSTALL_IMAGE: &str = concat!(
    "ghcr.io/kube-prestop/kube-prestop-sidecar:",
    env!("CARGO_PKG_VERSION")
);

/// Namespace the webhook runs in when none is configured; pods there are
/// never injected.
pub const DEFAULT_WEBHOOK_NAMESPACE: &str = "kube-prestop";

/// CPU and memory requests and limits for one kind of injected container.
///
/// Values are Kubernetes quantities: CPU in cores (`10m` = 0.01 core),
/// memory in bytes (`32Mi`). How they are applied depends on the pod's QoS
/// class and the namespace's LimitRanges (see `engine::resources`).
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceDefaults {
    /// `resources.requests.cpu`.
    pub cpu_request: Quantity,
    /// `resources.requests.memory`.
    pub memory_request: Quantity,
    /// `resources.limits.cpu`.
    pub cpu_limit: Quantity,
    /// `resources.limits.memory`.
    pub memory_limit: Quantity,
}

impl ResourceDefaults {
    /// Defaults of the native sidecar: requests `10m` CPU / `32Mi` memory,
    /// limits `200m` / `256Mi`. Requests are small on purpose: a restartable
    /// init container's requests *add* to the pod's (KEP-753), for the whole
    /// life of the pod; the limits leave room for the hook, which runs inside
    /// the sidecar's cgroup.
    pub fn sidecar() -> Self {
        Self::new("10m", "32Mi", "200m", "256Mi")
    }

    /// Defaults of the install init container: requests `10m` / `16Mi`,
    /// limits `100m` / `32Mi` (it only copies one static binary). A regular
    /// init container counts towards the pod's effective request as a
    /// maximum over init containers, not a sum.
    pub fn install() -> Self {
        Self::new("10m", "16Mi", "100m", "32Mi")
    }

    /// Builds defaults from four quantity strings (no validation; see
    /// [`ResourceDefaults::validate`]).
    pub fn new(
        cpu_request: &str,
        memory_request: &str,
        cpu_limit: &str,
        memory_limit: &str,
    ) -> Self {
        Self {
            cpu_request: Quantity(cpu_request.to_owned()),
            memory_request: Quantity(memory_request.to_owned()),
            cpu_limit: Quantity(cpu_limit.to_owned()),
            memory_limit: Quantity(memory_limit.to_owned()),
        }
    }

    /// Checks every value parses, is positive, is at least the floor the
    /// resource annotations have ([`crate::annotations::MIN_SIDECAR_CPU`],
    /// [`crate::annotations::MIN_SIDECAR_MEMORY`]: the install init
    /// container runs the same binary) and each request is at most its
    /// limit. Errors: [`EngineError::InvalidConfig`] naming `what`, the
    /// resource and the value(s): e.g. `sidecar memory request "32Mi"
    /// exceeds the memory limit "16Mi"`, `install memory limit "1Mi" is
    /// below the floor 4Mi: ...`.
    pub fn validate(&self, what: &str) -> Result<(), EngineError> {
        let get = |field: &str,
                   q: &Quantity,
                   (floor, floor_text, why): (i128, &str, &str)|
         -> Result<i128, EngineError> {
            match quantity::at_least(&q.0, floor) {
                Ok(v) => Ok(v),
                Err(quantity::FloorError::BelowFloor) => Err(EngineError::InvalidConfig(format!(
                    "{what} {field} {:?} is below the floor {floor_text}: {why}",
                    q.0
                ))),
                Err(quantity::FloorError::NotAQuantity | quantity::FloorError::NotPositive) => {
                    Err(EngineError::InvalidConfig(format!(
                        "{what} {field} {:?} is not a positive quantity",
                        q.0
                    )))
                }
            }
        };
        let (cpu, memory) = (
            crate::annotations::CPU_FLOOR,
            crate::annotations::MEMORY_FLOOR,
        );
        let cpu_req = get("cpu request", &self.cpu_request, cpu)?;
        let mem_req = get("memory request", &self.memory_request, memory)?;
        let cpu_lim = get("cpu limit", &self.cpu_limit, cpu)?;
        let mem_lim = get("memory limit", &self.memory_limit, memory)?;
        for (resource, request, limit, (req, lim)) in [
            (
                "cpu",
                &self.cpu_request,
                &self.cpu_limit,
                (cpu_req, cpu_lim),
            ),
            (
                "memory",
                &self.memory_request,
                &self.memory_limit,
                (mem_req, mem_lim),
            ),
        ] {
            if req > lim {
                return Err(EngineError::InvalidConfig(format!(
                    "{what} {resource} request {:?} exceeds the {resource} limit {:?}",
                    request.0, limit.0
                )));
            }
        }
        Ok(())
    }
}

/// Engine configuration.
///
/// `EngineConfig::default()` is usable as is: the default install image, pull
/// policy `IfNotPresent`, webhook namespace `kube-prestop`, the default
/// resources of [`ResourceDefaults::sidecar`] and [`ResourceDefaults::install`],
/// binary source `auto`, the shipped architectures `amd64`, `arm64` and the
/// workload kinds [`WorkloadKind::DEFAULT`] (Job only).
#[derive(Debug, Clone, PartialEq)]
pub struct EngineConfig {
    /// Image of the install init container (must hold the static sidecar
    /// binary at `contract::INSTALL_IMAGE_BINARY`). Must be an image
    /// reference ([`crate::image_reference`]).
    pub install_image: String,
    /// `imagePullPolicy` of the install init container: `Always`,
    /// `IfNotPresent` or `Never`.
    pub install_image_pull_policy: String,
    /// Namespace the webhook itself runs in; its pods are never injected
    /// (nor are `kube-system`'s).
    pub webhook_namespace: String,
    /// Default resources of each native sidecar (overridable per pod with
    /// annotations, see `ANNOTATIONS.md`).
    pub sidecar_resources: ResourceDefaults,
    /// Resources of the install init container.
    pub install_resources: ResourceDefaults,
    /// Where the sidecar binary may come from (see `engine::delivery`).
    pub sidecar_binary_source: SidecarBinarySource,
    /// The architectures (`kubernetes.io/arch` values) the install image
    /// has a binary for; a pod whose node architecture is known and not
    /// among them is an [`EngineError::UnsupportedArchitecture`]. Each must
    /// be one of [`SHIPPED_ARCHITECTURES`], named once.
    pub shipped_architectures: Vec<String>,
    /// The kinds of workload whose pods are injected without an opt-in
    /// (`engine::workload`); a pod of no enabled kind is injected only with
    /// `kube-prestop.io/inject: "true"`. Must not be empty.
    pub workload_kinds: BTreeSet<WorkloadKind>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            install_image: DEFAULT_INSTALL_IMAGE.to_owned(),
            install_image_pull_policy: "IfNotPresent".to_owned(),
            webhook_namespace: DEFAULT_WEBHOOK_NAMESPACE.to_owned(),
            sidecar_resources: ResourceDefaults::sidecar(),
            install_resources: ResourceDefaults::install(),
            sidecar_binary_source: SidecarBinarySource::default(),
            shipped_architectures: SHIPPED_ARCHITECTURES
                .iter()
                .map(|a| (*a).to_owned())
                .collect(),
            workload_kinds: WorkloadKind::DEFAULT.into_iter().collect(),
        }
    }
}

impl EngineConfig {
    /// Checks the configuration. Callers may call it once at start-up to fail
    /// fast; [`super::inject`] calls it on every pod as well.
    ///
    /// Errors: [`EngineError::InvalidConfig`], naming the flag that sets the
    /// field (`--install-image`, ...), the value and what is allowed, for:
    /// an install image that is not an image reference
    /// ([`crate::image_reference`]: e.g. `"a b"`), an unknown pull policy,
    /// invalid resources, a webhook namespace that is not a namespace name
    /// (a DNS-1123 label, [`namespace_problem`]), shipped architectures that
    /// are none, hold an empty entry or one twice, or one the images ship no
    /// binary for (only [`SHIPPED_ARCHITECTURES`], written exactly: `AMD64`
    /// is not `amd64`), or no workload kind.
    pub fn validate(&self) -> Result<(), EngineError> {
        if let Some(why) = crate::image_reference::problem(&self.install_image) {
            return Err(EngineError::InvalidConfig(format!(
                "--install-image {:?} is not an image reference: {why}; expected [registry[:port]/]path[:tag][@algorithm:hex], the path lowercase",
                self.install_image
            )));
        }
        if !matches!(
            self.install_image_pull_policy.as_str(),
            "Always" | "IfNotPresent" | "Never"
        ) {
            return Err(EngineError::InvalidConfig(format!(
                "install image pull policy {:?} is not Always, IfNotPresent or Never",
                self.install_image_pull_policy
            )));
        }
        self.sidecar_resources.validate("sidecar")?;
        self.install_resources.validate("install")?;
        if let Some(why) = namespace_problem("--webhook-namespace", &self.webhook_namespace) {
            return Err(EngineError::InvalidConfig(why));
        }
        self.validate_architectures()?;
        if self.workload_kinds.is_empty() {
            return Err(EngineError::InvalidConfig(format!(
                "no workload kinds; name at least one of: {}",
                WorkloadKind::names()
            )));
        }
        Ok(())
    }

    /// [`EngineConfig::shipped_architectures`]: a non-empty list, without an
    /// empty entry or one named twice, of [`SHIPPED_ARCHITECTURES`] (the
    /// `kubernetes.io/arch` values `images/build.sh` builds a binary for).
    /// A name the images do not ship would only move the error to every pod
    /// pinned to a shipped architecture (`no sidecar binary for architecture
    /// "amd64" ... shipped: AMD64`).
    fn validate_architectures(&self) -> Result<(), EngineError> {
        let archs = &self.shipped_architectures;
        let allowed = SHIPPED_ARCHITECTURES.join(", ");
        let err = |why: String| {
            EngineError::InvalidConfig(format!(
                "--architectures {:?} {why}; allowed: a comma-separated list of {allowed}",
                archs.join(",")
            ))
        };
        if archs.is_empty() {
            return Err(err("names no architecture".to_owned()));
        }
        let mut seen = BTreeSet::new();
        for arch in archs {
            if arch.is_empty() {
                return Err(err("has an empty entry".to_owned()));
            }
            if !SHIPPED_ARCHITECTURES.contains(&arch.as_str()) {
                return Err(err(format!(
                    "names {arch:?}, an architecture the images ship no sidecar binary for"
                )));
            }
            if !seen.insert(arch.as_str()) {
                return Err(err(format!("names {arch:?} twice")));
            }
        }
        Ok(())
    }
}

/// Why `value`, given with `flag` (e.g. `--webhook-namespace`, `inject -n`),
/// is not a namespace name, or `None` if it is one: a namespace name is an
/// RFC 1123 DNS label (Kubernetes' `ValidateNamespaceName`), at most 63
/// lowercase letters, digits and `-`, starting and ending with a letter or
/// digit ([`kube_prestop_contract::is_dns_label`]).
pub fn namespace_problem(flag: &str, value: &str) -> Option<String> {
    (!kube_prestop_contract::is_dns_label(value)).then(|| {
        format!(
            "{flag} {value:?} is not a namespace name: a DNS-1123 label of at most {} lowercase letters, digits and '-', starting and ending with a letter or digit",
            kube_prestop_contract::MAX_DNS_LABEL_LEN
        )
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn default_is_valid() {
        EngineConfig::default().validate().unwrap();
    }

    #[test]
    fn rejects_bad_values() {
        let mut c = EngineConfig {
            install_image: String::new(),
            ..Default::default()
        };
        assert!(c.validate().is_err());
        c.install_image = "x".into();
        c.install_image_pull_policy = "Sometimes".into();
        assert!(c.validate().is_err());
        c.install_image_pull_policy = "Never".into();
        c.sidecar_resources.cpu_request = Quantity("1".into());
        assert!(matches!(c.validate(), Err(EngineError::InvalidConfig(m)) if m.contains("exceed")));
        c.sidecar_resources.cpu_request = Quantity("lots".into());
        assert!(c.validate().is_err());
    }

    #[test]
    fn a_request_over_its_limit_names_the_resource_and_both_values() {
        let mut c = EngineConfig::default();
        c.sidecar_resources.memory_limit = Quantity("16Mi".into());
        let Err(EngineError::InvalidConfig(m)) = c.validate() else {
            panic!("accepted");
        };
        let request = &EngineConfig::default().sidecar_resources.memory_request.0;
        assert_eq!(
            m,
            format!("sidecar memory request {request:?} exceeds the memory limit \"16Mi\"")
        );
        let mut c = EngineConfig::default();
        c.install_resources.cpu_request = Quantity("100".into());
        let Err(EngineError::InvalidConfig(m)) = c.validate() else {
            panic!("accepted");
        };
        assert!(
            m.starts_with("install cpu request \"100\" exceeds the cpu limit "),
            "{m}"
        );
        assert!(c.validate().is_err());
    }

    /// The flags have the annotations' floors: a value the kubelet would
    /// raise (CPU below `1m`) or with which the sidecar cannot be counted
    /// on to start (memory below `4Mi`) is refused at start-up, naming it.
    #[test]
    fn resources_below_the_floors_are_refused_naming_the_floor() {
        // (field, its place in ResourceDefaults::new, value, floor)
        let cases = [
            ("cpu request", 0, "0.0000001", "1m"),
            ("memory request", 1, "1e3", "4Mi"),
            ("cpu limit", 2, "999u", "1m"),
            ("memory limit", 3, "1Mi", "4Mi"),
        ];
        for (field, place, value, floor) in cases {
            let mut values = ["10m", "32Mi", "200m", "256Mi"];
            values[place] = value;
            let [cpu_request, memory_request, cpu_limit, memory_limit] = values;
            let resources =
                ResourceDefaults::new(cpu_request, memory_request, cpu_limit, memory_limit);
            for what in ["sidecar", "install"] {
                let mut c = EngineConfig::default();
                if what == "sidecar" {
                    c.sidecar_resources = resources.clone();
                } else {
                    c.install_resources = resources.clone();
                }
                let m = config_error(&c);
                assert!(
                    m.starts_with(&format!(
                        "{what} {field} {value:?} is below the floor {floor}: "
                    )),
                    "{m}"
                );
            }
        }
        // At the floor is accepted.
        let c = EngineConfig {
            sidecar_resources: ResourceDefaults::new("1m", "4Mi", "1m", "4Mi"),
            ..Default::default()
        };
        c.validate().unwrap();
    }

    fn config_error(c: &EngineConfig) -> String {
        match c.validate() {
            Err(EngineError::InvalidConfig(m)) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn architectures_must_be_shipped_named_once_and_not_empty() {
        let with = |archs: &[&str]| EngineConfig {
            shipped_architectures: archs.iter().map(|a| (*a).to_owned()).collect(),
            ..Default::default()
        };
        with(&["amd64"]).validate().unwrap();
        with(&["arm64", "amd64"]).validate().unwrap();
        assert_eq!(
            config_error(&with(&["AMD64"])),
            "--architectures \"AMD64\" names \"AMD64\", an architecture the images ship no sidecar binary for; allowed: a comma-separated list of amd64, arm64"
        );
        assert!(config_error(&with(&["s390x"])).contains("\"s390x\""));
        assert!(
            config_error(&with(&["amd64", "", "arm64"]))
                .starts_with("--architectures \"amd64,,arm64\" has an empty entry")
        );
        assert!(config_error(&with(&["amd64", "amd64"])).contains("names \"amd64\" twice"));
        assert!(config_error(&with(&[])).starts_with("--architectures \"\" names no architecture"));
    }

    #[test]
    fn install_image_must_be_an_image_reference() {
        let with = |image: &str| EngineConfig {
            install_image: image.to_owned(),
            ..Default::default()
        };
        with("registry.example/kube-prestop-sidecar:test")
            .validate()
            .unwrap();
        for bad in ["", "a b", "upper/Case", "x:", "x\t"] {
            let m = config_error(&with(bad));
            assert!(
                m.starts_with(&format!(
                    "--install-image {bad:?} is not an image reference: "
                )),
                "{m}"
            );
        }
    }

    #[test]
    fn webhook_namespace_must_be_a_dns_label() {
        let with = |ns: &str| EngineConfig {
            webhook_namespace: ns.to_owned(),
            ..Default::default()
        };
        with("kube-prestop-2").validate().unwrap();
        for bad in ["UPPER", "", "-a", "a.b", &"a".repeat(64)] {
            let m = config_error(&with(bad));
            assert!(
                m.starts_with(&format!(
                    "--webhook-namespace {bad:?} is not a namespace name: a DNS-1123 label"
                )),
                "{m}"
            );
        }
        assert_eq!(namespace_problem("-n", "ok"), None);
    }

    #[test]
    fn default_kinds_are_job_only_and_none_is_an_error() {
        let mut c = EngineConfig::default();
        assert_eq!(
            c.workload_kinds.iter().collect::<Vec<_>>(),
            [&WorkloadKind::Job]
        );
        c.workload_kinds.clear();
        match c.validate() {
            Err(EngineError::InvalidConfig(m)) => assert_eq!(
                m,
                "no workload kinds; name at least one of: job, argo-workflows, volcano, spark, armada, kueue-pod"
            ),
            other => panic!("{other:?}"),
        }
    }
}
