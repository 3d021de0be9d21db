//! The byte scanner: whitespace, strings, numbers, literals and whole values, validated as RFC
//! 8259 says, in one forward pass. Nothing here allocates: strings are returned as spans of the
//! message (unescaped only on demand, by [`unescape`]), numbers as a span plus the digits already
//! gathered on the way, and skipped values are validated without producing anything.
//!
//! `lanes.rs` holds the SIMD lanes and value windows, `strings.rs` strings and escapes; the
//! scanner itself, which the decoder drives, is here.

mod lanes;
mod strings;

use crate::error::{DecodeError, DecodeErrorKind};

#[cfg(test)]
pub(crate) use lanes::value_before_comma;
#[cfg(target_arch = "x86_64")]
pub(crate) use lanes::Avx2;
pub(crate) use lanes::{
    scalar_len, starts_scalar, value_end, Baseline, Lanes, VALUE_WINDOW, WINDOW,
};
pub(crate) use strings::unescape;
use strings::{check_escape, check_utf8, find_special};

/// A string's content (between the quotes) and whether it holds escapes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StrSpan {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) escaped: bool,
}

/// A validated number: its text span and what was gathered while scanning it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Num {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) neg: bool,
    /// The significant digits (integer and fraction) as an integer, while they fit in u64.
    pub(crate) mantissa: u64,
    /// The value is `mantissa * 10^exp10` (when `exact`).
    pub(crate) exp10: i32,
    /// No `.` and no exponent.
    pub(crate) is_int: bool,
    /// Every significant digit is in `mantissa` (false once it would overflow u64).
    pub(crate) exact: bool,
}

