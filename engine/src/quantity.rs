//! Kubernetes resource quantities (`resource.Quantity`) as exact integers.
//!
//! k8s-openapi carries a quantity as the string the user wrote; the engine
//! needs to compare and scale them (QoS class, LimitRange bounds and ratios).
//! This module parses the whole serialization grammar of
//! `k8s.io/apimachinery/pkg/api/resource`:
//!
//! ```text
//! <quantity> ::= <signedNumber><suffix>
//! <number>   ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
//! <suffix>   ::= Ki | Mi | Gi | Ti | Pi | Ei            (binary SI, powers of 2^10)
//!              | n | u | m | "" | k | M | G | T | P | E  (decimal SI)
//!              | e<signedNumber> | E<signedNumber>      (decimal exponent)
//! ```
//!
//! into an [`i128`] count of *nano-units* (10^-9 of a core, of a byte, or of
//! a plain number such as a `maxLimitRequestRatio`), rounding up like the
//! apiserver does when a value has more precision than it keeps. The largest
//! quantity Kubernetes accepts (about 9.2 Ei) fits with room to spare.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// One unit (a core, a byte, ...) in nano-units.
pub const NANO: i128 = 1_000_000_000;

/// A quantity string that is not valid Kubernetes quantity syntax, or is too
/// large to represent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {0:?}")]
pub struct QuantityError(pub String);

/// Parses `text` into nano-units (see the module docs for the grammar).
///
/// Errors: [`QuantityError`] on empty input, whitespace, a missing number,
/// an unknown suffix or overflow.
pub fn parse_nanos(text: &str) -> Result<i128, QuantityError> {
    let err = || QuantityError(text.to_owned());
    let (negative, rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let number_len = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_len);
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if (int_part.is_empty() && frac_part.is_empty()) || frac_part.contains('.') {
        return Err(err());
    }
    let mut mantissa: i128 = 0;
    for digit in int_part.bytes().chain(frac_part.bytes()) {
        mantissa = mantissa
            .checked_mul(10)
            .and_then(|m| m.checked_add(i128::from(digit - b'0')))
            .ok_or_else(err)?;
    }
    let frac_digits = i32::try_from(frac_part.len()).map_err(|_| err())?;
    let (binary_shift, decimal_exp): (u32, i32) = match suffix {
        "" => (0, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        s if s.starts_with('e') || s.starts_with('E') => {
            let exp = &s[1..];
            let digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err());
            }
            (0, exp.parse::<i32>().map_err(|_| err())?)
        }
        _ => return Err(err()),
    };
    let scaled = mantissa.checked_shl(binary_shift).ok_or_else(err)?;
    if binary_shift > 0 && scaled >> binary_shift != mantissa {
        return Err(err());
    }
    let exp10 = decimal_exp
        .checked_sub(frac_digits)
        .and_then(|e| e.checked_add(9))
        .ok_or_else(err)?;
    let nanos = if exp10 >= 0 {
        let factor = 10i128
            .checked_pow(u32::try_from(exp10).map_err(|_| err())?)
            .ok_or_else(err)?;
        scaled.checked_mul(factor).ok_or_else(err)?
    } else {
        match 10i128.checked_pow(exp10.unsigned_abs()) {
            // Round up, as the apiserver does when it drops precision.
            Some(divisor) => ceil_div(scaled, divisor),
            None => i128::from(scaled != 0),
        }
    };
    Ok(if negative { -nanos } else { nanos })
}

/// Why a value is not a quantity of at least a floor ([`at_least`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloorError {
    /// Not Kubernetes quantity syntax ([`parse_nanos`]).
    NotAQuantity,
    /// Zero or negative.
    NotPositive,
    /// Positive, but below the floor.
    BelowFloor,
}

/// `text` in nano-units when it is a positive quantity of at least `floor`
/// nano-units (the floors of the sidecar's resource annotations and flags).
///
/// Errors: [`FloorError`], which the caller words for its input.
pub fn at_least(text: &str, floor: i128) -> Result<i128, FloorError> {
    match parse_nanos(text) {
        Err(_) => Err(FloorError::NotAQuantity),
        Ok(n) if n <= 0 => Err(FloorError::NotPositive),
        Ok(n) if n < floor => Err(FloorError::BelowFloor),
        Ok(n) => Ok(n),
    }
}

