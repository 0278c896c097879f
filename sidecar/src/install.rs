//! `install`: copy this binary into the shared volume.
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
}
