//! The SIMD lanes and the value windows: classifying 32 bytes at a time (`Lanes`: a portable
//! baseline and AVX2), and measuring a short scalar value, or a value up to its comma, inside a
//! fixed window without a per-byte loop. The key-order skip (`shape.rs`) runs on these.

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
