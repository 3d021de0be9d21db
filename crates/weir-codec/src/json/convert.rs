//! Conversions of validated JSON text into column values: correctly rounded floats, exact
//! integers and decimals, RFC 3339 date-times and epoch numbers into timestamps, and dates.

use arrow_schema::TimeUnit;

use super::scan::{Num, Scanner};
use super::EpochUnit;

/// Powers of ten that are exact in f64.
const POW10_F64: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];
/// Powers of ten that are exact in f32.
const POW10_F32: [f32; 11] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10];

/// The integer value of a number scanned without fraction or exponent, if it fits 64 bits.
#[inline(always)]
pub(crate) fn exact_int(n: &Num) -> Option<i128> {
    if !n.exact || !n.is_int {
        return None;
    }
    let m = n.mantissa as i128;
    Some(if n.neg { -m } else { m })
}

/// The nearest f64 to a validated number; `None` when it overflows to infinity.
#[inline(always)]
pub(crate) fn to_f64(n: &Num, buf: &[u8]) -> Option<f64> {
    // Clinger's fast path: both operands exact, so one IEEE operation rounds correctly.
    if n.exact && n.mantissa <= 1u64 << 53 && (-22..=22).contains(&n.exp10) {
        let m = n.mantissa as f64;
        let v = if n.exp10 < 0 {
            m / POW10_F64[n.exp10.unsigned_abs() as usize]
        } else {
            m * POW10_F64[n.exp10 as usize]
        };
        return Some(if n.neg { -v } else { v });
    }
    // The standard library's parser is correctly rounded (Eisel-Lemire with a big-decimal
    // fallback); the text is a validated JSON number, which is valid Rust float syntax.
    let text = std::str::from_utf8(buf.get(n.start..n.end)?).ok()?;
    let v: f64 = text.parse().ok()?;
    v.is_finite().then_some(v)
}

/// The nearest f32 (rounded once, not through f64); `None` when it overflows to infinity.
#[inline(always)]
pub(crate) fn to_f32(n: &Num, buf: &[u8]) -> Option<f32> {
    if n.exact && n.mantissa <= 1u64 << 24 && (-10..=10).contains(&n.exp10) {
        let m = n.mantissa as f32;
        let v = if n.exp10 < 0 {
            m / POW10_F32[n.exp10.unsigned_abs() as usize]
        } else {
            m * POW10_F32[n.exp10 as usize]
        };
        return Some(if n.neg { -v } else { v });
    }
    let text = std::str::from_utf8(buf.get(n.start..n.end)?).ok()?;
    let v: f32 = text.parse().ok()?;
    v.is_finite().then_some(v)
}

/// Why an exact decimal could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DecimalError {
    /// The text is not a JSON number (only possible for numbers given as strings).
    NotANumber,
    /// The value has more significant digits than 128 bits hold, or does not fit the type.
    OutOfRange,
}

/// A decimal number read exactly: `(-1)^neg * digits * 10^exp`, `digits` without trailing
/// zeros.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Exact {
    pub(crate) neg: bool,
    pub(crate) digits: u128,
    pub(crate) exp: i64,
}

