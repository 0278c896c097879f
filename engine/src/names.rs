//! Names of what the engine adds: predictable, collision-free, valid DNS labels.
//!
//! | added | preferred name | on collision |
//! |---|---|---|
//! | shared (id) volume | `kube-prestop` | `kube-prestop-1`, `kube-prestop-2`, ... (first free) |
//! | binary volume | `kube-prestop-bin` | `kube-prestop-bin-1`, ... (first free) |
//! | install init container | `kube-prestop-install` | `kube-prestop-install-1`, ... (first free) |
//! | sidecar watching `X` | `kube-prestop-X` | see [`sidecar_name`] |
//! | `X`'s state volume | `kube-prestop-state-X` | see [`state_volume_name`] (as [`sidecar_name`]) |
//!
//! Container names are unique across `containers`, `initContainers` and
//! `ephemeralContainers` of a pod, and must be RFC 1123 DNS labels of at most
//! 63 characters (volume names too):
//! [`is_dns_label`](kube_prestop_contract::is_dns_label), the contract's one
//! implementation, which the sidecar applies to the names it is given.

use std::collections::BTreeSet;

use kube_prestop_contract::MAX_DNS_LABEL_LEN as MAX_LABEL;

/// Base name of the install init container.
pub const INSTALL_CONTAINER: &str = "kube-prestop-install";

/// Prefix of the sidecar names: `kube-prestop-`.
pub const SIDECAR_PREFIX: &str = "kube-prestop-";

