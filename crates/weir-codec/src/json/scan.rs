//! The byte scanner: whitespace, strings, numbers, literals and whole values, validated as RFC
//! 8259 says, in one forward pass. Nothing here allocates: strings are returned as spans of the
//! message (unescaped only on demand, by [`unescape`]), numbers as a span plus the digits already
//! gathered on the way, and skipped values are validated without producing anything.

use crate::error::{DecodeError, DecodeErrorKind};

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// Bytes of `v` that are zero, as their high bit. Bits above a true hit may be false hits
/// (borrows), so only the lowest set bit is meaningful; that is the only one we use.
#[inline(always)]
fn zero_bytes(v: u64) -> u64 {
    v.wrapping_sub(ONES) & !v & HIGH
}

/// The high bit of every byte of `w` that ends the fast string loop: `"`, `\`, a control
/// character (< 0x20) or a non-ASCII byte. Eight bytes per step instead of one.
#[inline(always)]
fn special_bytes(w: u64) -> u64 {
    zero_bytes(w ^ (ONES * b'"' as u64))
        | zero_bytes(w ^ (ONES * b'\\' as u64))
        | (w.wrapping_sub(ONES * 0x20) & !w & HIGH)
        | (w & HIGH)
}

/// The index of the first byte at or after `i` that ends the fast string loop (see
/// [`special_bytes`]), or `buf.len()`.
#[inline(always)]
fn find_special(buf: &[u8], mut i: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{
            _mm_cmpeq_epi8, _mm_cmplt_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128,
            _mm_set1_epi8,
        };
        // SSE2 is part of the x86_64 baseline: 16 bytes per step. A signed compare below 0x20
        // catches control characters and every byte >= 0x80 (negative as i8) at once.
        while i + 16 <= buf.len() {
            // SAFETY: `i + 16 <= buf.len()`, so the unaligned 16-byte load stays inside `buf`;
            // the intrinsics need only SSE2, which every x86_64 CPU has.
            let mask = unsafe {
                let v = _mm_loadu_si128(buf.as_ptr().add(i).cast());
                let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
                let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
                let low_or_high = _mm_cmplt_epi8(v, _mm_set1_epi8(0x20));
                _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, backslash), low_or_high))
            };
            if mask != 0 {
                return i + mask.trailing_zeros() as usize;
            }
            i += 16;
        }
    }
    while let Some(chunk) = buf.get(i..i + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let m = special_bytes(u64::from_le_bytes(word));
        if m != 0 {
            return i + (m.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while let Some(&b) = buf.get(i) {
        if matches!(b, b'"' | b'\\' | 0..=0x1f | 0x80..=0xff) {
            return i;
        }
        i += 1;
    }
    i
}

/// The window [`scalar_len`], [`Lanes::marks`] and [`value_end`] read: a value that ends inside
/// it is skipped without a bounds check per byte.
pub(crate) const WINDOW: usize = 32;

/// How a window is classified: per byte, as bit `i` of two masks, `special` for `"`, `\\`, a
/// control character or a non-ASCII byte (what ends the plain run of a string) and `digit` for
/// `0`-`9`; the four [`Marks`] the skip loop searches; and which bytes of a key window equal a
/// predicted key's text. [`Baseline`] runs on every CPU; [`Avx2`] is chosen at start-up where
/// the CPU has AVX2.
pub(crate) trait Lanes: Copy {
    /// The `special` and `digit` masks of `w`: by default from [`Lanes::marks`]. The baseline
    /// computes them directly, for [`Scanner::skip_value_fast`].
    ///
    /// # Safety
    /// The CPU must have the features the implementation is compiled for.
    #[inline(always)]
    unsafe fn masks(self, w: &[u8; WINDOW]) -> (u32, u32) {
        // SAFETY: the caller's promise.
        let m = unsafe { self.marks(w) };
        (m.quote | m.bad, m.digit)
    }

    /// Bit `i` set where `a[i] == b[i]`.
    ///
    /// # Safety
    /// As for [`Lanes::masks`].
    unsafe fn equal(self, a: &[u8; WINDOW], b: &[u8; WINDOW]) -> u32;

    /// Four masks of `w`: `"`, `,`, the bytes a plain string may not hold unescaped or
    /// unchecked (`\\`, control characters, non-ASCII) and digits.
    ///
    /// # Safety
    /// As for [`Lanes::masks`].
    unsafe fn marks(self, w: &[u8; WINDOW]) -> Marks;
}

/// What [`Lanes::marks`] finds in a window, one bit per byte.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Marks {
    pub(crate) quote: u32,
    pub(crate) comma: u32,
    pub(crate) bad: u32,
    pub(crate) digit: u32,
}

/// SSE2 (part of the x86_64 baseline), or plain loops on other targets.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Baseline;

impl Lanes for Baseline {
    #[inline(always)]
    unsafe fn masks(self, w: &[u8; WINDOW]) -> (u32, u32) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{
                __m128i, _mm_and_si128, _mm_cmpeq_epi8, _mm_cmpgt_epi8, _mm_cmplt_epi8,
                _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
            };
            // SAFETY: both 16-byte loads are inside the 32-byte array; SSE2 is part of the
            // x86_64 baseline. Signed compares: bytes >= 0x80 are negative, so "below 0x20"
            // also catches them, and they are never digits.
            unsafe {
                let half = |v: __m128i| {
                    let special = _mm_or_si128(
                        _mm_or_si128(
                            _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8)),
                            _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8)),
                        ),
                        _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)),
                    );
                    let digit = _mm_and_si128(
                        _mm_cmpgt_epi8(v, _mm_set1_epi8(b'0' as i8 - 1)),
                        _mm_cmplt_epi8(v, _mm_set1_epi8(b'9' as i8 + 1)),
                    );
                    (
                        _mm_movemask_epi8(special) as u32 & 0xffff,
                        _mm_movemask_epi8(digit) as u32 & 0xffff,
                    )
                };
                let (s0, d0) = half(_mm_loadu_si128(w.as_ptr().cast()));
                let (s1, d1) = half(_mm_loadu_si128(w.as_ptr().add(16).cast()));
                (s0 | s1 << 16, d0 | d1 << 16)
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let (mut special, mut digit) = (0u32, 0u32);
            for (i, &b) in w.iter().enumerate() {
                special |= (matches!(b, b'"' | b'\\' | 0..=0x1f | 0x80..=0xff) as u32) << i;
                digit |= (b.is_ascii_digit() as u32) << i;
            }
            (special, digit)
        }
    }

    #[inline(always)]
    unsafe fn equal(self, a: &[u8; WINDOW], b: &[u8; WINDOW]) -> u32 {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8};
            // SAFETY: four 16-byte loads inside two 32-byte arrays; SSE2 is baseline.
            unsafe {
                let lo = _mm_cmpeq_epi8(
                    _mm_loadu_si128(a.as_ptr().cast()),
                    _mm_loadu_si128(b.as_ptr().cast()),
                );
                let hi = _mm_cmpeq_epi8(
                    _mm_loadu_si128(a.as_ptr().add(16).cast()),
                    _mm_loadu_si128(b.as_ptr().add(16).cast()),
                );
                (_mm_movemask_epi8(lo) as u32 & 0xffff) | (_mm_movemask_epi8(hi) as u32) << 16
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let mut eq = 0u32;
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                eq |= ((x == y) as u32) << i;
            }
            eq
        }
    }

    #[inline(always)]
    unsafe fn marks(self, w: &[u8; WINDOW]) -> Marks {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{
                __m128i, _mm_and_si128, _mm_cmpeq_epi8, _mm_cmpgt_epi8, _mm_cmplt_epi8,
                _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
            };
            // SAFETY: both 16-byte loads are inside the 32-byte array; SSE2 is baseline.
            unsafe {
                let m = |v: __m128i| _mm_movemask_epi8(v) as u32 & 0xffff;
                let half = |v: __m128i| {
                    let bad = _mm_or_si128(
                        _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8)),
                        _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)),
                    );
                    let digit = _mm_and_si128(
                        _mm_cmpgt_epi8(v, _mm_set1_epi8(b'0' as i8 - 1)),
                        _mm_cmplt_epi8(v, _mm_set1_epi8(b'9' as i8 + 1)),
                    );
                    (
                        m(_mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8))),
                        m(_mm_cmpeq_epi8(v, _mm_set1_epi8(b',' as i8))),
                        m(bad),
                        m(digit),
                    )
                };
                let lo = half(_mm_loadu_si128(w.as_ptr().cast()));
                let hi = half(_mm_loadu_si128(w.as_ptr().add(16).cast()));
                Marks {
                    quote: lo.0 | hi.0 << 16,
                    comma: lo.1 | hi.1 << 16,
                    bad: lo.2 | hi.2 << 16,
                    digit: lo.3 | hi.3 << 16,
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let mut m = Marks {
                quote: 0,
                comma: 0,
                bad: 0,
                digit: 0,
            };
            for (i, &b) in w.iter().enumerate() {
                m.quote |= ((b == b'"') as u32) << i;
                m.comma |= ((b == b',') as u32) << i;
                m.bad |= (matches!(b, b'\\' | 0..=0x1f | 0x80..=0xff) as u32) << i;
                m.digit |= (b.is_ascii_digit() as u32) << i;
            }
            m
        }
    }
}

