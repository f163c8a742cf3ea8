//! Kubernetes resource quantities, parsed exactly as `k8s.io/apimachinery/pkg/api/resource`
//! parses them.
//!
//! Grammar (from apimachinery):
//! ```text
//! <quantity>        ::= <signedNumber><suffix>
//! <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
//! <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
//! <decimalSI>       ::= n | u | m | "" | k | M | G | T | P | E
//! <decimalExponent> ::= "e" <signedNumber> | "E" <signedNumber>
//! ```
//! Values are rounded *up* (away from zero) to nano precision and capped at 2^63-1 units, as
//! upstream does. One deliberate difference: upstream reads a number with no digit at all
//! (`"Gi"`, `"-"`, `"."`) as zero; capstan rejects it. The value is kept as a signed count of nano-units, which is exact for every
//! quantity upstream can represent.

use num_bigint::BigUint;
use std::fmt;

/// Largest magnitude upstream keeps: 2^63-1 units, in nano-units.
const MAX_NANOS: i128 = (i64::MAX as i128) * 1_000_000_000;

/// A parsed Kubernetes quantity, exact to one nano-unit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Quantity {
    nanos: i128,
}

/// Why a string is not a quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {input:?}: {reason}")]
pub struct QuantityError {
    pub input: String,
    pub reason: &'static str,
}

impl Quantity {
    pub const ZERO: Quantity = Quantity { nanos: 0 };

    /// Parses a quantity string the way `resource.ParseQuantity` does.
    pub fn parse(input: &str) -> Result<Quantity, QuantityError> {
        let err = |reason| QuantityError {
            input: input.to_string(),
            reason,
        };
        if input.is_empty() {
            return Err(err("empty string"));
        }
        let parts = split(input).ok_or_else(|| err("expected a number with an optional suffix (n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent such as e3)"))?;
        let (base2_exp, base10_exp) = interpret_suffix(parts.suffix)
            .ok_or_else(|| err("unable to parse quantity's suffix"))?;
        let magnitude = magnitude_nanos(parts.int_digits, parts.frac_digits, base10_exp, base2_exp);
        Ok(Quantity {
            nanos: if parts.negative {
                -magnitude
            } else {
                magnitude
            },
        })
    }

    pub fn from_milli(milli: i64) -> Quantity {
        Quantity {
            nanos: milli as i128 * 1_000_000,
        }
    }

    pub fn from_units(units: i64) -> Quantity {
        Quantity {
            nanos: units as i128 * 1_000_000_000,
        }
    }

    /// The value in milli-units, rounded up (upstream `MilliValue`), saturating at i64.
    pub fn milli_ceil(&self) -> i64 {
        saturate(ceil_div(self.nanos, 1_000_000))
    }

    /// The value in whole units, rounded up (upstream `Value`), saturating at i64.
    pub fn units_ceil(&self) -> i64 {
        saturate(ceil_div(self.nanos, 1_000_000_000))
    }

    pub fn is_negative(&self) -> bool {
        self.nanos < 0
    }

    pub fn is_whole(&self) -> bool {
        self.nanos % 1_000_000_000 == 0
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let units = self.nanos / 1_000_000_000;
        let rest = (self.nanos % 1_000_000_000).abs();
        if rest == 0 {
            write!(f, "{units}")
        } else if rest % 1_000_000 == 0 {
            write!(f, "{}m", self.nanos / 1_000_000)
        } else {
            write!(f, "{}n", self.nanos)
        }
    }
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

fn saturate(v: i128) -> i64 {
    v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

fn ceil_div(n: i128, d: i128) -> i128 {
    let q = n / d;
    if n % d > 0 { q + 1 } else { q }
}

struct Parts<'a> {
    negative: bool,
    int_digits: &'a str,
    frac_digits: &'a str,
    suffix: &'a str,
}

/// Mirrors upstream `parseQuantityString`, including its quirks (`"."` and `"1."` are numbers).
fn split(s: &str) -> Option<Parts<'_>> {
    let b = s.as_bytes();
    let mut pos = 0;
    let mut negative = false;
    match b.first() {
        Some(b'-') => {
            negative = true;
            pos += 1
        }
        Some(b'+') => pos += 1,
        _ => {}
    }
    let digits_start = pos;
    while pos < b.len() && b[pos] == b'0' {
        pos += 1;
    }
    let int_start = pos;
    while pos < b.len() && b[pos].is_ascii_digit() {
        pos += 1;
    }
    let int_digits = &s[int_start..pos];
    let mut frac_digits = "";
    if pos < b.len() && b[pos] == b'.' {
        pos += 1;
        let start = pos;
        while pos < b.len() && b[pos].is_ascii_digit() {
            pos += 1;
        }
        frac_digits = &s[start..pos];
    }
    // Upstream's parser reads "Gi", "-" or "." as zero; nobody means that, so a number needs a digit.
    if !s[digits_start..pos].bytes().any(|c| c.is_ascii_digit()) {
        return None;
    }
    let suffix_start = pos;
    while pos < b.len() && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos < b.len() && (b[pos] == b'-' || b[pos] == b'+') {
        pos += 1;
    }
    while pos < b.len() && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos != b.len() {
        return None;
    }
    Some(Parts {
        negative,
        int_digits,
        frac_digits,
        suffix: &s[suffix_start..],
    })
}

