//! Writes the serving certificate and key for the server's file reload.
//!
//! Both files must change together: a server that reloads `tls.crt` and
//! `tls.key` one after the other must never see a new certificate with the
//! old key. The directory is therefore laid out the way the kubelet lays out
//! a Secret volume (its "atomic writer"), so the server reads it the same way
//! in every certificate mode:
//!
//! ```text
//! cert_dir/..data -> ..2026_11_29_21_00_00.123456789   (symlink, swapped by rename)
//! cert_dir/tls.crt -> ..data/tls.crt
//! cert_dir/tls.key -> ..data/tls.key
//! cert_dir/ca.crt  -> ..data/ca.crt
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::SelfManagedCertsError;

/// File names written into the certificate directory.
pub const FILES: [&str; 3] = ["tls.crt", "tls.key", "ca.crt"];

const DATA_LINK: &str = "..data";

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SelfManagedCertsError + '_ {
    move |source| SelfManagedCertsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// True when `dir` already holds exactly these contents.
pub fn up_to_date(dir: &Path, contents: &[(&str, &str)]) -> bool {
    contents
        .iter()
        .all(|(name, want)| std::fs::read(dir.join(name)).is_ok_and(|have| have == want.as_bytes()))
}

/// Writes `contents` (file name, text) into `dir` atomically as a set.
/// Private keys are written with mode 0600.
pub fn write_atomically(
    dir: &Path,
    contents: &[(&str, &str)],
) -> Result<(), SelfManagedCertsError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let version = format!("..{}.{:09}", stamp.as_secs(), stamp.subsec_nanos());
    let version_dir = dir.join(&version);
    std::fs::create_dir(&version_dir).map_err(io(&version_dir))?;
    for (name, text) in contents {
        write_file(
            &version_dir.join(name),
            text.as_bytes(),
            name.ends_with(".key"),
        )?;
    }
    // Swap ..data to the new version in one rename.
    let tmp_link = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp_link);
    std::os::unix::fs::symlink(&version, &tmp_link).map_err(io(&tmp_link))?;
    let data = dir.join(DATA_LINK);
    let previous = std::fs::read_link(&data).ok();
    std::fs::rename(&tmp_link, &data).map_err(io(&data))?;
    // The user-visible names point through ..data (created once).
    for (name, _) in contents {
        let link = dir.join(name);
        let target = PathBuf::from(DATA_LINK).join(name);
        if std::fs::read_link(&link).ok().as_deref() != Some(target.as_path()) {
            let tmp = dir.join(format!("..{name}_tmp"));
            let _ = std::fs::remove_file(&tmp);
            std::os::unix::fs::symlink(&target, &tmp).map_err(io(&tmp))?;
            std::fs::rename(&tmp, &link).map_err(io(&link))?;
        }
    }
    if let Some(previous) = previous
        && previous != Path::new(&version)
        && previous.to_string_lossy().starts_with("..")
    {
        let _ = std::fs::remove_dir_all(dir.join(previous));
    }
    Ok(())
}

fn write_file(path: &Path, bytes: &[u8], private: bool) -> Result<(), SelfManagedCertsError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if private { 0o600 } else { 0o644 })
        .open(path)
        .map_err(io(path))?;
    file.write_all(bytes).map_err(io(path))?;
    file.sync_all().map_err(io(path))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_swaps_as_a_set() {
        let dir = tempfile::tempdir().unwrap();
        let files = [
            ("tls.crt", "cert-1"),
            ("tls.key", "key-1"),
            ("ca.crt", "ca-1"),
        ];
        assert!(!up_to_date(dir.path(), &files));
        write_atomically(dir.path(), &files).unwrap();
        assert!(up_to_date(dir.path(), &files));
        let first = std::fs::read_link(dir.path().join("..data")).unwrap();

        let files2 = [
            ("tls.crt", "cert-2"),
            ("tls.key", "key-2"),
            ("ca.crt", "ca-1"),
        ];
        write_atomically(dir.path(), &files2).unwrap();
        assert!(up_to_date(dir.path(), &files2));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("tls.key")).unwrap(),
            "key-2"
        );
        // The old version directory is gone; only one version remains.
        assert!(!dir.path().join(first).exists());
        let versions = std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| {
                let e = e.as_ref().unwrap();
                e.file_type().unwrap().is_dir()
            })
            .count();
        assert_eq!(versions, 1);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("tls.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