/// AVX2 (with BMI1 and BMI2): a window in one register. Only constructed by [`Avx2::detect`].
#[cfg(target_arch = "x86_64")]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Avx2(());

#[cfg(target_arch = "x86_64")]
impl Avx2 {
    /// `Some` where the CPU has AVX2, and BMI1 and BMI2 (every AVX2 CPU made has them; the
    /// skip loop uses their `tzcnt`, `shlx` and `bzhi`).
    pub(crate) fn detect() -> Option<Self> {
        (std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("bmi1")
            && std::arch::is_x86_feature_detected!("bmi2"))
        .then_some(Self(()))
    }
}

#[cfg(target_arch = "x86_64")]
impl Lanes for Avx2 {
    #[inline]
    #[target_feature(enable = "avx2,bmi1,bmi2")]
    unsafe fn equal(self, a: &[u8; WINDOW], b: &[u8; WINDOW]) -> u32 {
        use std::arch::x86_64::{_mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_movemask_epi8};
        // SAFETY: 32-byte loads of 32-byte arrays; the caller guarantees AVX2.
        unsafe {
            _mm256_movemask_epi8(_mm256_cmpeq_epi8(
                _mm256_loadu_si256(a.as_ptr().cast()),
                _mm256_loadu_si256(b.as_ptr().cast()),
            )) as u32
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,bmi1,bmi2")]
    unsafe fn marks(self, w: &[u8; WINDOW]) -> Marks {
        use std::arch::x86_64::{
            _mm256_and_si256, _mm256_cmpeq_epi8, _mm256_cmpgt_epi8, _mm256_loadu_si256,
            _mm256_movemask_epi8, _mm256_or_si256, _mm256_set1_epi8,
        };
        // SAFETY: one 32-byte load of a 32-byte array; the caller guarantees AVX2.
        unsafe {
            let v = _mm256_loadu_si256(w.as_ptr().cast());
            let bad = _mm256_or_si256(
                _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'\\' as i8)),
                _mm256_cmpgt_epi8(_mm256_set1_epi8(0x20), v),
            );
            let digit = _mm256_and_si256(
                _mm256_cmpgt_epi8(v, _mm256_set1_epi8(b'0' as i8 - 1)),
                _mm256_cmpgt_epi8(_mm256_set1_epi8(b'9' as i8 + 1), v),
            );
            Marks {
                quote: _mm256_movemask_epi8(_mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'"' as i8)))
                    as u32,
                comma: _mm256_movemask_epi8(_mm256_cmpeq_epi8(v, _mm256_set1_epi8(b',' as i8)))
                    as u32,
                bad: _mm256_movemask_epi8(bad) as u32,
                digit: _mm256_movemask_epi8(digit) as u32,
            }
        }
    }
}

