//! The text of one JSON value: integers, floats, timestamps and escaped strings, each as a
//! length known before the value is written (the encoder's first pass) and a writer into an
//! output already sized for it (its second pass).

/// `"00"` to `"99"`, two digits at a time.
const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// 10 to the power of the index.
const TEN: [u64; 20] = {
    let mut t = [1u64; 20];
    let mut i = 1;
    while i < 20 {
        t[i] = t[i - 1] * 10;
        i += 1;
    }
    t
};

/// The number of decimal digits of `v` (1 for 0).
#[inline(always)]
pub(crate) fn digits(v: u64) -> usize {
    // log10 from the bit length (1233 / 4096 is just over log10(2)), then one comparison: no
    // division or loop. `v | 1` makes 0 a one-digit number and changes no other answer (the
    // powers of ten past 1 are even).
    let bits = 64 - (v | 1).leading_zeros() as usize;
    let t = (bits * 1233) >> 12;
    t + usize::from(v | 1 >= TEN[t])
}

/// Writes the `len` decimal digits of `v` (`len` from [`digits`]) at `at`; returns the end.
#[inline(always)]
pub(crate) fn put_digits(out: &mut [u8], at: usize, mut v: u64, len: usize) -> usize {
    let end = at + len;
    let dst = &mut out[at..end];
    let mut i = len;
    while v >= 100 {
        let d = (v % 100) as usize * 2;
        v /= 100;
        i -= 2;
        dst[i] = PAIRS[d];
        dst[i + 1] = PAIRS[d + 1];
    }
    if v >= 10 {
        let d = v as usize * 2;
        dst[0] = PAIRS[d];
        dst[1] = PAIRS[d + 1];
    } else if let Some(first) = dst.first_mut() {
        *first = b'0' + v as u8;
    }
    end
}

/// The text length of the signed integer `v`.
#[inline(always)]
pub(crate) fn signed_len(v: i64) -> usize {
    usize::from(v < 0) + digits(v.unsigned_abs())
}

/// Writes the signed integer `v` at `at`; returns the end.
#[inline(always)]
pub(crate) fn put_signed(out: &mut [u8], mut at: usize, v: i64) -> usize {
    if v < 0 {
        out[at] = b'-';
        at += 1;
    }
    let u = v.unsigned_abs();
    put_digits(out, at, u, digits(u))
}

/// 10^6: the decimals of a float's short-decimal text.
const DECIMAL_SCALE: f64 = 1e6;

/// A float's text, made once in the first pass and copied in the second: at most 24 bytes for
/// an f64 (`-2.2250738585072014e-308`) and 11 for `"-Infinity"`; the length is the last byte.
#[derive(Clone, Copy)]
#[repr(align(8))]
pub(crate) struct FloatText([u8; 32]);

impl FloatText {
    /// An empty text (the slot of a null).
    pub(crate) const EMPTY: Self = Self([0; 32]);

    /// The text.
    #[inline(always)]
    pub(crate) fn bytes(&self) -> &[u8] {
        let len = usize::from(self.0[31]).min(31);
        &self.0[..len]
    }

    /// The shortest text that reads back as the same f64 (`0.1`, `1e300`, `1.0`), or one of
    /// the strings protobuf's JSON mapping writes for what JSON numbers cannot hold
    /// (`"NaN"`, `"Infinity"`, `"-Infinity"`).
    pub(crate) fn of_f64(v: f64) -> Self {
        let mut text = Self::EMPTY;
        text.set_f64(v);
        text
    }

    /// As [`FloatText::of_f64`], the shortest text that reads back as the same f32.
    pub(crate) fn of_f32(v: f32) -> Self {
        let mut text = Self::EMPTY;
        text.set_f32(v);
        text
    }