/// Reads JSON number text exactly (validating its grammar first).
pub(crate) fn exact_decimal(text: &[u8]) -> Result<Exact, DecimalError> {
    let mut sc = Scanner::new(text, 1);
    if sc.number().is_err() || sc.pos != text.len() {
        return Err(DecimalError::NotANumber);
    }
    let mut i = 0;
    let neg = text.first() == Some(&b'-');
    if neg {
        i += 1;
    }
    let mut digits: u128 = 0;
    let mut pending: u32 = 0; // zeros seen but not yet multiplied in
    let mut frac_digits: i64 = 0;
    let mut in_frac = false;
    while let Some(&b) = text.get(i) {
        match b {
            b'0' => pending += 1,
            b'1'..=b'9' => {
                if digits != 0 {
                    for _ in 0..=pending {
                        digits = digits.checked_mul(10).ok_or(DecimalError::OutOfRange)?;
                    }
                }
                digits += (b - b'0') as u128;
                pending = 0;
            }
            b'.' => {
                in_frac = true;
                i += 1;
                continue;
            }
            _ => break,
        }
        if in_frac {
            frac_digits += 1;
        }
        i += 1;
    }
    let mut exp: i64 = 0;
    if matches!(text.get(i), Some(b'e' | b'E')) {
        i += 1;
        let eneg = match text.get(i) {
            Some(b'-') => {
                i += 1;
                true
            }
            Some(b'+') => {
                i += 1;
                false
            }
            _ => false,
        };
        while let Some(&b) = text.get(i) {
            exp = (exp * 10 + (b - b'0') as i64).min(1_000_000_000);
            i += 1;
        }
        if eneg {
            exp = -exp;
        }
    }
    if digits == 0 {
        return Ok(Exact {
            neg,
            digits: 0,
            exp: 0,
        });
    }
    Ok(Exact {
        neg,
        digits,
        exp: exp - frac_digits + pending as i64,
    })
}

fn pow10_u128(e: u32) -> Option<u128> {
    10u128.checked_pow(e)
}

/// The Decimal128 value at `scale` if it is exact and has at most `precision` digits.
pub(crate) fn decimal128(x: Exact, precision: u8, scale: i8) -> Option<i128> {
    if x.digits == 0 {
        return Some(0);
    }
    let e = x.exp.checked_add(scale as i64)?;
    if e < 0 {
        // digits has no trailing zeros: a negative exponent leaves a fraction the scale drops.
        return None;
    }
    let v = x.digits.checked_mul(pow10_u128(u32::try_from(e).ok()?)?)?;
    if v >= pow10_u128(precision as u32)? {
        return None;
    }
    let v = i128::try_from(v).ok()?;
    Some(if x.neg { -v } else { v })
}

fn unit_exp(unit: TimeUnit) -> i64 {
    match unit {
        TimeUnit::Second => 0,
        TimeUnit::Millisecond => 3,
        TimeUnit::Microsecond => 6,
        TimeUnit::Nanosecond => 9,
    }
}

/// An epoch number (`x` in `epoch` units) in `unit`, rounded toward negative infinity.
pub(crate) fn epoch_to_unit(x: Exact, epoch: EpochUnit, unit: TimeUnit) -> Option<i64> {
    if x.digits == 0 {
        return Some(0);
    }
    let e = x.exp + unit_exp(unit) - unit_exp(epoch.time_unit());
    let v: i128 = if e >= 0 {
        let m = x.digits.checked_mul(pow10_u128(u32::try_from(e).ok()?)?)?;
        let m = i128::try_from(m).ok()?;
        if x.neg {
            -m
        } else {
            m
        }
    } else {
        let (q, r) = match pow10_u128(u32::try_from(-e).ok()?) {
            Some(p) => (x.digits / p, x.digits % p),
            None => (0, x.digits),
        };
        let q = i128::try_from(q).ok()?;
        if x.neg {
            -q - (r != 0) as i128
        } else {
            q
        }
    };
    i64::try_from(v).ok()
}

/// A scanned epoch number in `unit`: integers in the column's own unit take the fast path.
#[inline]
pub(crate) fn epoch_number(n: &Num, buf: &[u8], epoch: EpochUnit, unit: TimeUnit) -> Option<i64> {
    if epoch.time_unit() == unit {
        if let Some(v) = exact_int(n) {
            return i64::try_from(v).ok();
        }
    }
    let x = exact_decimal(buf.get(n.start..n.end)?).ok()?;
    epoch_to_unit(x, epoch, unit)
}

/// Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn digits(t: &[u8], at: usize, n: usize) -> Option<u32> {
    let mut v = 0u32;
    for &b in t.get(at..at + n)? {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v * 10 + (b - b'0') as u32;
    }
    Some(v)
}

