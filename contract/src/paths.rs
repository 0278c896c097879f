//! Volumes, mount points and binary paths: where the webhook puts things in
//! the pod and where the sidecar finds them.

/// Name of the shared `emptyDir` volume the webhook adds to a pod (a suffix
/// is added when the pod already has a volume of that name): the *id
/// volume*, which stays empty. The sidecars mount it whole, read-only, at
/// [`IDS_MOUNT_PATH`] (where the finder learns its source on the node);
/// each watched container mounts it whole, read-only, at its identifying
/// mount point [`id_mount_path`], inside its own state volume, so the
/// runtime makes [`CREATED_DIR`] there when it creates the container. No
/// `subPath`: each one costs the kubelet two `mount` execs before it
/// creates the container (`docs/facts.md` K17).
pub const VOLUME_NAME: &str = "kube-prestop";

/// Parent of the mounts the webhook adds to the sidecars and the watched
/// containers: the binary at [`BINARY_DIR`], the state directories under
/// [`STATE_DIR`], the id volume at [`IDS_MOUNT_PATH`]. Not a mount itself
/// (the runtime makes it in the container's root file system, as the parent
/// of those mount points); the sidecar's `--root` (tests give another).
pub const MOUNT_PATH: &str = "/.kube-prestop";

/// Path of the sidecar binary inside the install image; the install init
/// container runs it with [`crate::install_command`].
pub const INSTALL_IMAGE_BINARY: &str = "/kube-prestop-sidecar";

/// Path of the sidecar binary as every container that mounts the binary's
/// volume at [`BINARY_DIR`] sees it (install init container, ConfigMap).
pub const BINARY_PATH: &str = "/.kube-prestop/bin/kube-prestop";

/// Directory of [`BINARY_PATH`]: where the volume holding the binary
/// ([`BINARY_VOLUME_NAME`]) is mounted, whole and read-only, in the sidecars
/// and the watched containers (and read-write in the install init
/// container, which writes the binary there). The ConfigMap's volume shows
/// its binary at the same path as the install init container's copy.
pub const BINARY_DIR: &str = "/.kube-prestop/bin";

/// Name of the volume holding the sidecar binary, mounted at [`BINARY_DIR`]:
/// the install image as an image volume, the binary's ConfigMap, or (install
/// init container delivery) an `emptyDir` of its own that the install init
/// container fills; a suffix is added on collision like [`VOLUME_NAME`].
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

/// Directory, under [`MOUNT_PATH`], of the watched containers' state
/// directories: one mount point per watched container ([`state_mount_path`]).
pub const STATE_DIR: &str = "state";

/// Prefix of the name of each watched container's state volume, an
/// `emptyDir` of its own: `kube-prestop-state-<container>` (hashed when
/// too long or taken, like the sidecars' names). The watched container and
/// its sidecar mount it whole, read-write, at [`state_mount_path`]; every
/// other sidecar mounts it read-only there (the termination message lists
/// every watched container's runs); no other container mounts it, so no
/// other container of the pod can write there through a volume
/// (`docs/security.md`). An `emptyDir`'s directory is mode 0777
/// (`docs/facts.md` K16), so the watched container's user can write there
/// whatever it is.
pub const STATE_VOLUME_PREFIX: &str = "kube-prestop-state-";

/// Mount point of `container`'s state volume:
/// `/.kube-prestop/state/<container>`, the same path
/// [`crate::state_dir`] gives under [`MOUNT_PATH`].
pub fn state_mount_path(container: &str) -> String {
    format!("{MOUNT_PATH}/{STATE_DIR}/{container}")
}

/// Directory, under [`MOUNT_PATH`], where the sidecars mount the whole id
/// volume ([`VOLUME_NAME`]), read-only: the finder takes the volume's
/// source on the node from this mount.
pub const IDS_DIR: &str = "id";

/// Mount point of the id volume in the sidecars: `/.kube-prestop/id`.
pub const IDS_MOUNT_PATH: &str = "/.kube-prestop/id";

/// Name of the directory, in each watched container's state volume, that
/// is the mount point of the container's identifying mount
/// ([`id_mount_path`]). Nothing of ours makes it: the container runtime
/// does, when it creates the container's root file system and finds the
/// mount point missing inside the state volume it has just mounted there
/// (runc `mountToRootfs`; `docs/facts.md` K18). So its existence in the
/// state volume ([`created_dir`]) is the evidence that the runtime created
/// the container, which only it, the container and the container's own
/// sidecar could write (no other container mounts that volume writable).
pub const CREATED_DIR: &str = "created";

/// `<root>/state/<container>/created`: [`CREATED_DIR`] of `container`'s
/// state volume as a sidecar sees it (`root` is the mount path of ours,
/// [`MOUNT_PATH`] in a pod). It exists once the runtime created
/// `container` for its first start.
pub fn created_dir(root: &std::path::Path, container: &str) -> std::path::PathBuf {
    crate::state_dir(root, container).join(CREATED_DIR)
}

/// Mount point of `container`'s identifying mount, the whole id volume,
/// read-only, in `container` only: `/.kube-prestop/state/<container>/created`,
/// inside its state volume ([`created_dir`] under [`MOUNT_PATH`]). It
/// appears in the mountinfo of `container`'s processes and of no other
/// container's.
pub fn id_mount_path(container: &str) -> String {
    format!("{}/{CREATED_DIR}", state_mount_path(container))
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
        assert_eq!(STATE_VOLUME_PREFIX, "kube-prestop-state-");
        assert_eq!(IDS_MOUNT_PATH, format!("{MOUNT_PATH}/{IDS_DIR}"));
        assert_eq!(BINARY_DIR, format!("{MOUNT_PATH}/bin"));
        assert_eq!(
            Path::new(MOUNT_PATH).join(STATE_DIR),
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
    fn id_mounts_are_pinned_inside_the_state_volume() {
        assert_eq!(id_mount_path("main"), "/.kube-prestop/state/main/created");
        assert!(id_mount_path("main").starts_with(&format!("{}/", state_mount_path("main"))));
        // The sidecar sees the runtime's mount point where X has its mount.
        assert_eq!(
            created_dir(Path::new(MOUNT_PATH), "main"),
            Path::new(&id_mount_path("main"))
        );
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