    /// Makes this [`FloatText::of_f64`]`(v)` in place; returns its length. (In place: a text
    /// built on the stack and moved here was read back wider than it was written, a stall of
    /// a store that cannot be forwarded, a third of a float column's time.)
    #[inline(always)]
    pub(crate) fn set_f64(&mut self, v: f64) -> usize {
        // A short decimal (a price, a reading: at most six decimals, from 10^-4 to 10^9) is
        // written from its digits without the general algorithm, which costs about 170
        // instructions a value. `m`, `|v|` * 10^6 rounded, is below 2^50, where doubles are
        // 1/8 apart: no other integer is that close to |v| * 10^6, so when m / 10^6 (correctly
        // rounded) is |v| again, m's decimal reads back as v and no decimal of six or fewer
        // decimals other than m's does; trimmed of trailing zeros it is the shortest text, the
        // one ryu and zmij write.
        let a = v.abs();
        if (1e-4..1e9).contains(&a) {
            // Through i64, which x86-64 converts in one instruction (u64 takes a branch).
            let m = (a * DECIMAL_SCALE + 0.5) as i64;
            if m as f64 / DECIMAL_SCALE == a {
                return self.set_decimal(v < 0.0, m as u64);
            }
        }
        if v.is_finite() {
            // zmij (what serde_json uses) writes the same digits as ryu at about a third of
            // its time (BENCHMARKS.md, the JSON encoder); only its positive exponents differ,
            // `1e+300`, and the `+` is left out so the text is what weir always wrote.
            self.set_finite(
                zmij::Buffer::new().format_finite(v).as_bytes(),
                v.abs() >= 1e7,
            )
        } else {
            self.set_not_finite(v)
        }
    }

    /// Makes this [`FloatText::of_f32`]`(v)` in place; returns its length.
    #[inline(always)]
    pub(crate) fn set_f32(&mut self, v: f32) -> usize {
        if v.is_finite() {
            self.set_finite(
                zmij::Buffer::new().format_finite(v).as_bytes(),
                v.abs() >= 1e7,
            )
        } else {
            self.set_not_finite(f64::from(v))
        }
    }

    /// `m` millionths, negated when `negative`, with one to six decimals (`100.0`, `12.34`).
    #[inline(always)]
    fn set_decimal(&mut self, negative: bool, m: u64) -> usize {
        let whole = m / 1_000_000;
        let fraction = (m % 1_000_000) as u32;
        let b = &mut self.0;
        b[0] = b'-';
        let at = put_digits(b, usize::from(negative), whole, digits(whole));
        b[at] = b'.';
        // All six decimals, two at a time, then the trailing zeros cut (one decimal stays).
        pair(b, at + 1, fraction / 10_000);
        pair(b, at + 3, fraction / 100);
        pair(b, at + 5, fraction);
        let mut len = at + 7;
        while len > at + 2 && b[len - 1] == b'0' {
            len -= 1;
        }
        b[31] = len as u8;
        len
    }

    /// `text`, whose `+` (only an exponent of a value of 10^7 or more has one) is dropped.
    #[inline(always)]
    fn set_finite(&mut self, text: &[u8], large: bool) -> usize {
        let len = text.len().min(24);
        crate::write::put(&mut self.0, 0, &text[..len]);
        let plus = if large {
            self.0[..len].iter().position(|&b| b == b'+')
        } else {
            None
        };
        let len = match plus {
            Some(plus) => {
                self.0.copy_within(plus + 1..len, plus);
                len - 1
            }
            None => len,
        };
        self.0[31] = len as u8;
        len
    }

    #[cold]
    fn set_not_finite(&mut self, v: f64) -> usize {
        let text: &[u8] = if v.is_nan() {
            b"\"NaN\""
        } else if v > 0.0 {
            b"\"Infinity\""
        } else {
            b"\"-Infinity\""
        };
        self.0[..text.len()].copy_from_slice(text);
        self.0[31] = text.len() as u8;
        text.len()
    }
}

