//! The static sidecar binary: loaded from a file (at most
//! [`MAX_BINARY_BYTES`]), hashed, and named after its content.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

/// Prefix of the ConfigMap name; the rest is [`NAME_HASH_CHARS`] lowercase
/// hex digits of the binary's sha256 (33 characters in all: a valid DNS
/// subdomain and DNS label).
pub const NAME_PREFIX: &str = "kube-prestop-sidecar-";

/// How many leading hex digits of the sha256 the name carries (48 bits).
pub const NAME_HASH_CHARS: usize = 12;

/// The `binaryData` key holding the binary (the file name in the volume):
/// the contract's, which the engine mounts.
pub const BINARY_KEY: &str = kube_prestop_sidecar::contract::BINARY_CONFIG_MAP_KEY;

/// Largest accepted binary, in bytes: 1 MiB, the API server's limit on a
/// ConfigMap's data.
pub const MAX_BINARY_BYTES: u64 = 1_048_576;

/// A sidecar binary that cannot be served from a ConfigMap.
#[derive(Debug, thiserror::Error)]
pub enum SidecarConfigMapError {
    /// The file could not be opened or read.
    #[error("sidecar binary {path}: {source}")]
    Read {
        /// The file given.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is empty.
    #[error("sidecar binary {path} is empty")]
    Empty {
        /// The file given.
        path: String,
    },
    /// The file exceeds [`MAX_BINARY_BYTES`].
    #[error(
        "sidecar binary {path} is {size} bytes, over the ConfigMap limit of {MAX_BINARY_BYTES} bytes (1 MiB)"
    )]
    TooLarge {
        /// The file given.
        path: String,
        /// Its size in bytes (at least [`MAX_BINARY_BYTES`] + 1).
        size: u64,
    },
}

/// The static sidecar binary in memory with its sha256 and ConfigMap name.
/// Cheap to clone (the bytes are shared).
#[derive(Clone)]
pub struct SidecarBinary {
    bytes: Arc<[u8]>,
    sha256: String,
    name: String,
}

impl std::fmt::Debug for SidecarBinary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SidecarBinary")
            .field("name", &self.name)
            .field("sha256", &self.sha256)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl SidecarBinary {
    /// Read the binary at `path`: 1 to [`MAX_BINARY_BYTES`] bytes (at most
    /// that plus one byte is read). Errors: unreadable, empty, too large.
    pub fn load(path: &Path) -> Result<Self, SidecarConfigMapError> {
        let shown = || path.display().to_string();
        let read_err = |source| SidecarConfigMapError::Read {
            path: shown(),
            source,
        };
        let file = std::fs::File::open(path).map_err(read_err)?;
        let mut bytes = Vec::new();
        file.take(MAX_BINARY_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(read_err)?;
        let read = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        if read > MAX_BINARY_BYTES {
            let size = std::fs::metadata(path).map_or(read, |m| m.len().max(read));
            return Err(SidecarConfigMapError::TooLarge {
                path: shown(),
                size,
            });
        }
        if bytes.is_empty() {
            return Err(SidecarConfigMapError::Empty { path: shown() });
        }
        Ok(Self::from_bytes(bytes))
    }

    /// Hash `bytes` and name the object (no size checks: [`Self::load`]
    /// does them).
    pub(super) fn from_bytes(bytes: Vec<u8>) -> Self {
        let sha256 = sha256_hex(&bytes);
        // 64 ASCII hex digits: the prefix always exists.
        let short = sha256.get(..NAME_HASH_CHARS).unwrap_or(&sha256);
        let name = format!("{NAME_PREFIX}{short}");
        Self {
            bytes: bytes.into(),
            sha256,
            name,
        }
    }

    /// The ConfigMap name: [`NAME_PREFIX`] + [`NAME_HASH_CHARS`] hex digits.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The sha256 of the bytes, 64 lowercase hex digits.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// The binary's size in bytes.
    pub fn size(&self) -> usize {
        self.bytes.len()
    }

    /// The binary itself.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// The sha256 of `bytes` as 64 lowercase hex digits.
pub(super) fn sha256_hex(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    use std::io::Write;

    fn file_with(bytes: &[u8]) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(bytes).unwrap();
        f.flush().unwrap();
        f
    }

    fn binary(bytes: &[u8]) -> SidecarBinary {
        SidecarBinary::load(file_with(bytes).path()).unwrap()
    }

    fn is_dns_label(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    }

    #[test]
    fn load_names_by_content() {
        let b = binary(b"abc");
        // sha256("abc")
        assert_eq!(
            b.sha256(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(b.name(), "kube-prestop-sidecar-ba7816bf8f01");
        assert_eq!(b.name().len(), NAME_PREFIX.len() + NAME_HASH_CHARS);
        assert!(is_dns_label(b.name()), "{}", b.name());
        assert_eq!(b.size(), 3);
        assert_eq!(b.bytes(), b"abc");
        // Same bytes from another file: same name; other bytes: another name.
        assert_eq!(binary(b"abc").name(), b.name());
        assert_ne!(binary(b"abd").name(), b.name());
        let shown = format!("{b:?}");
        assert!(
            shown.contains(b.name()) && !shown.contains("97, 98"),
            "{shown}"
        );
    }

    #[test]
    fn load_accepts_exactly_the_limit() {
        let limit = usize::try_from(MAX_BINARY_BYTES).unwrap();
        let b = binary(&vec![7u8; limit]);
        assert_eq!(b.size(), limit);
    }

    #[test]
    fn load_refuses_empty_oversize_and_missing_files_naming_them() {
        let empty = file_with(b"");
        let e = SidecarBinary::load(empty.path()).unwrap_err();
        assert!(matches!(e, SidecarConfigMapError::Empty { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(msg.contains(&empty.path().display().to_string()), "{msg}");
        assert!(msg.contains("empty"), "{msg}");

        let limit = usize::try_from(MAX_BINARY_BYTES).unwrap();
        let big = file_with(&vec![0u8; limit + 4096]);
        let e = SidecarBinary::load(big.path()).unwrap_err();
        let SidecarConfigMapError::TooLarge { size, .. } = &e else {
            panic!("{e:?}");
        };
        assert_eq!(*size, MAX_BINARY_BYTES + 4096);
        let msg = e.to_string();
        assert!(msg.contains(&big.path().display().to_string()), "{msg}");
        assert!(
            msg.contains(&format!("{} bytes", limit + 4096)) && msg.contains("1048576"),
            "{msg}"
        );

        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no-such-binary");
        let e = SidecarBinary::load(&missing).unwrap_err();
        assert!(matches!(e, SidecarConfigMapError::Read { .. }), "{e:?}");
        assert!(
            e.to_string().contains(&missing.display().to_string()),
            "{e}"
        );
    }
}
