//! The static sidecar binaries, one per architecture: each loaded from a
//! file (at most [`MAX_BINARY_BYTES`]), its architecture read from its ELF
//! header (never from a file name), hashed, and named after its content.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Prefix of the ConfigMap name; the rest is [`NAME_HASH_CHARS`] lowercase
/// hex digits of the binary's sha256 (33 characters in all: a valid DNS
/// subdomain and DNS label).
pub const NAME_PREFIX: &str = "kube-prestop-sidecar-";

/// How many leading hex digits of the sha256 the name carries (48 bits).
pub const NAME_HASH_CHARS: usize = 12;

/// The `binaryData` key holding the binary (the file name in the volume):
/// the contract's, which the engine mounts.
pub const BINARY_KEY: &str = kube_prestop_contract::BINARY_CONFIG_MAP_KEY;

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
    /// The file is not a 64-bit little-endian ELF executable of an
    /// architecture Kubernetes names (`amd64`, `arm64`).
    #[error("sidecar binary {path}: {detail}")]
    Architecture {
        /// The file given.
        path: String,
        /// What its header says, or why it cannot be read.
        detail: String,
    },
    /// A directory of `<arch>/kube-prestop-sidecar` files names a binary
    /// of another architecture, or two binaries are of one architecture.
    #[error("sidecar binary {path}: {detail}")]
    Mismatch {
        /// The file.
        path: String,
        /// What does not match.
        detail: String,
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
    architecture: String,
}

impl std::fmt::Debug for SidecarBinary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SidecarBinary")
            .field("name", &self.name)
            .field("architecture", &self.architecture)
            .field("sha256", &self.sha256)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl SidecarBinary {
    /// Read the binary at `path`: 1 to [`MAX_BINARY_BYTES`] bytes (at most
    /// that plus one byte is read), of the architecture its ELF header names
    /// ([`elf_architecture`]). Errors: unreadable, empty, too large, not an
    /// ELF executable of a known architecture.
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
        let architecture =
            elf_architecture(&bytes).map_err(|detail| SidecarConfigMapError::Architecture {
                path: shown(),
                detail,
            })?;
        Ok(Self::from_bytes(bytes, architecture))
    }

    /// Hash `bytes` and name the object (no size or header checks:
    /// [`Self::load`] does them).
    pub(super) fn from_bytes(bytes: Vec<u8>, architecture: &str) -> Self {
        let sha256 = sha256_hex(&bytes);
        // 64 ASCII hex digits: the prefix always exists.
        let short = sha256.get(..NAME_HASH_CHARS).unwrap_or(&sha256);
        let name = format!("{NAME_PREFIX}{short}");
        Self {
            bytes: bytes.into(),
            sha256,
            name,
            architecture: architecture.to_owned(),
        }
    }

    /// The binary's architecture, a `kubernetes.io/arch` value.
    pub fn architecture(&self) -> &str {
        &self.architecture
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

/// ELF `e_machine` of x86-64 (`EM_X86_64`).
const EM_X86_64: u16 = 62;
/// ELF `e_machine` of AArch64 (`EM_AARCH64`).
const EM_AARCH64: u16 = 183;

/// The `kubernetes.io/arch` name of the architecture an ELF executable is
/// built for, from its header: 64-bit (`EI_CLASS` 2), little-endian
/// (`EI_DATA` 1), `e_machine` x86-64 → `amd64`, AArch64 → `arm64`.
///
/// Errors: why not (not ELF, another class or byte order, another machine).
pub fn elf_architecture(bytes: &[u8]) -> Result<&'static str, String> {
    let Some(header) = bytes.get(..20) else {
        return Err("too short for an ELF header".to_owned());
    };
    if header.get(..4) != Some(b"\x7fELF".as_slice()) {
        return Err("not an ELF executable".to_owned());
    }
    if header.get(4) != Some(&2) || header.get(5) != Some(&1) {
        return Err("not a 64-bit little-endian ELF executable".to_owned());
    }
    let machine = u16::from_le_bytes([
        header.get(18).copied().unwrap_or(0),
        header.get(19).copied().unwrap_or(0),
    ]);
    match machine {
        EM_X86_64 => Ok("amd64"),
        EM_AARCH64 => Ok("arm64"),
        other => Err(format!("ELF machine {other} is neither x86-64 nor AArch64")),
    }
}