/// The end of the run of digits in `digit` (a window's digit mask) that starts at `at`.
#[inline(always)]
fn run_end(digit: u32, at: usize) -> usize {
    // `at` is at most WINDOW; the bits above the window read as "not a digit", so the run
    // stops at the window's end at the latest.
    at + (!((digit as u64) >> at)).trailing_zeros() as usize
}

/// The length of the string, number or literal at the start of `w` if it is valid and ends
/// inside the window; 0 when the window cannot tell (escapes, non-ASCII
/// text, long values, containers, whitespace, anything invalid). Those take the full path,
/// which also words the errors, so this needs no error handling of its own.
///
/// # Safety
/// The CPU must have what `lanes` needs (see [`Lanes`]).
#[inline(always)]
pub(crate) unsafe fn scalar_len<L: Lanes>(lanes: L, w: &[u8; WINDOW]) -> usize {
    let first = w[0];
    match first {
        b'"' => {
            // SAFETY: the caller's promise.
            let (special, _) = unsafe { lanes.masks(w) };
            let t = (special & !1).trailing_zeros() as usize;
            if t < WINDOW && w[t] == b'"' {
                t + 1
            } else {
                0
            }
        }
        b'-' | b'0'..=b'9' => {
            // SAFETY: the caller's promise.
            let (_, digit) = unsafe { lanes.masks(w) };
            number_len(w, digit)
        }
        b't' if w[..4] == *b"true" => 4,
        b'f' if w[..5] == *b"false" => 5,
        b'n' if w[..4] == *b"null" => 4,
        _ => 0,
    }
}

