//! Volumes, mount points and binary paths: where the webhook puts things in
//! the pod and where the sidecar finds them.

/// Name of the shared `emptyDir` volume the webhook adds to a pod.
pub const VOLUME_NAME: &str = "kube-prestop";

/// Where the shared volume is mounted in the install init container, the
/// sidecars and the watched containers.
pub const MOUNT_PATH: &str = "/.kube-prestop";

/// Path of the sidecar binary inside the install image; the install init
/// container runs it with [`crate::install_command`].
pub const INSTALL_IMAGE_BINARY: &str = "/kube-prestop-sidecar";

/// Path of the sidecar binary inside the shared volume, as seen by every
/// container that mounts it at [`MOUNT_PATH`].
pub const BINARY_PATH: &str = "/.kube-prestop/bin/kube-prestop";

/// Directory of [`BINARY_PATH`]. When the binary comes from a ConfigMap
/// instead of the install init container, the ConfigMap's volume is mounted
/// here (read-only, over the shared volume's `bin` directory), so the
/// binary's path is the same either way.
pub const BINARY_DIR: &str = "/.kube-prestop/bin";

/// Name of the volume holding the sidecar binary's ConfigMap (see
/// [`BINARY_DIR`]); a suffix is added on collision like [`VOLUME_NAME`].
pub const BINARY_VOLUME_NAME: &str = "kube-prestop-bin";

/// Key of the sidecar binary in the ConfigMap's `binaryData`; the file the
/// ConfigMap volume shows at [`BINARY_PATH`].
pub const BINARY_CONFIG_MAP_KEY: &str = "kube-prestop";

/// Path of the sidecar binary when the install image itself is mounted as
/// an image volume (`spec.volumes[].image`) at [`BINARY_DIR`]: the image's
/// [`INSTALL_IMAGE_BINARY`] seen through that mount. The node's runtime
/// unpacks the image for the node's platform, so it is always the node's
/// architecture. The runtimes mount only whole images or directories of
/// them (containerd 2.4 refuses a file `subPath`: "only directory subpath
/// is supported"), hence a path of its own rather than [`BINARY_PATH`].
pub const IMAGE_VOLUME_BINARY_PATH: &str = "/.kube-prestop/bin/kube-prestop-sidecar";

/// Every path the webhook writes the binary's commands with: [`BINARY_PATH`]
/// (install init container, ConfigMap) and [`IMAGE_VOLUME_BINARY_PATH`].
pub const BINARY_PATHS: [&str; 2] = [BINARY_PATH, IMAGE_VOLUME_BINARY_PATH];

/// Directory of the install image holding every shipped architecture's
/// binary, one `<arch>/`[`ARCHITECTURE_BINARY_NAME`] each, `<arch>` a
/// `kubernetes.io/arch` value (`amd64`, `arm64`).
pub const ARCHITECTURES_DIR: &str = "/architectures";

/// File name of the binary in each architecture's directory of
/// [`ARCHITECTURES_DIR`] (and of the copies `install --dest-dir` makes).
pub const ARCHITECTURE_BINARY_NAME: &str = "kube-prestop-sidecar";

/// The `kubernetes.io/arch` value (Go's `GOARCH`) of the architecture this
/// binary was built for, `None` for one Kubernetes has no name for here.
pub const fn own_architecture() -> Option<&'static str> {
    if cfg!(target_arch = "x86_64") {
        Some("amd64")
    } else if cfg!(target_arch = "aarch64") {
        Some("arm64")
    } else {
        None
    }
}

/// Sub-path, inside the shared volume, of the installed binary's directory
/// (install init container delivery): mounted read-only at [`BINARY_DIR`]
/// in the watched containers and the sidecars.
pub const BIN_SUB_PATH: &str = "bin";

/// Sub-path, inside the shared volume, of every watched container's state
/// directory: the sidecars mount it read-only at [`STATE_MOUNT_PATH`] (the
/// termination message lists every container's runs).
pub const STATE_SUB_PATH: &str = "state";

/// Mount point of [`STATE_SUB_PATH`]: `/.kube-prestop/state`.
pub const STATE_MOUNT_PATH: &str = "/.kube-prestop/state";

/// Sub-path, inside the shared volume, of `container`'s state directory:
/// `state/<container>`. The watched container and its sidecar mount it
/// read-write at [`state_mount_path`], and no other container mounts it
/// writable: no other container of the pod can write there through the
/// volume (`docs/security.md`). The kubelet creates a missing `subPath`
/// directory with the volume root's mode (`docs/facts.md` K12).
pub fn state_sub_path(container: &str) -> String {
    format!("{STATE_SUB_PATH}/{container}")
}