/// Days since the epoch of a `YYYY-MM-DD` date that exists.
pub(crate) fn date_days(t: &[u8]) -> Option<i64> {
    if t.len() != 10 || t[4] != b'-' || t[7] != b'-' {
        return None;
    }
    let (y, m, d) = (digits(t, 0, 4)?, digits(t, 5, 2)?, digits(t, 8, 2)?);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days_in_month = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if d == 0 || d > days_in_month {
        return None;
    }
    Some(days_from_civil(y as i64, m, d))
}

/// Seconds since the epoch and nanoseconds of an RFC 3339 date-time
/// (`2026-11-22T10:15:30.123456789+01:00`; `T`, `t` or a space between date and time; `Z`,
/// `z` or a numeric offset; any number of fraction digits, truncated to nanoseconds). Leap
/// seconds (`:60`) are rejected.
pub(crate) fn rfc3339(t: &[u8]) -> Option<(i64, u32)> {
    let days = date_days(t.get(..10)?)?;
    if !matches!(t.get(10), Some(b'T' | b't' | b' ')) {
        return None;
    }
    let (h, mi, s) = (digits(t, 11, 2)?, digits(t, 14, 2)?, digits(t, 17, 2)?);
    if t.get(13) != Some(&b':') || t.get(16) != Some(&b':') || h > 23 || mi > 59 || s > 59 {
        return None;
    }
    let mut i = 19;
    let mut nanos = 0u32;
    if t.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while let Some(&b) = t.get(i) {
            if !b.is_ascii_digit() {
                break;
            }
            if i - start < 9 {
                nanos = nanos * 10 + (b - b'0') as u32;
            }
            i += 1;
        }
        let n = i - start;
        if n == 0 {
            return None;
        }
        for _ in n..9 {
            nanos *= 10;
        }
    }
    let offset: i64 = match t.get(i) {
        Some(b'Z' | b'z') => {
            i += 1;
            0
        }
        Some(&sign @ (b'+' | b'-')) => {
            let (oh, om) = (digits(t, i + 1, 2)?, digits(t, i + 4, 2)?);
            if t.get(i + 3) != Some(&b':') || oh > 23 || om > 59 {
                return None;
            }
            i += 6;
            let o = (oh * 3600 + om * 60) as i64;
            if sign == b'-' {
                -o
            } else {
                o
            }
        }
        _ => return None,
    };
    if i != t.len() {
        return None;
    }
    let secs = days * 86_400 + (h * 3600 + mi * 60 + s) as i64 - offset;
    Some((secs, nanos))
}