/// The length of a timestamp's text, quotes included, from its nanoseconds within the second:
/// as chrono writes a `NaiveDateTime`, no fraction at 0, else milli-, micro- or nanoseconds,
/// the fewest that hold it.
#[inline(always)]
pub(crate) fn timestamp_len(nanos: u32) -> usize {
    2 + if nanos == 0 {
        19
    } else if nanos % 1_000_000 == 0 {
        23
    } else if nanos % 1_000 == 0 {
        26
    } else {
        29
    }
}

/// The date of a timestamp, `YYYY-MM-DD`, kept from one value to the next: consecutive
/// timestamps mostly fall on one day, and the civil date is most of a timestamp's work.
pub(crate) struct Dates {
    day: i64,
    text: [u8; 10],
}

impl Dates {
    /// No date known yet.
    pub(crate) fn new() -> Self {
        Self {
            day: i64::MIN,
            text: [0; 10],
        }
    }

    /// The text of `day` (days since 1970-01-01), year 0 to 9999.
    #[inline(always)]
    fn of(&mut self, day: i64) -> &[u8; 10] {
        if day != self.day {
            self.day = day;
            self.text = date_text(day);
        }
        &self.text
    }
}

/// `YYYY-MM-DD` of `days` since 1970-01-01 (Howard Hinnant's civil date; year 0 to 9999).
#[cold]
fn date_text(days: i64) -> [u8; 10] {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = (yoe + era * 400 + i64::from(month <= 2)) as u32;
    let mut b = [b'-'; 10];
    pair(&mut b, 0, year / 100);
    pair(&mut b, 2, year);
    pair(&mut b, 5, month);
    pair(&mut b, 8, day);
    b
}

/// Writes the last two decimal digits of `v` at `at`.
#[inline(always)]
fn pair(b: &mut [u8], at: usize, v: u32) {
    let d = (v % 100) as usize * 2;
    b[at] = PAIRS[d];
    b[at + 1] = PAIRS[d + 1];
}

/// Writes a timestamp without a time zone, `secs` and `nanos` (below 10^9) since the epoch,
/// quoted, as arrow-json writes one (chrono's `NaiveDateTime` debug form,
/// `"2026-03-02T14:30:20.270"`), at `at`; returns the end. The year must have four digits
/// (0 to 9999). Written in place, a byte or two at a time (a text built on the stack and
/// copied in wider moves stalled on each, as a float's did).
#[inline(always)]
pub(crate) fn put_timestamp(
    out: &mut [u8],
    at: usize,
    dates: &mut Dates,
    secs: i64,
    nanos: u32,
) -> usize {
    let of_day = secs.rem_euclid(86_400) as u32;
    let date = dates.of(secs.div_euclid(86_400));
    let len = timestamp_len(nanos);
    let b = &mut out[at..at + len];
    b[0] = b'"';
    b[1..11].copy_from_slice(date);
    b[11] = b'T';
    let (hours, minutes) = (of_day / 3_600, of_day / 60 % 60);
    pair(b, 12, hours);
    b[14] = b':';
    pair(b, 15, minutes);
    b[17] = b':';
    pair(b, 18, of_day % 60);
    if nanos != 0 {
        b[20] = b'.';
        // Three digits at a time: milliseconds, then micro- and nanoseconds where written.
        let three = |b: &mut [u8], at: usize, v: u32| {
            b[at] = b'0' + (v / 100) as u8;
            pair(b, at + 1, v);
        };
        three(b, 21, nanos / 1_000_000);
        if len > 25 {
            three(b, 24, nanos / 1_000 % 1_000);
        }
        if len > 28 {
            three(b, 27, nanos % 1_000);
        }
    }
    b[len - 1] = b'"';
    at + len
}

