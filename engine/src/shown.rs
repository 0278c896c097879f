//! A string from a pod or a request (annotation values and keys, container
//! names, mount paths, ...) as messages show it: cut after a number of
//! characters, with its length in bytes when cut, and its control
//! characters escaped. Every error, warning and log line that shows such a
//! string goes through [`shown`], so none repeats a value whole, however
//! long, and none ends a line or starts a terminal escape sequence where a
//! reader expects the message to go on.

use std::fmt;

/// Most characters of an annotation value, or of another string that is
/// not a name (a mount path, a quantity, an architecture), shown in a
/// message: 128. The settable annotations' valid values are shorter (a
/// quantity, a few `NAME=VALUE` entries); a longer value is shown cut, with
/// its length.
pub const MAX_SHOWN_VALUE_CHARS: usize = 128;

/// Most characters of a name (a container name, an entry of a
/// comma-separated annotation value) shown in a message: 63, the longest
/// DNS label, which every valid container name is
/// (`kube_prestop_contract::is_dns_label`). A longer one is shown cut there,
/// with its length.
pub const MAX_SHOWN_NAME_CHARS: usize = 63;

/// `text` as a message shows it; see [`Shown`].
pub fn shown(text: &str, max_chars: usize) -> Shown<'_> {
    let kept = match text.char_indices().nth(max_chars) {
        Some((at, _)) => text.get(..at).unwrap_or_default(),
        None => text,
    };
    Shown { text, kept }
}

/// A string as a message shows it ([`shown`]): its first characters (all of
/// them when there are at most the given number), followed, when cut, by
/// `...(N bytes)` with the whole string's length.
///
/// * `{}` ([`fmt::Display`]) writes the kept characters as they are, except
///   those that could end or rewrite a line: control characters (`\n`,
///   `\r`, ESC, ...), the Unicode line and paragraph separators and the
///   bidirectional overrides, escaped as Rust escapes them (`\n`,
///   `\u{1b}`), and the backslash, doubled, so an escape cannot be forged
///   either.
/// * `{:?}` ([`fmt::Debug`]) writes them the same way between double
///   quotes, a double quote escaped (`"main\n"`), for a value quoted in a
///   sentence.
///
/// E.g. `shown("aaaaa", 2)` displays as `aa...(5 bytes)` and
/// `{:?}`-formats as `"aa"...(5 bytes)`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Shown<'a> {
    /// The whole string.
    text: &'a str,
    /// Its start that is shown.
    kept: &'a str,
}

impl Shown<'_> {
    /// Whether the string is shown cut.
    pub fn is_cut(&self) -> bool {
        self.kept.len() < self.text.len()
    }

    fn write_length(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_cut() {
            write!(f, "...({} bytes)", self.text.len())?;
        }
        Ok(())
    }
}

/// Whether `c` is written escaped by [`Shown`]'s `Display`.
fn escaped(c: char) -> bool {
    c.is_control()
        || c == '\\'
        // Line and paragraph separators; bidirectional embeddings,
        // overrides and isolates (which reorder what a terminal shows).
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Writes `text` with the characters `escape` selects escaped.
fn write_escaped(
    f: &mut fmt::Formatter<'_>,
    text: &str,
    escape: impl Fn(char) -> bool,
) -> fmt::Result {
    let mut rest = text;
    while let Some(at) = rest.find(&escape) {
        let (plain, tail) = rest.split_at(at);
        f.write_str(plain)?;
        let mut chars = tail.chars();
        if let Some(c) = chars.next() {
            // `escape_default` writes each of them as `\\`, `\"`, `\n`,
            // `\r`, `\t` or `\u{...}`.
            write!(f, "{}", c.escape_default())?;
        }
        rest = chars.as_str();
    }
    f.write_str(rest)
}

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_escaped(f, self.kept, escaped)?;
        self.write_length(f)
    }
}

impl fmt::Debug for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"")?;
        write_escaped(f, self.kept, |c| c == '"' || escaped(c))?;
        f.write_str("\"")?;
        self.write_length(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_strings_are_shown_whole() {
        assert_eq!(shown("main", 63).to_string(), "main");
        assert_eq!(format!("{:?}", shown("main", 63)), "\"main\"");
        assert!(!shown("main", 4).is_cut());
        assert_eq!(shown("", 0).to_string(), "");
    }

    #[test]
    fn long_strings_are_cut_with_their_length() {
        let long = "a".repeat(4_190_000);
        let s = shown(&long, MAX_SHOWN_VALUE_CHARS);
        assert!(s.is_cut());
        assert_eq!(
            s.to_string(),
            format!("{}...(4190000 bytes)", "a".repeat(128))
        );
        assert_eq!(
            format!("{s:?}"),
            format!("\"{}\"...(4190000 bytes)", "a".repeat(128))
        );
        // Counted in characters, cut on a character boundary; the length in
        // bytes.
        assert_eq!(shown("éééé", 2).to_string(), "éé...(8 bytes)");
        assert_eq!(shown("😀😀", 1).to_string(), "😀...(8 bytes)");
    }

    #[test]
    fn control_characters_are_escaped() {
        let forged = "x\n2026-12-07T00:00:00Z  INFO admission\r\u{1b}[2J\\n\u{2028}\u{202e}";
        let s = shown(forged, 200).to_string();
        assert_eq!(
            s,
            "x\\n2026-12-07T00:00:00Z  INFO admission\\r\\u{1b}[2J\\\\n\\u{2028}\\u{202e}"
        );
        assert!(!s.chars().any(escaped_raw));
        let d = format!("{:?}", shown(forged, 200));
        assert!(!d.chars().any(escaped_raw), "{d}");
        // Cut and escaped: the cut counts the characters as written.
        assert_eq!(shown("\n\n\n", 2).to_string(), "\\n\\n...(3 bytes)");
    }

    /// A character no shown string may contain raw.
    fn escaped_raw(c: char) -> bool {
        c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202e}')
    }
}