/// 32-bit FNV-1a hash of `text` (stable across versions and platforms).
pub fn fnv1a32(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5_u32, |hash, b| {
        (hash ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// `base` if free, else `base-1`, `base-2`, ... — the first name not in
/// `taken`. `base` must be short enough for the suffix (our bases are).
pub fn first_free(base: &str, taken: &BTreeSet<String>) -> String {
    if !taken.contains(base) {
        return base.to_owned();
    }
    (1u32..)
        .map(|n| format!("{base}-{n}"))
        .find(|candidate| !taken.contains(candidate))
        .unwrap_or_else(|| base.to_owned())
}

/// `<prefix truncated>-<8 hex digits of FNV-1a(seed)>`, at most 63 characters,
/// with no `-` doubled or trailing before the hash.
fn hashed(full: &str, seed: &str) -> String {
    let suffix = format!("{:08x}", fnv1a32(seed));
    let keep = MAX_LABEL - 1 - suffix.len();
    let head: String = full.chars().take(keep).collect();
    format!("{}-{suffix}", head.trim_end_matches('-'))
}

/// Name of the sidecar that watches container `watched`.
///
/// `kube-prestop-<watched>` when that is at most 63 characters and free.
/// Otherwise the first 54 characters of it (trailing `-` removed), a `-` and
/// the 8 lowercase hex digits of the 32-bit FNV-1a hash of the full
/// `kube-prestop-<watched>`; if even that is taken, the hash of
/// `kube-prestop-<watched>-1`, `-2`, ... is used instead.
pub fn sidecar_name(watched: &str, taken: &BTreeSet<String>) -> String {
    prefixed_name(SIDECAR_PREFIX, watched, taken)
}

/// Name of the `emptyDir` holding container `watched`'s state directory
/// ([`kube_prestop_contract::STATE_VOLUME_PREFIX`]): `kube-prestop-state-<watched>`
/// when that is at most 63 characters and not one of the pod's volumes
/// (`taken`), else hashed exactly as [`sidecar_name`] hashes.
pub fn state_volume_name(watched: &str, taken: &BTreeSet<String>) -> String {
    prefixed_name(kube_prestop_contract::STATE_VOLUME_PREFIX, watched, taken)
}

/// `<prefix><watched>`, or its hashed forms ([`sidecar_name`] says how).
fn prefixed_name(prefix: &str, watched: &str, taken: &BTreeSet<String>) -> String {
    let full = format!("{prefix}{watched}");
    if full.len() <= MAX_LABEL && !taken.contains(&full) {
        return full;
    }
    let first = hashed(&full, &full);
    if !taken.contains(&first) {
        return first;
    }
    (1u32..)
        .map(|n| hashed(&full, &format!("{full}-{n}")))
        .find(|candidate| !taken.contains(candidate))
        .unwrap_or(first)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use kube_prestop_contract::is_dns_label;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn fnv_matches_reference_vectors() {
        assert_eq!(fnv1a32(""), 0x811c_9dc5);
        assert_eq!(fnv1a32("a"), 0xe40c_292c);
        assert_eq!(fnv1a32("foobar"), 0xbf9c_f968);
    }

    #[test]
    fn first_free_counts_up() {
        assert_eq!(first_free("kube-prestop", &set(&[])), "kube-prestop");
        assert_eq!(
            first_free("kube-prestop", &set(&["kube-prestop"])),
            "kube-prestop-1"
        );
        assert_eq!(
            first_free("kube-prestop", &set(&["kube-prestop", "kube-prestop-1"])),
            "kube-prestop-2"
        );
    }

    #[test]
    fn sidecar_names() {
        assert_eq!(sidecar_name("main", &set(&[])), "kube-prestop-main");
        // Collision with a user container: hashed.
        let n = sidecar_name("main", &set(&["kube-prestop-main"]));
        assert_eq!(
            n,
            format!("kube-prestop-main-{:08x}", fnv1a32("kube-prestop-main"))
        );
        assert!(is_dns_label(&n));
        // Too long: truncated + hash, exactly 63 characters, stable.
        let long = "x".repeat(63);
        let n = sidecar_name(&long, &set(&[]));
        assert_eq!(n.len(), 63);
        assert!(is_dns_label(&n));
        assert_eq!(n, sidecar_name(&long, &set(&[])));
        assert!(n.starts_with("kube-prestop-xxx"));
        // Distinct long names sharing a prefix get distinct names.
        let a = sidecar_name(&format!("{}a", "y".repeat(55)), &set(&[]));
        let b = sidecar_name(&format!("{}b", "y".repeat(55)), &set(&[]));
        assert_ne!(a, b);
        // Truncation point on a dash: no "--" before the hash.
        let dashy = format!("{}-{}", "z".repeat(40), "w".repeat(30));
        let n = sidecar_name(&dashy, &set(&[]));
        assert!(is_dns_label(&n) && !n.contains("--"), "{n}");
        // Even the hashed name taken: another hash.
        let first = sidecar_name("main", &set(&["kube-prestop-main"]));
        let second = sidecar_name("main", &set(&["kube-prestop-main", &first]));
        assert_ne!(first, second);
        assert!(is_dns_label(&second));
    }

    #[test]
    fn state_volume_names() {
        assert_eq!(
            state_volume_name("main", &set(&[])),
            "kube-prestop-state-main"
        );
        // Taken by a volume of the pod: hashed.
        let n = state_volume_name("main", &set(&["kube-prestop-state-main"]));
        assert_eq!(
            n,
            format!(
                "kube-prestop-state-main-{:08x}",
                fnv1a32("kube-prestop-state-main")
            )
        );
        // Too long (a 63-character container name): 63 characters, stable,
        // a DNS label, distinct for distinct names sharing a prefix.
        let long = "x".repeat(63);
        let n = state_volume_name(&long, &set(&[]));
        assert_eq!(n.len(), 63);
        assert!(is_dns_label(&n) && n.starts_with("kube-prestop-state-xxx"));
        assert_eq!(n, state_volume_name(&long, &set(&[])));
        let a = state_volume_name(&format!("{}a", "y".repeat(50)), &set(&[]));
        let b = state_volume_name(&format!("{}b", "y".repeat(50)), &set(&[]));
        assert_ne!(a, b);
        let second = state_volume_name("main", &set(&["kube-prestop-state-main", &n]));
        assert!(is_dns_label(&second));
    }
}