/// The length of the JSON number at the start of `w` (`digit` is the window's digit mask) when
/// it ends inside the window; else 0 (not a number, or it may go on past the window).
#[inline(always)]
fn number_len(w: &[u8; WINDOW], digit: u32) -> usize {
    let s = (w[0] == b'-') as usize;
    let mut e = run_end(digit, s);
    // At least one digit, and no leading zero.
    if e == s || (w[s] == b'0' && e > s + 1) || e >= WINDOW {
        return 0;
    }
    if w[e] == b'.' {
        let f = e + 1;
        e = run_end(digit, f);
        if e == f || e >= WINDOW {
            return 0;
        }
    }
    if w[e] | 0x20 == b'e' {
        let mut f = e + 1;
        if f < WINDOW && matches!(w[f], b'+' | b'-') {
            f += 1;
        }
        e = run_end(digit, f);
        if e == f || e >= WINDOW {
            return 0;
        }
    }
    e
}

/// The bytes [`value_end`] reads: a value's first byte and the [`WINDOW`] bytes after it.
pub(crate) const VALUE_WINDOW: usize = WINDOW + 1;

/// [`value_end`] as a length: that of the value at the start of `w`, or 0 (the tests' form).
///
/// # Safety
/// The CPU must have what `lanes` needs (see [`Lanes`]).
#[cfg(test)]
#[inline(always)]
pub(crate) unsafe fn value_before_comma<L: Lanes>(lanes: L, w: &[u8; VALUE_WINDOW]) -> usize {
    // SAFETY: the caller's promise.
    unsafe { value_end(lanes, w, |k, t| k + t, 0) }
}