/// Mount point of `container`'s state directory:
/// `/.kube-prestop/state/<container>`, the same path
/// [`crate::state_dir`] gives under [`MOUNT_PATH`].
pub fn state_mount_path(container: &str) -> String {
    format!("{MOUNT_PATH}/{}", state_sub_path(container))
}

/// Parent of the per-container identifying mount points.
pub const ID_MOUNT_ROOT: &str = "/.kube-prestop-id";

/// Sub-path, inside the shared volume, of the directory holding every
/// watched container's identifying-mount source ([`id_sub_path`]). The
/// sidecars mount it read-only at [`IDS_MOUNT_PATH`]: that `id/<container>`
/// exists tells the watcher the kubelet prepared `<container>`'s start.
pub const ID_SUB_PATH: &str = "id";

/// Mount point of [`ID_SUB_PATH`] in the sidecars: `/.kube-prestop/id`.
pub const IDS_MOUNT_PATH: &str = "/.kube-prestop/id";

/// Sub-path, inside the shared volume, of `container`'s identifying mount:
/// `id/<container>`. Nothing of ours creates it: the kubelet does, when it
/// prepares the container's mounts for its first start, after the image is
/// present and right before it asks the runtime to create the container
/// (`startContainer` → `generateContainerConfig` → `makeMounts` →
/// `SafeMakeDir`, Kubernetes v1.37.2 `pkg/kubelet/kuberuntime/kuberuntime_container.go`
/// and `pkg/kubelet/kubelet_pods.go`; `docs/facts.md` K12).
pub fn id_sub_path(container: &str) -> String {
    format!("{ID_SUB_PATH}/{container}")
}

/// Mount point of `container`'s identifying mount:
/// `/.kube-prestop-id/<container>`.
pub fn id_mount_path(container: &str) -> String {
    format!("{ID_MOUNT_ROOT}/{container}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::path::Path;

    #[test]
    fn binary_paths_lie_in_the_binary_dir_of_the_mount() {
        assert!(BINARY_DIR.starts_with(&format!("{MOUNT_PATH}/")));
        for path in BINARY_PATHS {
            assert_eq!(Path::new(path).parent(), Some(Path::new(BINARY_DIR)));
        }
        assert_ne!(BINARY_PATHS[0], BINARY_PATHS[1]);
        assert!(BINARY_PATHS.contains(&BINARY_PATH));
        assert!(BINARY_PATHS.contains(&IMAGE_VOLUME_BINARY_PATH));
    }

    /// The image-volume delivery: the install image mounted at BINARY_DIR
    /// shows its binary at IMAGE_VOLUME_BINARY_PATH.
    #[test]
    fn image_volume_path_is_the_install_image_binary_under_the_dir() {
        assert_eq!(
            IMAGE_VOLUME_BINARY_PATH,
            format!("{BINARY_DIR}{INSTALL_IMAGE_BINARY}")
        );
        assert_eq!(
            INSTALL_IMAGE_BINARY.trim_start_matches('/'),
            ARCHITECTURE_BINARY_NAME
        );
    }

    #[test]
    fn binary_path_is_the_same_from_a_config_map() {
        let from_config_map = Path::new(BINARY_DIR).join(BINARY_CONFIG_MAP_KEY);
        assert_eq!(from_config_map, Path::new(BINARY_PATH));
    }

    #[test]
    fn state_mounts_are_pinned_and_are_the_state_dir() {
        assert_eq!(state_sub_path("main"), "state/main");
        assert_eq!(STATE_MOUNT_PATH, format!("{MOUNT_PATH}/{STATE_SUB_PATH}"));
        assert_eq!(IDS_MOUNT_PATH, format!("{MOUNT_PATH}/{ID_SUB_PATH}"));
        assert_eq!(
            Path::new(IDS_MOUNT_PATH).join("main"),
            Path::new(MOUNT_PATH).join(id_sub_path("main"))
        );
        assert_eq!(BINARY_DIR, format!("{MOUNT_PATH}/{BIN_SUB_PATH}"));
        assert_eq!(
            Path::new(STATE_MOUNT_PATH),
            crate::state_dir(Path::new(MOUNT_PATH), "main")
                .parent()
                .unwrap()
        );
        assert_eq!(state_mount_path("main"), "/.kube-prestop/state/main");
        assert_eq!(
            Path::new(&state_mount_path("main")),
            crate::state_dir(Path::new(MOUNT_PATH), "main")
        );
    }

    #[test]
    fn id_mounts_are_pinned() {
        assert_eq!(id_mount_path("main"), "/.kube-prestop-id/main");
        assert_eq!(id_sub_path("main"), "id/main");
    }

    #[test]
    fn own_architecture_is_named_on_the_shipped_targets() {
        if cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
            assert!(own_architecture().is_some_and(|a| a == "amd64" || a == "arm64"));
        } else {
            assert_eq!(own_architecture(), None);
        }
    }
}