/// Loads the binaries at `paths`, each a file (its architecture from its
/// header) or a directory laid out as the install image's
/// `/architectures/` (`<arch>/kube-prestop-sidecar`, each checked against
/// its directory's name). Sorted by architecture.
///
/// Errors: a file that [`SidecarBinary::load`] refuses, a binary in the
/// directory of another architecture, two binaries of one architecture, a
/// directory without any.
pub fn load_binaries(paths: &[PathBuf]) -> Result<Vec<SidecarBinary>, SidecarConfigMapError> {
    let file = kube_prestop_contract::ARCHITECTURE_BINARY_NAME;
    let mut out: Vec<SidecarBinary> = Vec::new();
    let mut add = |binary: SidecarBinary, path: &Path| {
        if out
            .iter()
            .any(|b| b.architecture() == binary.architecture())
        {
            return Err(SidecarConfigMapError::Mismatch {
                path: path.display().to_string(),
                detail: format!("a second {} binary", binary.architecture()),
            });
        }
        out.push(binary);
        Ok(())
    };
    for path in paths {
        if !path.is_dir() {
            add(SidecarBinary::load(path)?, path)?;
            continue;
        }
        let read_err = |source| SidecarConfigMapError::Read {
            path: path.display().to_string(),
            source,
        };
        let mut found = false;
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(read_err)?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()
            .map_err(read_err)?;
        entries.sort();
        for dir in entries {
            let candidate = dir.join(file);
            if !candidate.is_file() {
                continue;
            }
            let binary = SidecarBinary::load(&candidate)?;
            let named = dir.file_name().map(|n| n.to_string_lossy().into_owned());
            if named.as_deref() != Some(binary.architecture()) {
                return Err(SidecarConfigMapError::Mismatch {
                    path: candidate.display().to_string(),
                    detail: format!(
                        "an {} binary in the directory of {}",
                        binary.architecture(),
                        named.unwrap_or_default()
                    ),
                });
            }
            add(binary, &candidate)?;
            found = true;
        }
        if !found {
            return Err(SidecarConfigMapError::Mismatch {
                path: path.display().to_string(),
                detail: format!("no <arch>/{file} in the directory"),
            });
        }
    }
    out.sort_by(|a, b| a.architecture().cmp(b.architecture()));
    Ok(out)
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

    /// An ELF-64 little-endian header for `machine`, then `rest`.
    pub(crate) fn elf(machine: u16, rest: &[u8]) -> Vec<u8> {
        let mut b = vec![0x7f, b'E', b'L', b'F', 2, 1, 1, 0];
        b.resize(18, 0);
        b.extend_from_slice(&machine.to_le_bytes());
        b.extend_from_slice(rest);
        b
    }

    fn binary(bytes: &[u8]) -> SidecarBinary {
        SidecarBinary::load(file_with(&elf(62, bytes)).path()).unwrap()
    }

    #[test]
    fn load_names_by_content() {
        let b = SidecarBinary::from_bytes(b"abc".to_vec(), "amd64");
        // sha256("abc")
        assert_eq!(
            b.sha256(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(b.name(), "kube-prestop-sidecar-ba7816bf8f01");
        assert_eq!(b.architecture(), "amd64");
        assert_eq!(b.name().len(), NAME_PREFIX.len() + NAME_HASH_CHARS);
        assert!(
            kube_prestop_contract::is_dns_label(b.name()),
            "{}",
            b.name()
        );
        assert_eq!(b.size(), 3);
        assert_eq!(b.bytes(), b"abc");
        // Same bytes from another file: same name; other bytes: another name.
        assert_eq!(binary(b"abc").name(), binary(b"abc").name());
        assert_ne!(binary(b"abd").name(), binary(b"abc").name());
        let shown = format!("{b:?}");
        assert!(
            shown.contains(b.name()) && !shown.contains("97, 98"),
            "{shown}"
        );
    }

    #[test]
    fn load_accepts_exactly_the_limit() {
        let limit = usize::try_from(MAX_BINARY_BYTES).unwrap();
        let b = binary(&vec![7u8; limit - 20]);
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
        // Not ELF, or of another machine: refused, naming the file.
        let text = file_with(b"#!/bin/sh\necho this is a script, not a binary\n");
        let e = SidecarBinary::load(text.path()).unwrap_err();
        assert!(e.to_string().contains("not an ELF executable"), "{e}");
        let riscv = file_with(&elf(243, b"x"));
        let e = SidecarBinary::load(riscv.path()).unwrap_err();
        assert!(e.to_string().contains("ELF machine 243"), "{e}");
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

    #[test]
    fn architecture_from_the_header_and_directories_checked() {
        assert_eq!(elf_architecture(&elf(62, b"")), Ok("amd64"));
        assert_eq!(elf_architecture(&elf(183, b"")), Ok("arm64"));
        let mut be = elf(62, b"");
        be[5] = 2;
        assert!(elf_architecture(&be).is_err());
        assert!(elf_architecture(b"\x7fELF").is_err());

        let dir = tempfile::tempdir().unwrap();
        for (arch, machine) in [("amd64", 62), ("arm64", 183)] {
            std::fs::create_dir_all(dir.path().join(arch)).unwrap();
            std::fs::write(
                dir.path().join(arch).join("kube-prestop-sidecar"),
                elf(machine, arch.as_bytes()),
            )
            .unwrap();
        }
        let all = load_binaries(&[dir.path().to_owned()]).unwrap();
        let archs: Vec<_> = all.iter().map(SidecarBinary::architecture).collect();
        assert_eq!(archs, ["amd64", "arm64"]);
        assert_ne!(all[0].name(), all[1].name());
        // A file and the directory holding the same architecture: refused.
        let single = file_with(&elf(62, b"other"));
        let e = load_binaries(&[dir.path().to_owned(), single.path().to_owned()]).unwrap_err();
        assert!(e.to_string().contains("a second amd64 binary"), "{e}");
        // An arm64 binary under amd64/: refused.
        std::fs::write(
            dir.path().join("amd64").join("kube-prestop-sidecar"),
            elf(183, b"wrong"),
        )
        .unwrap();
        let e = load_binaries(&[dir.path().to_owned()]).unwrap_err();
        assert!(
            e.to_string()
                .contains("an arm64 binary in the directory of amd64"),
            "{e}"
        );
        let empty = tempfile::tempdir().unwrap();
        assert!(load_binaries(&[empty.path().to_owned()]).is_err());
    }
}
