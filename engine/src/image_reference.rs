//! A syntax check of container image references (`--install-image`).
//!
//! No crate in `Cargo.lock` parses image references, so this is a small
//! check of the grammar of the distribution project's `reference` package
//! (`github.com/distribution/reference`, `reference.go`), which the
//! container runtimes apply when they pull:
//!
//! ```text
//! reference      ::= name [ ":" tag ] [ "@" digest ]
//! name           ::= [ domain "/" ] path-component { "/" path-component }
//! domain         ::= host [ ":" port ]      (host: DNS components, or [IPv6])
//! path-component ::= [a-z0-9]+ { separator [a-z0-9]+ }
//! separator      ::= "." | "_" | "__" | "-"+
//! tag            ::= [A-Za-z0-9_] [A-Za-z0-9_.-]{0,127}
//! digest         ::= algorithm ":" [A-Fa-f0-9]{32,}
//! algorithm      ::= [a-z0-9]+ { [+._-] [a-z0-9]+ }
//! ```
//!
//! The first `/`-separated component is the domain when it contains a `.`
//! or a `:`, is `localhost`, or has an uppercase letter (as in
//! `splitDockerDomain`); the name is at most 255 characters. Whether the
//! image exists, or the registry answers, is not checked.

/// Longest name (domain and path) the grammar allows, in characters.
const MAX_NAME_LEN: usize = 255;

/// Longest tag, in characters (`[\w][\w.-]{0,127}`).
const MAX_TAG_LEN: usize = 128;

/// Shortest digest encoding, in hex digits.
const MIN_DIGEST_HEX: usize = 32;

/// Why `image` is not an image reference, or `None` if it is one by the
/// grammar of the module docs.
pub fn problem(image: &str) -> Option<String> {
    if image.is_empty() {
        return Some("it is empty".to_owned());
    }
    if let Some(c) = image.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Some(format!(
            "it contains {c:?} (whitespace or a control character)"
        ));
    }
    let (rest, digest) = match image.split_once('@') {
        Some((rest, digest)) => (rest, Some(digest)),
        None => (image, None),
    };
    if let Some(digest) = digest
        && let Some(why) = digest_problem(digest)
    {
        return Some(why);
    }
    // A tag is after the last ':' that follows the last '/' (a ':' before
    // it is the domain's port).
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
        None => (rest, None),
    };
    if let Some(tag) = tag
        && !is_tag(tag)
    {
        return Some(format!(
            "tag {tag:?} is not 1 to {MAX_TAG_LEN} of letters, digits, '_', '.', '-' (not starting with '.' or '-')"
        ));
    }
    name_problem(name)
}

fn name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("the repository name is empty".to_owned());
    }
    if name.len() > MAX_NAME_LEN {
        return Some(format!(
            "the repository name is over {MAX_NAME_LEN} characters"
        ));
    }
    let mut components: Vec<&str> = name.split('/').collect();
    if components.len() > 1 {
        let first = components[0];
        let is_domain = first.contains(['.', ':'])
            || first == "localhost"
            || first.chars().any(|c| c.is_ascii_uppercase());
        if is_domain {
            if !is_domain_text(first) {
                return Some(format!(
                    "registry {first:?} is not a host name (letters, digits, '-', '.') with an optional :port"
                ));
            }
            components.remove(0);
        }
    }
    components.iter().find(|c| !is_path_component(c)).map(|bad| {
        format!(
            "repository path component {bad:?} is not lowercase letters and digits separated by '.', '_', '__' or '-'"
        )
    })
}

/// `host[:port]`: DNS components of letters, digits and inner `-`, or a
/// bracketed IPv6 address; the port all digits.
fn is_domain_text(domain: &str) -> bool {
    let (host, port) = if let Some(v6) = domain.strip_prefix('[') {
        match v6.split_once(']') {
            Some((addr, after)) => {
                let ok =
                    !addr.is_empty() && addr.chars().all(|c| c.is_ascii_hexdigit() || c == ':');
                if !ok {
                    return false;
                }
                match after {
                    "" => return true,
                    p => ("x", p.strip_prefix(':').unwrap_or("")),
                }
            }
            None => return false,
        }
    } else {
        match domain.split_once(':') {
            Some((h, p)) => (h, p),
            None => (domain, "0"),
        }
    };
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) && host.split('.').all(label_ok)
}

/// `[a-z0-9]+ ((\.|_|__|-+)[a-z0-9]+)*`.
fn is_path_component(component: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let mut rest = component;
    loop {
        // An alphanumeric run...
        let run = rest.find(|c: char| !alnum(c)).unwrap_or(rest.len());
        if run == 0 {
            return false;
        }
        rest = &rest[run..];
        if rest.is_empty() {
            return true;
        }
        // ...then a separator before the next one.
        let sep = rest.find(alnum).unwrap_or(rest.len());
        if !(matches!(&rest[..sep], "." | "_" | "__") || rest[..sep].bytes().all(|b| b == b'-')) {
            return false;
        }
        rest = &rest[sep..];
    }
}

fn is_tag(tag: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    tag.len() <= MAX_TAG_LEN
        && tag.chars().next().is_some_and(word)
        && tag.chars().all(|c| word(c) || c == '.' || c == '-')
}

fn digest_problem(digest: &str) -> Option<String> {
    let ok = match digest.split_once(':') {
        Some((algorithm, hex)) => {
            let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
            !algorithm.is_empty()
                && algorithm
                    .split(['+', '.', '_', '-'])
                    .all(|part| !part.is_empty() && part.chars().all(alnum))
                && hex.len() >= MIN_DIGEST_HEX
                && hex.bytes().all(|b| b.is_ascii_hexdigit())
        }
        None => false,
    };
    (!ok).then(|| {
        format!(
            "digest {digest:?} is not algorithm:hex (e.g. sha256: and at least {MIN_DIGEST_HEX} hex digits)"
        )
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn accepts_references() {
        let sha = "a".repeat(64);
        for good in [
            "busybox",
            "busybox:1.36",
            "library/busybox",
            "ghcr.io/kube-prestop/kube-prestop-sidecar:0.1.0",
            "registry.example.com/kube-prestop-sidecar:test",
            "localhost/kube-prestop/busybox:test",
            "localhost:5000/a/b:c",
            "Registry.Example/x",
            "[::1]:5000/x/y:z",
            "a_b/c__d/e-f/g--h/i.j",
            &format!("x/y@sha256:{sha}"),
            &format!("x/y:tag@sha256:{sha}"),
        ] {
            assert_eq!(problem(good), None, "{good:?}");
        }
    }

    #[test]
    fn rejects_non_references() {
        let sha = "a".repeat(64);
        for bad in [
            "",
            "a b",
            " busybox",
            "busybox\n",
            "Busybox",
            "ghcr.io/Org/x",
            "x/y:",
            "x/y:-tag",
            "x/y:a/b",
            "x//y",
            "/x",
            "x/",
            "x..y",
            "x/_y",
            "x/y@sha256:abc",
            &format!("x/y@:{sha}"),
            &format!("x/y@SHA256:{sha}"),
            "reg-.io/x",
            "reg.io:port/x",
            &"a".repeat(256),
            &format!("x:{}", "t".repeat(129)),
        ] {
            assert!(problem(bad).is_some(), "{bad:?} accepted");
        }
    }
}