/// Parses a [`Quantity`]; see [`parse_nanos`].
pub fn parse(quantity: &Quantity) -> Result<i128, QuantityError> {
    parse_nanos(&quantity.0)
}

/// `a / b` rounded towards positive infinity, for `b > 0`.
pub fn ceil_div(a: i128, b: i128) -> i128 {
    let q = a / b;
    if a % b > 0 { q + 1 } else { q }
}

/// Formats nano-cores as a CPU quantity, rounding *down* to the millicore
/// (the finest CPU unit the kubelet honours): `2`, `250m`.
pub fn format_cpu_floor(nanos: i128) -> Quantity {
    let millis = nanos.div_euclid(1_000_000);
    if millis % 1000 == 0 {
        Quantity((millis / 1000).to_string())
    } else {
        Quantity(format!("{millis}m"))
    }
}

/// Formats nano-bytes as a memory quantity, rounding *down* to the byte:
/// `64Mi`, `1536Ki`, `1000000`.
pub fn format_memory_floor(nanos: i128) -> Quantity {
    let bytes = nanos.div_euclid(NANO);
    if bytes != 0 && bytes % (1 << 30) == 0 {
        Quantity(format!("{}Gi", bytes >> 30))
    } else if bytes != 0 && bytes % (1 << 20) == 0 {
        Quantity(format!("{}Mi", bytes >> 20))
    } else if bytes != 0 && bytes % (1 << 10) == 0 {
        Quantity(format!("{}Ki", bytes >> 10))
    } else {
        Quantity(bytes.to_string())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn parses_every_suffix_family() {
        assert_eq!(parse_nanos("1").unwrap(), NANO);
        assert_eq!(parse_nanos("250m").unwrap(), 250_000_000);
        assert_eq!(parse_nanos("0.5").unwrap(), 500_000_000);
        assert_eq!(parse_nanos(".5").unwrap(), 500_000_000);
        assert_eq!(parse_nanos("5.").unwrap(), 5 * NANO);
        assert_eq!(parse_nanos("+1k").unwrap(), 1000 * NANO);
        assert_eq!(parse_nanos("-1").unwrap(), -NANO);
        assert_eq!(parse_nanos("64Mi").unwrap(), 64 * (1 << 20) * NANO);
        assert_eq!(parse_nanos("1Ei").unwrap(), (1i128 << 60) * NANO);
        assert_eq!(parse_nanos("1E").unwrap(), 10i128.pow(18) * NANO);
        assert_eq!(parse_nanos("1e3").unwrap(), 1000 * NANO);
        assert_eq!(parse_nanos("1E3").unwrap(), 1000 * NANO);
        assert_eq!(parse_nanos("12e-3").unwrap(), 12_000_000);
        assert_eq!(parse_nanos("1n").unwrap(), 1);
        assert_eq!(parse_nanos("3u").unwrap(), 3000);
        assert_eq!(parse_nanos("1.5Gi").unwrap(), 3 * (1i128 << 29) * NANO);
        // More precision than nano-units: rounded up.
        assert_eq!(parse_nanos("0.0000000001").unwrap(), 1);
        assert_eq!(parse_nanos("1e-30").unwrap(), 1);
        assert_eq!(parse_nanos("0e-30").unwrap(), 0);
    }

    #[test]
    fn rejects_bad_syntax() {
        for bad in [
            "",
            " 1",
            "1 ",
            "m",
            "1x",
            "1mi",
            "1.2.3",
            ".",
            "1e",
            "1e+",
            "--1",
            "1KiB",
            "1e3m",
            "99999999999999999999999999999999999999999Ei",
        ] {
            assert!(parse_nanos(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn formats_round_down() {
        assert_eq!(format_cpu_floor(2 * NANO).0, "2");
        assert_eq!(format_cpu_floor(250_000_000).0, "250m");
        assert_eq!(format_cpu_floor(250_900_000).0, "250m");
        assert_eq!(format_memory_floor(64 * (1 << 20) * NANO).0, "64Mi");
        assert_eq!(format_memory_floor(2 * (1 << 30) * NANO).0, "2Gi");
        assert_eq!(format_memory_floor(1536 * 1024 * NANO).0, "1536Ki");
        assert_eq!(format_memory_floor(1_000_000 * NANO + 5).0, "1000000");
    }
}