/// Whether any byte of `text` must be escaped in a JSON string: a control character, `"` or
/// `\`. Eight bytes at a time.
#[inline]
pub(crate) fn needs_escape(text: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // A byte below 0x20 (`(x - 0x20..) & !x`), or a zero byte of `x` xor `"` or `\`, each
    // in its high bit: exact for whether any such byte is there (a borrow can mark more bytes
    // only past one that is).
    let zero = |y: u64| y.wrapping_sub(ONES) & !y & HIGH;
    let word = |x: u64| {
        let below = x.wrapping_sub(0x20 * ONES) & !x & HIGH;
        below | zero(x ^ (u64::from(b'"') * ONES)) | zero(x ^ (u64::from(b'\\') * ONES)) != 0
    };
    let mut words = text.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        if word(u64::from_le_bytes(b)) {
            return true;
        }
    }
    words.remainder().iter().any(|&b| escape_of(b) != 0)
}

/// What serde_json writes after a `\` for byte `b`: `u` for `\u00XX`, a letter for the
/// short escapes, `"` and `\` for themselves, 0 for a byte written as it is.
#[inline(always)]
fn escape_of(b: u8) -> u8 {
    match b {
        0x08 => b'b',
        b'\t' => b't',
        b'\n' => b'n',
        0x0c => b'f',
        b'\r' => b'r',
        0..=0x1f => b'u',
        b'"' => b'"',
        b'\\' => b'\\',
        _ => 0,
    }
}

/// The length of `text` as a JSON string's contents, escaped as serde_json escapes it.
pub(crate) fn escaped_len(text: &[u8]) -> usize {
    text.iter()
        .map(|&b| match escape_of(b) {
            0 => 1,
            b'u' => 6,
            _ => 2,
        })
        .sum()
}

/// Writes `text` escaped (the contents of a JSON string, [`escaped_len`] bytes) at `at`;
/// returns the end.
pub(crate) fn put_escaped(out: &mut [u8], mut at: usize, text: &[u8]) -> usize {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for &b in text {
        match escape_of(b) {
            0 => {
                out[at] = b;
                at += 1;
            }
            b'u' => {
                out[at..at + 6].copy_from_slice(&[
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[usize::from(b >> 4)],
                    HEX[usize::from(b & 15)],
                ]);
                at += 6;
            }
            e => {
                out[at] = b'\\';
                out[at + 1] = e;
                at += 2;
            }
        }
    }
    at
}