/// Seconds and nanoseconds in `unit` (fractions below the unit truncated).
pub(crate) fn secs_to_unit(secs: i64, nanos: u32, unit: TimeUnit) -> Option<i64> {
    let (mul, div) = match unit {
        TimeUnit::Second => (1, 1_000_000_000),
        TimeUnit::Millisecond => (1_000, 1_000_000),
        TimeUnit::Microsecond => (1_000_000, 1_000),
        TimeUnit::Nanosecond => (1_000_000_000, 1),
    };
    secs.checked_mul(mul)?.checked_add((nanos / div) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn num(s: &str) -> Num {
        let mut sc = Scanner::new(s.as_bytes(), 1);
        sc.number().unwrap()
    }

    #[test]
    fn floats_are_correctly_rounded() {
        for s in [
            "0",
            "-0",
            "1",
            "12.34",
            "0.1",
            "1e22",
            "1e23",
            "9007199254740993",
            "2.2250738585072014e-308",
            "4.9e-324",
            "1.7976931348623157e308",
            "123456789012345678901234567890",
            "0.30000000000000004",
            "-1.5e-7",
            "5e-400",
        ] {
            let want: f64 = s.parse().unwrap();
            let got = to_f64(&num(s), s.as_bytes()).unwrap();
            assert_eq!(got.to_bits(), want.to_bits(), "{s}");
            let want32: f32 = s.parse().unwrap();
            if want32.is_finite() {
                assert_eq!(
                    to_f32(&num(s), s.as_bytes()).unwrap().to_bits(),
                    want32.to_bits(),
                    "{s}"
                );
            }
        }
        assert_eq!(to_f64(&num("1e309"), b"1e309"), None);
        assert_eq!(to_f32(&num("1e39"), b"1e39"), None);
    }

    #[test]
    fn decimals_are_exact() {
        let d = |s: &str, p, sc| {
            exact_decimal(s.as_bytes())
                .ok()
                .and_then(|x| decimal128(x, p, sc))
        };
        assert_eq!(d("12.34", 10, 2), Some(1234));
        assert_eq!(d("-12.3400", 10, 2), Some(-1234));
        assert_eq!(d("12.345", 10, 2), None);
        assert_eq!(d("1.2345e2", 10, 2), Some(12345));
        assert_eq!(d("100", 3, 0), Some(100));
        assert_eq!(d("1000", 3, 0), None);
        assert_eq!(d("0.000", 3, 2), Some(0));
        assert_eq!(
            d("99999999999999999999999999999999999999", 38, 0),
            Some(10i128.pow(38) - 1)
        );
        assert_eq!(d("999999999999999999999999999999999999999", 38, 0), None);
        assert_eq!(d("1e-2", 5, 2), Some(1));
        assert_eq!(exact_decimal(b"1.").err(), Some(DecimalError::NotANumber));
        assert_eq!(exact_decimal(b"12a").err(), Some(DecimalError::NotANumber));
    }

    #[test]
    fn epochs_convert_between_units() {
        let x = |s: &str| exact_decimal(s.as_bytes()).unwrap();
        use EpochUnit::*;
        use TimeUnit::*;
        assert_eq!(
            epoch_to_unit(x("1700000000"), Seconds, Nanosecond),
            Some(1_700_000_000_000_000_000)
        );
        assert_eq!(
            epoch_to_unit(x("1700000000.5"), Seconds, Millisecond),
            Some(1_700_000_000_500)
        );
        assert_eq!(epoch_to_unit(x("1500"), Millis, Second), Some(1));
        assert_eq!(epoch_to_unit(x("-1500"), Millis, Second), Some(-2));
        assert_eq!(epoch_to_unit(x("1e30"), Seconds, Nanosecond), None);
        assert_eq!(epoch_to_unit(x("0"), Nanos, Second), Some(0));
    }

    #[test]
    fn dates_and_rfc3339() {
        assert_eq!(date_days(b"1970-01-01"), Some(0));
        assert_eq!(date_days(b"2000-03-01"), Some(11_017));
        assert_eq!(date_days(b"1969-12-31"), Some(-1));
        assert_eq!(date_days(b"2024-02-29"), Some(19_782));
        assert_eq!(date_days(b"2023-02-29"), None);
        assert_eq!(date_days(b"2023-13-01"), None);
        assert_eq!(date_days(b"2023-1-01"), None);
        assert_eq!(rfc3339(b"1970-01-01T00:00:00Z"), Some((0, 0)));
        assert_eq!(
            rfc3339(b"2026-11-22T10:15:30.123456789+01:00"),
            Some((1_795_342_530 - 3600, 123_456_789))
        );
        assert_eq!(
            rfc3339(b"2026-11-22t10:15:30.5z"),
            Some((1_795_342_530, 500_000_000))
        );
        assert_eq!(
            rfc3339(b"2026-11-22 10:15:30-00:30"),
            Some((1_795_342_530 + 1800, 0))
        );
        for bad in [
            &b"2026-11-22T10:15:30"[..],
            b"2026-11-22T24:00:00Z",
            b"2026-11-22T10:15:60Z",
            b"2026-11-22T10:15:30.Z",
            b"2026-11-22T10:15:30+0100",
            b"2026-11-22T10:15:30Zx",
        ] {
            assert_eq!(rfc3339(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(
            secs_to_unit(-1, 500_000_000, TimeUnit::Millisecond),
            Some(-500)
        );
    }
}
