//! Kubernetes name rules the two sides agree on.

/// Longest DNS label (RFC 1123): 63 characters.
pub const MAX_DNS_LABEL_LEN: usize = 63;

/// Whether `name` is an RFC 1123 DNS label: 1 to [`MAX_DNS_LABEL_LEN`]
/// lower-case ASCII alphanumerics or `-`, starting and ending with an
/// alphanumeric. Kubernetes requires it of container and volume names; the
/// engine checks the names it adds and the ones annotations give, and the
/// sidecar accepts only such container names (which also keeps a name safe
/// as a single path component: no `/`, never `.` or `..`).
pub fn is_dns_label(name: &str) -> bool {
    let b = name.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= MAX_DNS_LABEL_LEN
        && b.iter().all(|c| alnum(c) || *c == b'-')
        && b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels() {
        for ok in ["a", "main", "a-1", "kube-prestop-main-1", "0"] {
            assert!(is_dns_label(ok), "{ok}");
        }
        assert!(is_dns_label(&"a".repeat(63)));
        assert!(!is_dns_label(&"a".repeat(64)));
        for bad in ["", "-a", "a-", "A", "a_b", "../x", "a/b", ".", "..", "é"] {
            assert!(!is_dns_label(bad), "{bad:?}");
        }
    }
}
