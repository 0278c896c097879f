//! `install`: copy this binary into the binary's volume; or, with
//! `--dest-dir`, every architecture's binary of the image into a directory
//! ([`install_architectures`]).
//!
//! The install init container runs this from its own image; the copy must be
//! runnable by whatever user the sidecar and the watched container run as, so
//! it is mode 0755 and created parent directories are 0755. The copy is
//! written to a temporary name in the destination directory and renamed into
//! place, so nobody ever executes a half-written binary.

use std::fs::{self, DirBuilder};
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Errors of [`install`].
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// `--dest` has no file name or no parent directory.
    #[error("invalid destination {0}")]
    BadDest(PathBuf),
    /// Any step failed (missing or read-only volume, full disk, ...).
    #[error("{step} {path}: {source}")]
    Io {
        /// What was being done.
        step: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

fn io(step: &'static str, path: &Path) -> impl FnOnce(io::Error) -> InstallError {
    let path = path.to_owned();
    move |source| InstallError::Io { step, path, source }
}

/// Copies `source` (normally `/proc/self/exe`) to `dest` atomically, mode 0755.
pub fn install(source: &Path, dest: &Path) -> Result<(), InstallError> {
    let (Some(dir), Some(name)) = (dest.parent(), dest.file_name()) else {
        return Err(InstallError::BadDest(dest.to_owned()));
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    if !dir.is_dir() {
        DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(io("create directory", dir))?;
        let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o755));
    }
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let res = fs::copy(source, &tmp)
        .map_err(io("copy to", &tmp))
        .and_then(|_| {
            fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755)).map_err(io("chmod", &tmp))
        })
        .and_then(|_| fs::rename(&tmp, dest).map_err(io("rename to", dest)));
    if res.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    res
}

/// Copies every architecture's binary under `architectures` (the image's
/// `kube_prestop_contract::ARCHITECTURES_DIR`: `<arch>/kube-prestop-sidecar` each) to
/// `dest_dir/<arch>/kube-prestop-sidecar`, each with [`install`]. When
/// `architectures` does not exist (an image built for one architecture
/// only), copies `own` (this binary) as `own_arch`. Returns the
/// architectures copied, sorted.
///
/// Errors: the first failed copy; [`InstallError::Io`] when `architectures`
/// cannot be read or holds no binary, or when there is no such directory
/// and `own_arch` is `None`.
pub fn install_architectures(
    architectures: &Path,
    own: &Path,
    own_arch: Option<&str>,
    dest_dir: &Path,
) -> Result<Vec<String>, InstallError> {
    use kube_prestop_contract::ARCHITECTURE_BINARY_NAME;
    let mut copied = Vec::new();
    if !architectures.exists() {
        let Some(arch) = own_arch else {
            return Err(InstallError::Io {
                step: "find the architecture of",
                path: own.to_owned(),
                source: io::Error::other(
                    "no architectures directory and an unknown own architecture",
                ),
            });
        };
        install(own, &dest_dir.join(arch).join(ARCHITECTURE_BINARY_NAME))?;
        copied.push(arch.to_owned());
        return Ok(copied);
    }
    let entries = fs::read_dir(architectures).map_err(io("read directory", architectures))?;
    for entry in entries {
        let entry = entry.map_err(io("read directory", architectures))?;
        let source = entry.path().join(ARCHITECTURE_BINARY_NAME);
        if !source.is_file() {
            continue;
        }
        let arch = entry.file_name().to_string_lossy().into_owned();
        install(
            &source,
            &dest_dir.join(&arch).join(ARCHITECTURE_BINARY_NAME),
        )?;
        copied.push(arch);
    }
    if copied.is_empty() {
        return Err(InstallError::Io {
            step: "find a binary in",
            path: architectures.to_owned(),
            source: io::Error::from(io::ErrorKind::NotFound),
        });
    }
    copied.sort();
    Ok(copied)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn installs_executable_copy() {
        let d = std::env::temp_dir().join(format!("kps-install-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        let src = d.join("src");
        fs::create_dir_all(&d).unwrap();
        fs::write(&src, b"binary").unwrap();
        let dest = d.join("a/b/kube-prestop");
        install(&src, &dest).unwrap();
        install(&src, &dest).unwrap();
        assert_eq!(fs::read(&dest).unwrap(), b"binary");
        let mode = fs::metadata(&dest).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o755);
        assert_eq!(fs::read_dir(d.join("a/b")).unwrap().count(), 1);
        assert!(install(&src, Path::new("/")).is_err());
        assert!(install(&d.join("missing"), &d.join("x")).is_err());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn installs_every_architecture_or_itself() {
        let d = std::env::temp_dir().join(format!("kps-install-arch-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        let archs = d.join("architectures");
        for (arch, content) in [("amd64", "x86"), ("arm64", "arm")] {
            fs::create_dir_all(archs.join(arch)).unwrap();
            fs::write(archs.join(arch).join("kube-prestop-sidecar"), content).unwrap();
        }
        // A directory without a binary is not an architecture.
        fs::create_dir_all(archs.join("empty")).unwrap();
        let own = d.join("own");
        fs::write(&own, b"self").unwrap();
        let out = d.join("out");
        let copied = install_architectures(&archs, &own, Some("amd64"), &out).unwrap();
        assert_eq!(copied, ["amd64", "arm64"]);
        assert_eq!(
            fs::read(out.join("arm64/kube-prestop-sidecar")).unwrap(),
            b"arm"
        );
        assert_eq!(
            fs::read(out.join("amd64/kube-prestop-sidecar")).unwrap(),
            b"x86"
        );
        // No architectures directory: this binary, as its own architecture.
        let out2 = d.join("out2");
        let copied = install_architectures(&d.join("none"), &own, Some("arm64"), &out2).unwrap();
        assert_eq!(copied, ["arm64"]);
        assert_eq!(
            fs::read(out2.join("arm64/kube-prestop-sidecar")).unwrap(),
            b"self"
        );
        assert!(install_architectures(&d.join("none"), &own, None, &out2).is_err());
        assert!(install_architectures(&archs.join("empty"), &own, None, &out2).is_err());
        fs::remove_dir_all(&d).unwrap();
    }
}