/// `text` as a quoted, escaped JSON string (a field name's, written once).
pub(crate) fn quoted(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = vec![0; escaped_len(bytes) + 2];
    out[0] = b'"';
    let end = put_escaped(&mut out, 1, bytes);
    out[end] = b'"';
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_of_every_length() {
        let mut values = vec![0u64, 1, 9, 10, 99, 100, u64::MAX];
        for &t in &TEN[1..] {
            values.extend([t - 1, t, t + 1]);
        }
        for shift in 0..64 {
            values.extend([(1u64 << shift) - 1, 1 << shift]);
        }
        for v in values {
            let text = v.to_string();
            assert_eq!(digits(v), text.len(), "{v}");
            let mut out = vec![b'x'; text.len() + 2];
            assert_eq!(put_digits(&mut out, 1, v, digits(v)), text.len() + 1);
            assert_eq!(&out[1..=text.len()], text.as_bytes(), "{v}");
            assert_eq!((out[0], out[text.len() + 1]), (b'x', b'x'));
        }
        for v in [0i64, -1, 1, i64::MIN, i64::MAX, -10, -99, -100] {
            let text = v.to_string();
            let mut out = vec![0; 24];
            let end = put_signed(&mut out, 0, v);
            assert_eq!((signed_len(v), &out[..end]), (text.len(), text.as_bytes()));
        }
    }

    /// The same text as ryu (what weir wrote before), over random bit patterns and decimals.
    #[test]
    fn floats_read_as_ryu_writes_them() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let d = f64::from_bits(x);
            let cents = (x % 10_000_000) as f64 / 100.0;
            // Decimals of 0 to 8 places and every magnitude around the short-decimal path's.
            let places = (x >> 59) as i32 % 9;
            let decimal = (x % 100_000_000_000) as f64 / 10f64.powi(places);
            let scaled = (x % 1_000) as f64 * 10f64.powi((x >> 52) as i32 % 24 - 12);
            for v in [
                d, cents, -cents, decimal, -decimal, scaled, 1e16, 1e15, 5e-324,
            ] {
                if v.is_finite() {
                    let ours = FloatText::of_f64(v);
                    assert_eq!(ours.bytes(), ryu::Buffer::new().format_finite(v).as_bytes());
                }
            }
            let f = f32::from_bits(x as u32);
            if f.is_finite() {
                let ours = FloatText::of_f32(f);
                assert_eq!(ours.bytes(), ryu::Buffer::new().format_finite(f).as_bytes());
            }
        }
        for v in [
            1e9,
            999_999_999.999_999,
            1e-4,
            0.000_099_999,
            0.1,
            100.0,
            -0.5,
            0.0,
            -0.0,
            1.000_001,
            123_456_789.123_456,
            0.3,
            2.675,
            1e-4 + 1e-10,
            8_999_999.999_999_99,
        ] {
            assert_eq!(
                FloatText::of_f64(v).bytes(),
                ryu::Buffer::new().format_finite(v).as_bytes(),
                "{v:e}"
            );
        }
        assert_eq!(FloatText::of_f64(f64::NAN).bytes(), b"\"NaN\"");
        assert_eq!(
            FloatText::of_f32(f32::NEG_INFINITY).bytes(),
            b"\"-Infinity\""
        );
        assert_eq!(FloatText::of_f64(f64::INFINITY).bytes(), b"\"Infinity\"");
    }

    /// Every byte alone and at every place of a word, against serde_json's escaping.
    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        for b in 0..=255u8 {
            for at in 0..17 {
                let mut text = vec![b'a'; 17];
                text[at] = b;
                let special = b < 0x20 || b == b'"' || b == b'\\';
                for len in at + 1..=17 {
                    assert_eq!(
                        needs_escape(&text[..len]),
                        special,
                        "{b:#x} at {at} of {len}"
                    );
                }
                let Ok(s) = std::str::from_utf8(&text) else {
                    continue;
                };
                let expected = serde_json::to_string(s).unwrap_or_default();
                assert_eq!(quoted(s), expected.as_bytes(), "{b:#x} at {at}");
                assert_eq!(escaped_len(&text) + 2, expected.len(), "{b:#x}");
            }
        }
        let s = "tab\there \"q\" \\ é \u{7f} \u{1}";
        assert_eq!(
            quoted(s),
            serde_json::to_string(s).unwrap_or_default().as_bytes()
        );
    }

    #[test]
    fn timestamps_of_every_fraction_length() {
        let cases = [
            (0i64, 0u32, "\"1970-01-01T00:00:00\""),
            (951_782_400, 0, "\"2000-02-29T00:00:00\""),
            (1_772_461_820, 270_000_000, "\"2026-03-02T14:30:20.270\""),
            (1_772_461_820, 270_001_000, "\"2026-03-02T14:30:20.270001\""),
            (
                1_772_461_820,
                270_001_001,
                "\"2026-03-02T14:30:20.270001001\"",
            ),
            (-1_861_656_033, 46_210_000, "\"1911-01-04T01:19:27.046210\""),
            (5, 1, "\"1970-01-01T00:00:05.000000001\""),
            (-1, 999_999_999, "\"1969-12-31T23:59:59.999999999\""),
            (-62_167_219_200, 0, "\"0000-01-01T00:00:00\""),
            (253_402_300_799, 0, "\"9999-12-31T23:59:59\""),
        ];
        for (secs, nanos, text) in cases {
            let mut out = vec![0; 40];
            let end = put_timestamp(&mut out, 3, &mut Dates::new(), secs, nanos);
            assert_eq!(&out[3..end], text.as_bytes());
            assert_eq!(timestamp_len(nanos), text.len());
        }
    }
}