/// Where the string, number or literal at the start of `w` ends, when it is valid and directly
/// followed by `,` inside the window; `none` when not. Like [`scalar_len`], but the value's end
/// is found with one search, for the closing quote or for the comma, and the value is checked
/// beside that search rather than before it: the end is what the next pair waits for.
///
/// The end comes as `at(k, t)`, the comma at `k + t`: `k` a constant of the value's kind and
/// `t` what the search found, so that the skip loop can add `k` to its base position before
/// the search ends and the next pair waits for one add only (about 4 cycles less a pair than
/// adding the pieces after the search).
///
/// # Safety
/// The CPU must have what `lanes` needs (see [`Lanes`]).
#[inline(always)]
pub(crate) unsafe fn value_end<L: Lanes, R>(
    lanes: L,
    w: &[u8; VALUE_WINDOW],
    at: impl FnOnce(usize, usize) -> R,
    none: R,
) -> R {
    match VALUE_START[w[0] as usize] {
        STRING => {
            // Searched from after the opening quote, so the first quote found closes it.
            let Some(s) = w.last_chunk::<WINDOW>() else {
                return none;
            };
            // SAFETY: the caller's promise.
            let m = unsafe { lanes.marks(s) };
            let t = m.quote.trailing_zeros() as usize;
            // A closing quote, nothing to check or unescape before it, then the comma.
            if t < WINDOW - 1 && m.bad & ((1u32 << t) - 1) == 0 && s[t + 1] == b',' {
                at(2, t)
            } else {
                none
            }
        }
        NUMBER => {
            let Some(s) = w.first_chunk::<WINDOW>() else {
                return none;
            };
            // SAFETY: the caller's promise.
            let m = unsafe { lanes.marks(s) };
            let t = m.comma.trailing_zeros() as usize;
            if t >= WINDOW {
                return none;
            }
            // The common shapes first, from the masks alone: digits, or digits `.` digits,
            // without a leading zero; anything else (signs, exponents) by the grammar.
            let other = !m.digit & ((1u32 << t) - 1);
            let dot = other.trailing_zeros() as usize;
            let plain = other == 0 || (other & (other - 1) == 0 && s[dot & 31] == b'.');
            let simple = plain && dot != 0 && dot + 1 != t && (s[0] != b'0' || dot == 1 || t == 1);
            if simple || number_len(s, m.digit) == t {
                at(0, t)
            } else {
                none
            }
        }
        LITERAL => {
            // The length from the first byte alone (`false` or `true`/`null`), checked beside:
            // a stream's booleans are random, so neither a branch on which literal it is nor
            // a length that waits for the check.
            let f = (w[0] == b'f') as usize;
            if literal_before_comma(w) == 4 + f {
                at(4, f)
            } else {
                none
            }
        }
        _ => none,
    }
}

/// Whether a value starting with byte `b` may be a scalar (a string, number or literal).
#[inline(always)]
pub(crate) fn starts_scalar(b: u8) -> bool {
    VALUE_START[b as usize] != 0
}

/// What a value's first byte starts, for [`value_end`]: one load and one jump instead
/// of a chain of compares.
const VALUE_START: [u8; 256] = {
    let mut t = [0u8; 256];
    t[b'"' as usize] = STRING;
    t[b'-' as usize] = NUMBER;
    let mut d = b'0';
    while d <= b'9' {
        t[d as usize] = NUMBER;
        d += 1;
    }
    t[b't' as usize] = LITERAL;
    t[b'f' as usize] = LITERAL;
    t[b'n' as usize] = LITERAL;
    t
};
const STRING: u8 = 1;
const NUMBER: u8 = 2;
const LITERAL: u8 = 3;

/// The length of `true`, `false` or `null` directly followed by `,` at the start of `w`, else
/// 0; without a branch on which one it is (a stream's booleans are random, and a mispredicted
/// branch costs more than the three compares).
#[inline(always)]
fn literal_before_comma(w: &[u8; VALUE_WINDOW]) -> usize {
    let word = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], 0, 0]);
    let five = word & 0xff_ffff_ffff;
    let six = word & 0xffff_ffff_ffff;
    let is4 = (five == u64::from_le_bytes(*b"true,\0\0\0"))
        | (five == u64::from_le_bytes(*b"null,\0\0\0"));
    let is5 = six == u64::from_le_bytes(*b"false,\0\0");
    4 * is4 as usize + 5 * is5 as usize
}

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

fn hex(b: u8) -> Option<u16> {
    match b {
        b'0'..=b'9' => Some((b - b'0') as u16),
        b'a'..=b'f' => Some((b - b'a' + 10) as u16),
        b'A'..=b'F' => Some((b - b'A' + 10) as u16),
        _ => None,
    }
}

/// The code unit of `\uXXXX` whose backslash is at `i`.
fn hex4(buf: &[u8], i: usize) -> Result<u16, DecodeError> {
    let Some(digits) = buf.get(i + 2..i + 6) else {
        return Err(syntax(i, "truncated \\u escape"));
    };
    let mut v = 0u16;
    for &d in digits {
        match hex(d) {
            Some(h) => v = (v << 4) | h,
            None => return Err(syntax(i, "invalid \\u escape (needs four hex digits)")),
        }
    }
    Ok(v)
}