/// Returns (power of two, power of ten) that the suffix multiplies by.
fn interpret_suffix(suffix: &str) -> Option<(u32, i64)> {
    Some(match suffix {
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
        s if s.len() > 1 && (s.starts_with('e') || s.starts_with('E')) => {
            let exp: i64 = s[1..].parse().ok()?;
            (0, exp)
        }
        _ => return None,
    })
}

/// ceil(digits × 10^e10 × 2^e2 × 10^9), capped at [`MAX_NANOS`].
fn magnitude_nanos(int_digits: &str, frac_digits: &str, e10: i64, e2: u32) -> i128 {
    let frac = frac_digits.trim_end_matches('0');
    let mut digits = String::with_capacity(int_digits.len() + frac.len());
    digits.push_str(int_digits);
    digits.push_str(frac);
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return 0;
    }
    // value = digits × 10^k × 2^e2, in nano-units
    let k = e10.saturating_sub(frac.len() as i64).saturating_add(9);
    let mantissa = BigUint::parse_bytes(digits.as_bytes(), 10).unwrap_or_default() << e2 as usize;
    let cap = BigUint::from(MAX_NANOS as u128);
    let result = if k >= 0 {
        // Anything with more than 40 decimal digits is far above the cap.
        if k as usize + digits.len() > 60 {
            return MAX_NANOS;
        }
        mantissa * BigUint::from(10u32).pow(k as u32)
    } else {
        let shift = k.unsigned_abs();
        if shift as usize > digits.len() + 40 {
            // A non-zero amount far below one nano-unit rounds up to one.
            return 1;
        }
        let divisor = BigUint::from(10u32).pow(shift as u32);
        let q = &mantissa / &divisor;
        if (&q * &divisor) == mantissa {
            q
        } else {
            q + 1u32
        }
    };
    if result > cap {
        MAX_NANOS
    } else {
        u128::try_from(result)
            .map(|v| v as i128)
            .unwrap_or(MAX_NANOS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_kubernetes_accepts() {
        // (input, milli value rounded up, unit value rounded up)
        let cases: &[(&str, i64, i64)] = &[
            ("0", 0, 0),
            ("100m", 100, 1),
            ("1", 1000, 1),
            ("0.5", 500, 1),
            (".5", 500, 1),
            ("1.", 1000, 1),
            ("1.5", 1500, 2),
            ("+2", 2000, 2),
            ("1k", 1_000_000, 1000),
            ("1M", 1_000_000_000, 1_000_000),
            ("1G", 1_000_000_000_000, 1_000_000_000),
            ("1E", i64::MAX, 1_000_000_000_000_000_000),
            ("1Ki", 1_024_000, 1024),
            ("1Mi", 1_048_576_000, 1_048_576),
            ("1.5Gi", 1_610_612_736_000, 1_610_612_736),
            ("1e3", 1_000_000, 1000),
            ("1E3", 1_000_000, 1000),
            ("1e-3", 1, 1),
            ("1E+3", 1_000_000, 1000),
            ("12e-1", 1200, 2),
            ("250u", 1, 1),
            ("1n", 1, 1),
            ("007", 7000, 7),
            ("0.000000000001", 1, 1),
        ];
        for &(input, milli, units) in cases {
            let q = Quantity::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(q.milli_ceil(), milli, "milli of {input}");
            assert_eq!(q.units_ceil(), units, "units of {input}");
        }
    }

    #[test]
    fn rounds_sub_nano_amounts_up_to_one_nano() {
        assert_eq!(
            Quantity::parse("0.0000000001").unwrap(),
            Quantity { nanos: 1 }
        );
        assert_eq!(
            Quantity::parse("1.0000000001").unwrap(),
            Quantity {
                nanos: 1_000_000_001
            }
        );
        assert_eq!(
            Quantity::parse("-0.0000000001").unwrap(),
            Quantity { nanos: -1 }
        );
    }

    #[test]
    fn caps_huge_values_at_int64_max_units() {
        let q = Quantity::parse("1e100").unwrap();
        assert_eq!(q.units_ceil(), i64::MAX);
        assert_eq!(Quantity::parse("100Ei").unwrap().units_ceil(), i64::MAX);
    }

    #[test]
    fn negative_quantities_keep_their_sign() {
        let q = Quantity::parse("-1.5").unwrap();
        assert!(q.is_negative());
        assert_eq!(q.milli_ceil(), -1500);
    }

    #[test]
    fn rejects_garbage_with_a_reason() {
        for input in [
            "", "12x", "1K", "1 Gi", "Gi", "1e", "1Gii", "abc", "1.2.3", "--1", "1k3", "0x10", ".",
            "-", "Gi", ".5i", "0.1mi", "1.1.M",
        ] {
            let err = Quantity::parse(input).expect_err(input);
            assert_eq!(err.input, input);
            assert!(err.to_string().contains("invalid quantity"), "{err}");
        }
    }

    #[test]
    fn displays_in_a_compact_form() {
        assert_eq!(Quantity::parse("2").unwrap().to_string(), "2");
        assert_eq!(Quantity::parse("250m").unwrap().to_string(), "250m");
    }
}
