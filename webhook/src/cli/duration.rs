//! Parsing of duration flags.

use std::time::Duration;

/// Parse `500ms`, `5s`, `2m`, `1h` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("invalid duration {text:?}: expected e.g. 500ms, 5s, 2m"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "" | "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        other => return Err(format!("invalid duration unit {other:?} in {text:?}")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("invalid duration {text:?}: {e}"))
}

/// A duration flag that must be more than zero: [`parse_duration`], and
/// zero refused saying why (`what_zero_does`).
fn positive(text: &str, what_zero_does: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d.is_zero() {
        return Err(format!("must be more than 0: {what_zero_does}"));
    }
    Ok(d)
}

/// `--read-timeout`: more than zero. At 0 the server started and then
/// dropped every HTTPS connection (the TLS handshake and the headers time
/// out at once) while `/livez` said ok.
pub fn parse_read_timeout(text: &str) -> Result<Duration, String> {
    positive(
        text,
        "a read timeout of 0 drops every connection before its TLS handshake or request headers are read",
    )
}

/// `--write-timeout`: more than zero (at 0 every response would be
/// overdue as soon as it is produced, and its connection dropped).
pub fn parse_write_timeout(text: &str) -> Result<Duration, String> {
    positive(
        text,
        "a write timeout of 0 drops every connection as soon as its response is produced",
    )
}

/// `--idle-timeout`: more than zero (at 0 every connection would be
/// closed as soon as it is idle, before its first request).
pub fn parse_idle_timeout(text: &str) -> Result<Duration, String> {
    positive(
        text,
        "an idle timeout of 0 closes every connection before its first request",
    )
}

/// `--max-connections`: a whole number, at least 1 (0 was silently taken
/// as 1).
pub fn parse_max_connections(text: &str) -> Result<usize, String> {
    let n: usize = text
        .trim()
        .parse()
        .map_err(|e| format!("invalid number {text:?}: {e}"))?;
    if n == 0 {
        return Err("must be at least 1: 0 connections would serve no client".to_owned());
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn zero_timeouts_and_zero_connections_are_refused_saying_why() {
        for zero in ["0", "0s", "0ms", "0.0m"] {
            let read = parse_read_timeout(zero).unwrap_err();
            assert!(
                read.contains("more than 0") && read.contains("read timeout"),
                "{read}"
            );
            let write = parse_write_timeout(zero).unwrap_err();
            assert!(write.contains("write timeout"), "{write}");
            let idle = parse_idle_timeout(zero).unwrap_err();
            assert!(idle.contains("idle timeout"), "{idle}");
        }
        assert_eq!(parse_read_timeout("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_write_timeout("1ms"), Ok(Duration::from_millis(1)));
        assert_eq!(parse_idle_timeout("2m"), Ok(Duration::from_secs(120)));
        assert!(
            parse_read_timeout("x")
                .unwrap_err()
                .contains("invalid duration")
        );
        let none = parse_max_connections("0").unwrap_err();
        assert!(none.contains("at least 1"), "{none}");
        assert_eq!(parse_max_connections("16"), Ok(16));
        assert!(parse_max_connections("-1").is_err());
    }

    #[test]
    fn units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("").is_err());
    }
}