/// Validates the escape whose backslash is at `i`; returns the index after it.
#[cold]
fn check_escape(buf: &[u8], i: usize) -> Result<usize, DecodeError> {
    match buf.get(i + 1) {
        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => Ok(i + 2),
        Some(b'u') => {
            let unit = hex4(buf, i)?;
            match unit {
                0xD800..=0xDBFF => {
                    if buf.get(i + 6) == Some(&b'\\') && buf.get(i + 7) == Some(&b'u') {
                        let low = hex4(buf, i + 6)?;
                        if (0xDC00..=0xDFFF).contains(&low) {
                            return Ok(i + 12);
                        }
                    }
                    Err(syntax(i, "lone high surrogate in a \\u escape"))
                }
                0xDC00..=0xDFFF => Err(syntax(i, "lone low surrogate in a \\u escape")),
                _ => Ok(i + 6),
            }
        }
        None => Err(syntax(i, "unterminated string")),
        _ => Err(syntax(i, "invalid escape in a string")),
    }
}

/// Validates the UTF-8 sequence whose first byte (>= 0x80) is at `i`; returns the index after.
#[inline]
fn check_utf8(buf: &[u8], i: usize) -> Result<usize, DecodeError> {
    let cont = |k: usize| matches!(buf.get(i + k), Some(0x80..=0xBF));
    let in_range =
        |k: usize, lo: u8, hi: u8| matches!(buf.get(i + k), Some(&b) if b >= lo && b <= hi);
    let ok = match buf[i] {
        0xC2..=0xDF => cont(1).then_some(2),
        0xE0 => (in_range(1, 0xA0, 0xBF) && cont(2)).then_some(3),
        0xE1..=0xEC | 0xEE..=0xEF => (cont(1) && cont(2)).then_some(3),
        0xED => (in_range(1, 0x80, 0x9F) && cont(2)).then_some(3),
        0xF0 => (in_range(1, 0x90, 0xBF) && cont(2) && cont(3)).then_some(4),
        0xF1..=0xF3 => (cont(1) && cont(2) && cont(3)).then_some(4),
        0xF4 => (in_range(1, 0x80, 0x8F) && cont(2) && cont(3)).then_some(4),
        _ => None,
    };
    match ok {
        Some(n) => Ok(i + n),
        None => Err(syntax(i, "invalid UTF-8 in a string")),
    }
}

/// Appends the unescaped form of a validated string body to `out`.
pub(crate) fn unescape(body: &[u8], out: &mut Vec<u8>) {
    let mut i = 0;
    while i < body.len() {
        let Some(rel) = body[i..].iter().position(|&b| b == b'\\') else {
            out.extend_from_slice(&body[i..]);
            return;
        };
        out.extend_from_slice(&body[i..i + rel]);
        i += rel;
        let c = body.get(i + 1).copied().unwrap_or(b'\\');
        let simple = match c {
            b'"' => Some(b'"'),
            b'\\' => Some(b'\\'),
            b'/' => Some(b'/'),
            b'b' => Some(0x08),
            b'f' => Some(0x0C),
            b'n' => Some(b'\n'),
            b'r' => Some(b'\r'),
            b't' => Some(b'\t'),
            _ => None,
        };
        if let Some(s) = simple {
            out.push(s);
            i += 2;
            continue;
        }
        // `\uXXXX`, possibly a surrogate pair; the scanner has validated both.
        let unit = hex4(body, i).unwrap_or(0xFFFD);
        let (code, used) = if (0xD800..=0xDBFF).contains(&unit) {
            let low = hex4(body, i + 6).unwrap_or(0xDC00);
            (
                0x10000 + (((unit as u32) - 0xD800) << 10) + ((low as u32) - 0xDC00),
                12,
            )
        } else {
            (unit as u32, 6)
        };
        let ch = char::from_u32(code).unwrap_or('\u{FFFD}');
        let mut utf8 = [0u8; 4];
        out.extend_from_slice(ch.encode_utf8(&mut utf8).as_bytes());
        i += used;
    }
}

#[cfg(test)]
mod tests {
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