/// The end of the run of ASCII digits starting at `i`: eight bytes at a time (a skipped
/// number's digits are only validated, never accumulated, so a word-wide test pays; timestamps
/// and ids are 10-20 digits), then byte by byte for the last few.
#[inline(always)]
pub(crate) fn digit_run(buf: &[u8], mut i: usize) -> usize {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    while let Some(w) = buf.get(i..).and_then(|s| s.first_chunk::<8>()) {
        // Per byte, without carries between bytes: x = b ^ '0' is 0..=9 for a digit; a byte
        // is not a digit if x has its top bit set or its low seven bits plus 0x76 reach 0x80.
        let x = u64::from_le_bytes(*w) ^ 0x3030_3030_3030_3030;
        let not_digit = (x | ((x & !HIGH) + 0x7676_7676_7676_7676)) & HIGH;
        if not_digit != 0 {
            return i + (not_digit.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while matches!(buf.get(i), Some(b'0'..=b'9')) {
        i += 1;
    }
    i
}

/// The JSON type named by a value's first byte, for error messages.
pub(crate) fn kind_name(b: Option<u8>) -> &'static str {
    match b {
        Some(b'"') => "string",
        Some(b'{') => "object",
        Some(b'[') => "array",
        Some(b't' | b'f') => "boolean",
        Some(b'n') => "null",
        Some(b'-' | b'0'..=b'9') => "number",
        _ => "invalid value",
    }
}

/// A cursor over one message.
pub(crate) struct Scanner<'a> {
    pub(crate) buf: &'a [u8],
    pub(crate) pos: usize,
    pub(crate) max_depth: usize,
}

#[cold]
#[inline(never)]
pub(crate) fn syntax(at: usize, what: &'static str) -> DecodeError {
    DecodeError::new(at, DecodeErrorKind::JsonSyntax(what))
}

impl<'a> Scanner<'a> {
    pub(crate) fn new(buf: &'a [u8], max_depth: usize) -> Self {
        Self {
            buf,
            pos: 0,
            max_depth,
        }
    }

    #[inline(always)]
    pub(crate) fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    /// Skips JSON whitespace (space, tab, line feed, carriage return).
    #[inline(always)]
    pub(crate) fn ws(&mut self) {
        while let Some(&b) = self.buf.get(self.pos) {
            if b > b' ' || !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                return;
            }
            self.pos += 1;
        }
    }

    /// Skips whitespace and returns the next byte (not consumed).
    #[inline(always)]
    pub(crate) fn peek_ws(&mut self) -> Option<u8> {
        match self.buf.get(self.pos) {
            Some(&b) if b > b' ' => Some(b),
            _ => {
                self.ws();
                self.peek()
            }
        }
    }

    /// Consumes `byte` after optional whitespace, or fails with `what`.
    #[inline(always)]
    pub(crate) fn expect(&mut self, byte: u8, what: &'static str) -> Result<(), DecodeError> {
        if self.peek_ws() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.unexpected(what))
        }
    }

    /// The error for an unexpected byte (or the end of input) where `what` was expected.
    #[cold]
    #[inline(never)]
    pub(crate) fn unexpected(&self, what: &'static str) -> DecodeError {
        if self.pos >= self.buf.len() {
            syntax(self.buf.len(), what_at_end(what))
        } else {
            syntax(self.pos, what)
        }
    }

    /// Fails when `depth` containers are open and that is above the limit.
    #[inline(always)]
    pub(crate) fn check_depth(&self, depth: usize) -> Result<(), DecodeError> {
        if depth > self.max_depth {
            Err(DecodeError::new(
                self.pos,
                DecodeErrorKind::TooDeep(self.max_depth),
            ))
        } else {
            Ok(())
        }
    }

    /// Scans a string whose opening quote is at `pos`; leaves `pos` after the closing quote.
    /// Validates escapes (surrogate pairs included), control characters and UTF-8.
    #[inline(always)]
    pub(crate) fn string(&mut self) -> Result<StrSpan, DecodeError> {
        let buf = self.buf;
        let start = self.pos + 1;
        let mut i = start;
        let mut escaped = false;
        loop {
            i = find_special(buf, i);
            let Some(&b) = buf.get(i) else {
                return Err(syntax(buf.len(), "unterminated string"));
            };
            match b {
                b'"' => {
                    self.pos = i + 1;
                    return Ok(StrSpan {
                        start,
                        end: i,
                        escaped,
                    });
                }
                b'\\' => {
                    escaped = true;
                    i = check_escape(buf, i)?;
                }
                0..=0x1f => return Err(syntax(i, "unescaped control character in a string")),
                0x80..=0xff => i = check_utf8(buf, i)?,
                _ => i += 1,
            }
        }
    }

    /// Consumes the literal `word` (`true`, `false`, `null`) at `pos`.
    #[inline(always)]
    pub(crate) fn literal(&mut self, word: &'static [u8]) -> Result<(), DecodeError> {
        if self.buf.get(self.pos..self.pos + word.len()) == Some(word) {
            self.pos += word.len();
            Ok(())
        } else {
            Err(syntax(
                self.pos,
                "invalid literal (expected true, false or null)",
            ))
        }
    }

    /// Scans a number at `pos` (RFC 8259 grammar: no leading zeros, no leading `+`, a digit on
    /// both sides of `.`, no `NaN`/`Infinity`), gathering its digits on the way.
    #[inline(always)]
    pub(crate) fn number(&mut self) -> Result<Num, DecodeError> {
        let buf = self.buf;
        let start = self.pos;
        let mut i = start;
        let neg = buf.get(i) == Some(&b'-');
        if neg {
            i += 1;
        }
        let mut mantissa: u64 = 0;
        // Digits gathered into `mantissa`: 19 always fit in a u64 without a check.
        let mut ndigits = 0u32;
        let mut exact = true;
        let mut exp10: i32 = 0;
        match buf.get(i) {
            Some(b'0') => {
                i += 1;
                if matches!(buf.get(i), Some(b'0'..=b'9')) {
                    return Err(syntax(i - 1, "leading zero in a number"));
                }
            }
            Some(b'1'..=b'9') => {
                while let Some(&c) = buf.get(i) {
                    let d = c.wrapping_sub(b'0');
                    if d > 9 {
                        break;
                    }
                    if ndigits < 19 {
                        mantissa = mantissa * 10 + d as u64;
                        ndigits += 1;
                    } else {
                        // The 20th digit may still fit (u64 holds 20-digit values up to
                        // 18446744073709551615); past that only the exponent grows.
                        match mantissa
                            .checked_mul(10)
                            .and_then(|m| m.checked_add(d as u64))
                        {
                            Some(m) if exact => mantissa = m,
                            _ => {
                                exact = false;
                                exp10 = exp10.saturating_add(1);
                            }
                        }
                    }
                    i += 1;
                }
            }
            _ => return Err(self.number_error(i, "expected a digit")),
        }
        let mut is_int = true;
        if buf.get(i) == Some(&b'.') {
            is_int = false;
            i += 1;
            let digits = i;
            while let Some(&c) = buf.get(i) {
                let d = c.wrapping_sub(b'0');
                if d > 9 {
                    break;
                }
                if ndigits < 19 {
                    mantissa = mantissa * 10 + d as u64;
                    ndigits += 1;
                    exp10 -= 1;
                } else if exact {
                    match mantissa
                        .checked_mul(10)
                        .and_then(|m| m.checked_add(d as u64))
                    {
                        Some(m) => {
                            mantissa = m;
                            exp10 -= 1;
                        }
                        None => exact = false,
                    }
                }
                i += 1;
            }
            if i == digits {
                return Err(self.number_error(i, "expected a digit after '.'"));
            }
        }
        if matches!(buf.get(i), Some(b'e' | b'E')) {
            is_int = false;
            i += 1;
            let eneg = match buf.get(i) {
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
            let digits = i;
            let mut e: i32 = 0;
            while let Some(&d) = buf.get(i) {
                let d = d.wrapping_sub(b'0');
                if d > 9 {
                    break;
                }
                // Clamped: any exponent past a million overflows or underflows every type.
                e = (e * 10 + d as i32).min(1_000_000);
                i += 1;
            }
            if i == digits {
                return Err(self.number_error(i, "expected a digit in the exponent"));
            }
            exp10 = exp10.saturating_add(if eneg { -e } else { e });
        }
        self.pos = i;
        Ok(Num {
            start,
            end: i,
            neg,
            mantissa,
            exp10,
            is_int,
            exact,
        })
    }

    /// Validates and skips a number at `pos` without gathering its digits.
    #[inline(always)]
    pub(crate) fn skip_number(&mut self) -> Result<(), DecodeError> {
        let buf = self.buf;
        let mut i = self.pos;
        if buf.get(i) == Some(&b'-') {
            i += 1;
        }
        let digits = |i: &mut usize| {
            let s = *i;
            *i = digit_run(buf, s);
            *i - s
        };
        match buf.get(i) {
            Some(b'0') => {
                i += 1;
                if matches!(buf.get(i), Some(b'0'..=b'9')) {
                    return Err(syntax(i - 1, "leading zero in a number"));
                }
            }
            Some(b'1'..=b'9') => {
                digits(&mut i);
            }
            _ => return Err(self.number_error(i, "expected a digit")),
        }
        if buf.get(i) == Some(&b'.') {
            i += 1;
            if digits(&mut i) == 0 {
                return Err(self.number_error(i, "expected a digit after '.'"));
            }
        }
        if matches!(buf.get(i), Some(b'e' | b'E')) {
            i += 1;
            if matches!(buf.get(i), Some(b'-' | b'+')) {
                i += 1;
            }
            if digits(&mut i) == 0 {
                return Err(self.number_error(i, "expected a digit in the exponent"));
            }
        }
        self.pos = i;
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn number_error(&self, at: usize, what: &'static str) -> DecodeError {
        if at >= self.buf.len() {
            syntax(self.buf.len(), "unexpected end of input in a number")
        } else {
            syntax(at, what)
        }
    }

    /// [`Scanner::skip_value`] with the common scalars inlined at the call site: a short
    /// scalar is skipped from one window (see [`scalar_len`]), the rest by the full path.
    #[inline(always)]
    pub(crate) fn skip_value_fast(&mut self, depth: usize) -> Result<(), DecodeError> {
        if let Some(w) = self
            .buf
            .get(self.pos..)
            .and_then(|s| s.first_chunk::<WINDOW>())
        {
            // SAFETY: the baseline lanes run on every CPU.
            let n = unsafe { scalar_len(Baseline, w) };
            if n != 0 {
                self.pos += n;
                return Ok(());
            }
        }
        match self.peek_ws() {
            Some(b'"') => self.string().map(|_| ()),
            Some(b'-' | b'0'..=b'9') => self.skip_number(),
            _ => self.skip_value(depth),
        }
    }

    /// Validates and skips any value at `pos` (after whitespace); `depth` is the number of
    /// containers that hold it. Builds nothing, parses no number, unescapes nothing.
    pub(crate) fn skip_value(&mut self, depth: usize) -> Result<(), DecodeError> {
        match self.peek_ws() {
            Some(b'"') => self.string().map(|_| ()),
            Some(b'{') => self.skip_object(depth + 1),
            Some(b'[') => self.skip_array(depth + 1),
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            Some(b'-' | b'0'..=b'9') => self.skip_number(),
            _ => Err(self.unexpected("expected a value")),
        }
    }

    /// Skips an object whose `{` is at `pos`; `depth` counts it.
    fn skip_object(&mut self, depth: usize) -> Result<(), DecodeError> {
        self.check_depth(depth)?;
        self.pos += 1;
        if self.peek_ws() == Some(b'}') {
            self.pos += 1;
            return Ok(());
        }
        loop {
            if self.peek_ws() != Some(b'"') {
                return Err(self.key_expected());
            }
            self.string()?;
            self.expect(b':', "expected ':' after an object key")?;
            self.skip_value_fast(depth)?;
            match self.peek_ws() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(self.unexpected("expected ',' or '}' after an object value")),
            }
        }
    }

    /// Skips an array whose `[` is at `pos`; `depth` counts it.
    fn skip_array(&mut self, depth: usize) -> Result<(), DecodeError> {
        self.check_depth(depth)?;
        self.pos += 1;
        if self.peek_ws() == Some(b']') {
            self.pos += 1;
            return Ok(());
        }
        loop {
            self.array_value_start()?;
            self.skip_value(depth)?;
            if self.array_next()? {
                return Ok(());
            }
        }
    }

    /// Before an array element: rejects `]` (a trailing comma) with a clear message.
    #[inline(always)]
    pub(crate) fn array_value_start(&mut self) -> Result<(), DecodeError> {
        if self.peek_ws() == Some(b']') {
            Err(syntax(self.pos, "trailing comma before ']'"))
        } else {
            Ok(())
        }
    }

    /// After an array element: consumes `,` (false) or `]` (true, the array ended).
    #[inline(always)]
    pub(crate) fn array_next(&mut self) -> Result<bool, DecodeError> {
        match self.peek_ws() {
            Some(b',') => {
                self.pos += 1;
                Ok(false)
            }
            Some(b']') => {
                self.pos += 1;
                Ok(true)
            }
            _ => Err(self.unexpected("expected ',' or ']' after an array element")),
        }
    }

    /// The error where a key should start: a trailing comma, or something else.
    #[cold]
    #[inline(never)]
    pub(crate) fn key_expected(&self) -> DecodeError {
        if self.peek() == Some(b'}') {
            syntax(self.pos, "trailing comma before '}'")
        } else {
            self.unexpected("expected a string key")
        }
    }
}

/// The end-of-input form of an "expected ..." message.
fn what_at_end(_what: &'static str) -> &'static str {
    "unexpected end of input (unterminated object, array or value)"
}

#[cfg(test)]
mod tests {
    use super::strings::special_bytes;
    use super::*;

    fn skip(s: &str) -> Result<usize, DecodeError> {
        let mut sc = Scanner::new(s.as_bytes(), 128);
        sc.skip_value(0)?;
        sc.ws();
        if sc.pos != s.len() {
            return Err(syntax(sc.pos, "trailing"));
        }
        Ok(sc.pos)
    }

    #[test]
    fn special_bytes_finds_the_first() {
        for (s, at) in [
            (*b"abcdefgh", None),
            (*b"abc\"efgh", Some(3)),
            (*b"\\bcdefgh", Some(0)),
            (*b"abcdefg\x1f", Some(7)),
            (*b"ab\x80defg\"", Some(2)),
            (*b"a\x00\"\x00\"\x00\"h", Some(1)),
            (*b"\x20\x21\x23\x5b\x5d\x7f\x7e\x41", None),
        ] {
            let m = special_bytes(u64::from_le_bytes(s));
            let got = (m != 0).then(|| (m.trailing_zeros() / 8) as usize);
            assert_eq!(got, at, "{s:?}");
        }
    }

    #[test]
    fn find_special_agrees_with_a_plain_search() {
        let naive = |buf: &[u8], i: usize| {
            (i..buf.len())
                .find(|&j| matches!(buf[j], b'"' | b'\\' | 0..=0x1f | 0x80..=0xff))
                .unwrap_or(buf.len())
        };
        for special in [b'"', b'\\', 0x00, 0x1f, 0x80, 0xc3, 0xff] {
            for len in 0..40 {
                for at in 0..=len {
                    let mut buf = vec![b'a'; len];
                    buf.iter_mut().step_by(7).for_each(|b| *b = b' ');
                    buf.iter_mut().skip(3).step_by(11).for_each(|b| *b = 0x7f);
                    if at < len {
                        buf[at] = special;
                    }
                    for start in [0, 1, 5, 17].into_iter().filter(|&s| s <= len) {
                        assert_eq!(
                            find_special(&buf, start),
                            naive(&buf, start),
                            "{buf:?} {start}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn strings_validate_escapes_and_utf8() {
        for ok in [
            r#""""#,
            r#""abc""#,
            r#""\"\\\/\b\f\n\r\t""#,
            r#""\u00e9\uD83D\uDE00""#,
            "\"h\u{e9}llo \u{1F600} \u{4e16}\"",
            r#""a long string with no escapes at all, past the eight byte words""#,
        ] {
            assert!(skip(ok).is_ok(), "{ok}");
        }
        for bad in [
            "\"abc",
            "\"a\\x\"",
            "\"\\uD800\"",
            "\"\\uDC00\"",
            "\"\\uD800\\u0041\"",
            "\"\\u12G4\"",
            "\"\\u12\"",
            "\"a\nb\"",
            "\"\t\"",
        ] {
            assert!(skip(bad).is_err(), "{bad:?}");
        }
        for bad in [
            &b"\"\xff\""[..],
            b"\"\xc0\xaf\"",
            b"\"\xed\xa0\x80\"",
            b"\"\xe2\x82\"",
            b"\"\xf4\x90\x80\x80\"",
        ] {
            let mut sc = Scanner::new(bad, 128);
            assert!(sc.skip_value(0).is_err(), "{bad:?}");
        }
    }

    /// Random short texts over the bytes that matter to strings, numbers and literals: where
    /// the window skipper answers, the full path must accept the same value and end at the
    /// same byte; and every plain valid scalar that fits must get an answer.
    #[test]
    fn window_skipper_agrees_with_the_full_path() {
        const ALPHABET: &[u8] = b"0123456789-+.eE\"\\truefalsn ,}x\x01\xc3\xa9\x7f";
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut answered, mut before_comma) = (0, 0);
        for round in 0..400_000 {
            let len = (next() % 40) as usize;
            let mut text: Vec<u8> = (0..len)
                .map(|_| ALPHABET[(next() % ALPHABET.len() as u64) as usize])
                .collect();
            // Bias towards plausible values: start like a string or a number half the time.
            match round % 4 {
                0 => text.insert(0, b'"'),
                1 => text.insert(0, b'1' + (next() % 9) as u8),
                _ => {}
            }
            let mut buf = text.clone();
            buf.resize(buf.len().max(VALUE_WINDOW), b' ');
            let w: &[u8; WINDOW] = buf.first_chunk().unwrap();
            let wv: &[u8; VALUE_WINDOW] = buf.first_chunk().unwrap();
            // SAFETY: the baseline lanes run on every CPU.
            let n = unsafe { scalar_len(Baseline, w) };
            #[cfg(target_arch = "x86_64")]
            if let Some(avx2) = Avx2::detect() {
                // SAFETY: `avx2` exists only where the CPU has AVX2.
                assert_eq!(unsafe { scalar_len(avx2, w) }, n);
            }
            let mut sc = Scanner::new(&buf, 128);
            let full = sc.skip_value(0).map(|()| sc.pos).ok();
            if n != 0 {
                answered += 1;
                assert_eq!(full, Some(n), "{:?}", String::from_utf8_lossy(&text));
            }
            // The skip loop's reading: the same value, and only when a `,` follows it.
            // SAFETY: the baseline lanes run on every CPU.
            let c = unsafe { value_before_comma(Baseline, wv) };
            #[cfg(target_arch = "x86_64")]
            if let Some(avx2) = Avx2::detect() {
                // SAFETY: `avx2` exists only where the CPU has AVX2.
                assert_eq!(unsafe { value_before_comma(avx2, wv) }, c);
            }
            if c != 0 {
                assert_eq!(full, Some(c), "{:?}", String::from_utf8_lossy(&text));
                assert_eq!(buf[c], b',', "{:?}", String::from_utf8_lossy(&text));
                before_comma += 1;
            } else if let Some(end) = full {
                // Plain values (no escape, exponent or non-ASCII) followed by `,` are answered.
                let starts = matches!(text[0], b'"' | b'-' | b'0'..=b'9' | b't' | b'f' | b'n');
                let simple = !text[..end].iter().any(|&b| {
                    b == b'\\'
                        || b == b'E'
                        || !(0x20..0x80).contains(&b)
                        || (b == b'e' && text[0] != b'"')
                });
                let plain =
                    starts && (simple || text[..end] == *b"true" || text[..end] == *b"false");
                // The comma inside the window: at most at 32 after a string (the search
                // starts after its opening quote), at 31 after anything else.
                let fits = end < WINDOW + usize::from(text[0] == b'"');
                if plain && fits && buf.get(end) == Some(&b',') && end > 0 {
                    panic!("not answered: {:?}", String::from_utf8_lossy(&text));
                }
            }
        }
        assert!(answered > 50_000, "only {answered} answered");
        assert!(
            before_comma > 5_000,
            "only {before_comma} answered before a comma"
        );
        for ok in [
            "\"\"",
            "\"abc\"",
            "0",
            "-0",
            "12",
            "-7.25",
            "1e5",
            "2.5E-3",
            "6E+10",
            "true",
            "false",
            "null",
            "\"2026-03-02T10:11:12.123Z\"",
            "1234567890123456",
        ] {
            let mut buf = ok.as_bytes().to_vec();
            buf.push(b',');
            buf.resize(WINDOW, b' ');
            // SAFETY: the baseline lanes run on every CPU.
            let n = unsafe { scalar_len(Baseline, buf.first_chunk().unwrap()) };
            assert_eq!(n, ok.len(), "{ok}");
        }
        // The skip loop's window edge: a string of 30 bytes (its comma at 32) and a number of
        // 31 digits (its comma at 31) are answered; one byte more is left to the full path.
        let string = |n: usize| format!("\"{}\"", "s".repeat(n));
        let number = |n: usize| "7".repeat(n);
        for (value, answered) in [
            (string(30), true),
            (string(31), false),
            (number(31), true),
            (number(32), false),
        ] {
            let mut buf = value.clone().into_bytes();
            buf.push(b',');
            buf.resize(buf.len().max(VALUE_WINDOW), b' ');
            let w: &[u8; VALUE_WINDOW] = buf.first_chunk().unwrap();
            let want = if answered { value.len() } else { 0 };
            // SAFETY: the baseline lanes run on every CPU.
            assert_eq!(unsafe { value_before_comma(Baseline, w) }, want, "{value}");
            #[cfg(target_arch = "x86_64")]
            if let Some(avx2) = Avx2::detect() {
                // SAFETY: `avx2` exists only where the CPU has AVX2.
                assert_eq!(unsafe { value_before_comma(avx2, w) }, want, "{value}");
            }
        }
    }

    #[test]
    fn digit_run_matches_a_byte_loop() {
        // Every byte value at every position of a run, and runs of every length up to 20.
        for len in 0..=20usize {
            for stop in 0..=255u8 {
                for tail in [0usize, 3, 12] {
                    let mut buf: Vec<u8> = (0..len).map(|k| b'0' + (k % 10) as u8).collect();
                    buf.push(stop);
                    buf.extend(std::iter::repeat_n(b'7', tail));
                    for start in 0..=len.min(2) {
                        let mut want = start;
                        while want < buf.len() && buf[want].is_ascii_digit() {
                            want += 1;
                        }
                        assert_eq!(
                            digit_run(&buf, start),
                            want,
                            "len {len} stop {stop} tail {tail}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn numbers_follow_the_grammar() {
        for ok in [
            "0",
            "-0",
            "12",
            "-12.5e3",
            "1E+2",
            "1e-2",
            "0.0",
            "123456789012345678901234",
        ] {
            assert!(skip(ok).is_ok(), "{ok}");
        }
        for bad in [
            "01",
            "-",
            "+1",
            "1.",
            ".5",
            "1e",
            "1e+",
            "NaN",
            "-Infinity",
            "0x10",
            "--1",
        ] {
            assert!(skip(bad).is_err(), "{bad}");
        }
        let mut sc = Scanner::new(b"-12.50e1", 128);
        let n = sc.number().unwrap();
        assert!(n.neg && n.exact && !n.is_int);
        assert_eq!((n.mantissa, n.exp10), (1250, -1));
        let mut sc = Scanner::new(b"18446744073709551616", 128);
        let n = sc.number().unwrap();
        assert!(!n.exact && n.is_int);
    }

    #[test]
    fn containers_reject_trailing_commas_and_depth() {
        for ok in [
            "[]",
            "{}",
            "[1, [2, {\"a\": [true, false, null]}]]",
            " { \"a\" : 1 } ",
        ] {
            assert!(skip(ok).is_ok(), "{ok}");
        }
        for bad in [
            "[1,]",
            "{\"a\":1,}",
            "[1 2]",
            "{\"a\" 1}",
            "{1:2}",
            "[",
            "{\"a\":",
            "nul",
        ] {
            assert!(skip(bad).is_err(), "{bad}");
        }
        let deep = "[".repeat(129) + &"]".repeat(129);
        assert!(matches!(
            skip(&deep),
            Err(DecodeError {
                kind: DecodeErrorKind::TooDeep(128),
                ..
            })
        ));
        let ok = "[".repeat(128) + &"]".repeat(128);
        assert!(skip(&ok).is_ok());
    }

    #[test]
    fn unescape_decodes_every_escape() {
        let mut out = Vec::new();
        unescape(br#"a\"\\\/\b\f\n\r\t\u00e9\uD83D\uDE00z"#, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "a\"\\/\u{8}\u{c}\n\r\t\u{e9}\u{1F600}z"
        );
    }
}
