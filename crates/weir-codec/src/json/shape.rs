//! The keys of the last object read in each scope, in order: a stream's objects nearly always
//! repeat their producer's key order, so the key at ordinal `k` of an object is predicted to be
//! the key at ordinal `k` of the previous object of the same scope. A key is checked against its
//! prediction with one masked 32-byte comparison of the raw text from the opening quote through
//! the `:`, which replaces scanning the key, checking the colon and looking the key up. A key
//! that differs is scanned and looked up as usual and becomes the prediction for next time.
//!
//! Byte-identical raw text is the same token: the scanner's result for a string (and the colon
//! after it) depends only on those bytes, so a match needs no further validation. Escaped keys
//! are predicted by their raw text too; they unescape to the same key.

#[cfg(test)]
use super::scan::value_before_comma;
#[cfg(target_arch = "x86_64")]
use super::scan::Avx2;
use super::scan::{starts_scalar, value_end, Baseline, Lanes, VALUE_WINDOW};

/// Keys predicted per object; ordinals past this are always looked up.
pub(crate) const MAX_ORDINALS: usize = 128;

/// The longest raw key text (`"`, the key, `"`, whitespace, `:`) a prediction holds. Below 32,
/// so that a value's window always starts inside the 64 bytes [`KeyOrder::skip_run`] reads.
pub(crate) const MAX_TEXT: usize = 31;

/// Bytes compared per key: the text, and what follows it (ignored by the mask).
const KEY_WINDOW: usize = 32;

/// The lookup result a prediction stands for: an entry of the scope, or [`UNREQUESTED`].
pub(crate) const UNREQUESTED: u32 = u32::MAX;

/// One predicted key: its raw text (zero-padded), the mask of the bytes that count (bit `i`
/// for byte `i`), the text's length and the entry it matched.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(16))]
struct Prediction {
    text: [u8; KEY_WINDOW],
    need: u32,
    len: u32,
    entry: u32,
}

/// A prediction no text matches: its first byte must be 0, and a key starts with `"`.
const NEVER: Prediction = Prediction {
    text: [0; KEY_WINDOW],
    need: 1,
    len: 0,
    entry: UNREQUESTED,
};

/// Per scope, the keys of its last object.
#[derive(Debug)]
pub(crate) struct KeyOrder {
    /// `MAX_ORDINALS` predictions per scope, scope by scope.
    slots: Vec<Prediction>,
    /// AVX2 for the skip loop, where the CPU has it (checked once, here).
    #[cfg(target_arch = "x86_64")]
    avx2: Option<Avx2>,
}

/// Whether the 32 bytes `w` start with the text of prediction `p`.
///
/// # Safety
/// The CPU must have what `lanes` needs (see [`Lanes`]).
#[inline(always)]
unsafe fn matches<L: Lanes>(lanes: L, w: &[u8; KEY_WINDOW], p: &Prediction) -> bool {
    // SAFETY: the caller's promise.
    unsafe { lanes.equal(w, &p.text) & p.need == p.need }
}

/// The 32 bytes at `pos`, zero-padded past the end of `buf` (no key text holds a zero byte,
/// and the mask ignores bytes past a prediction's length anyway).
#[cold]
#[inline(never)]
fn window_near_end(buf: &[u8], pos: usize) -> [u8; KEY_WINDOW] {
    let mut bytes = [0u8; KEY_WINDOW];
    let rest = buf.get(pos..).unwrap_or(&[]);
    let n = rest.len().min(KEY_WINDOW);
    bytes[..n].copy_from_slice(&rest[..n]);
    bytes
}

/// One pair of the skip loop: the start of the next pair when the pair at `at` has `p`'s key
/// and a short scalar value directly followed by `,`; else null. `p` must be unrequested.
///
/// The loop carries a pointer rather than an index, and the next pair's start is the value's
/// start plus a constant plus what the search found, so that the chain from one pair to the
/// next is one load, the search and one add (an index cost two adds before the load and three
/// after the search, about a fifth of the time per pair).
///
/// # Safety
/// `at..at + 2 * KEY_WINDOW` must lie inside one readable buffer, and the CPU must have what
/// `lanes` needs (see [`Lanes`]).
#[inline(always)]
unsafe fn step<L: Lanes>(lanes: L, p: &Prediction, at: *const u8) -> *const u8 {
    // SAFETY: the caller's promise: 64 readable bytes from `at`.
    let key = unsafe { &*at.cast::<[u8; KEY_WINDOW]>() };
    // SAFETY: the caller's promise.
    if !unsafe { matches(lanes, key, p) } {
        return std::ptr::null();
    }
    // `len` is at most MAX_TEXT (31): the value's window (33 bytes) lies inside the 64.
    // SAFETY: as above.
    let value = unsafe { at.add(p.len as usize & MAX_TEXT) };
    // SAFETY: as above.
    let w = unsafe { &*value.cast::<[u8; VALUE_WINDOW]>() };
    // SAFETY: the caller's promise; the comma is at `k + t < VALUE_WINDOW`, and the next pair
    // starts after it, at most 64 bytes from `at`.
    unsafe { value_end(lanes, w, |k, t| value.add(k + 1).add(t), std::ptr::null()) }
}

/// The loop of [`KeyOrder::skip_run`] over the predictions from the current ordinal on.
///
/// # Safety
/// The CPU must have what `lanes` needs (see [`Lanes`]).
#[inline(always)]
unsafe fn skip_run_with<L: Lanes>(
    lanes: L,
    preds: &[Prediction],
    buf: &[u8],
    pos: usize,
) -> (usize, usize) {
    // Every pair read starts at or before `last`, so 64 bytes are readable from it.
    let limit = match buf.len().checked_sub(2 * KEY_WINDOW) {
        Some(limit) if pos <= limit => limit,
        _ => return (pos, 0),
    };
    let start = buf.as_ptr();
    // SAFETY: `limit < buf.len()`, so the pointer stays inside `buf`.
    let last = unsafe { start.add(limit) };
    // SAFETY: `pos <= limit < buf.len()`, so the pointer stays inside `buf`.
    let mut at = unsafe { start.add(pos) };
    let mut skipped = 0;
    for p in preds {
        if p.entry != UNREQUESTED || at > last {
            break;
        }
        // SAFETY: `at` lies in `buf` at or before `last`; the caller's promise for the CPU.
        let next = unsafe { step(lanes, p, at) };
        if next.is_null() {
            break;
        }
        at = next;
        skipped += 1;
    }
    // SAFETY: `at` moved forward from `start + pos` by whole pairs inside `buf`.
    (unsafe { at.offset_from(start) } as usize, skipped)
}

/// [`skip_run_with`] compiled for AVX2.
///
/// # Safety
/// The CPU must have AVX2 (an [`Avx2`] value proves it).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,bmi1,bmi2")]
unsafe fn skip_run_avx2(
    lanes: Avx2,
    preds: &[Prediction],
    buf: &[u8],
    pos: usize,
) -> (usize, usize) {
    // SAFETY: this function only runs with AVX2.
    unsafe { skip_run_with(lanes, preds, buf, pos) }
}

impl KeyOrder {
    /// Room for `scopes` scopes, every prediction empty.
    pub(crate) fn new(scopes: usize) -> Self {
        Self {
            slots: vec![NEVER; scopes * MAX_ORDINALS],
            #[cfg(target_arch = "x86_64")]
            avx2: Avx2::detect(),
        }
    }

    /// If the key text at `pos` (its opening quote) is the one predicted for `ordinal` of
    /// `scope`, its length (through the `:`) and the entry it stands for.
    #[inline(always)]
    pub(crate) fn predict(
        &self,
        scope: usize,
        ordinal: usize,
        buf: &[u8],
        pos: usize,
    ) -> Option<(usize, u32)> {
        if ordinal >= MAX_ORDINALS {
            return None;
        }
        let p = self.slots.get(scope * MAX_ORDINALS + ordinal)?;
        let hit = match buf.get(pos..).and_then(|s| s.first_chunk::<KEY_WINDOW>()) {
            // SAFETY: the baseline lanes run on every CPU.
            Some(w) => unsafe { matches(Baseline, w, p) },
            // SAFETY: the baseline lanes run on every CPU.
            None => unsafe { matches(Baseline, &window_near_end(buf, pos), p) },
        };
        hit.then_some((p.len as usize, p.entry))
    }

    /// The fast path of the pair at `pos`, the `ordinal`-th of an object of `scope`: a run of
    /// unrequested keys predicted there, each with a short scalar value directly followed by
    /// `,`, is skipped first ([`KeyOrder::skip_run`]); then the pair where that stopped is
    /// returned with its position and ordinal, and, when its key is the one predicted (one
    /// masked comparison), the key text's length (through the `:`) and its entry, as
    /// [`KeyOrder::predict`] gives them; `None` takes the full path.
    #[inline(always)]
    pub(crate) fn pair(
        &self,
        scope: usize,
        ordinal: usize,
        buf: &[u8],
        pos: usize,
    ) -> (usize, usize, Option<(usize, u32)>) {
        let at = |ordinal: usize| {
            (ordinal < MAX_ORDINALS)
                .then(|| self.slots.get(scope * MAX_ORDINALS + ordinal))
                .flatten()
        };
        let Some(mut p) = at(ordinal) else {
            return (pos, ordinal, None);
        };
        let (mut pos, mut ordinal) = (pos, ordinal);
        // Not for an object or an array (nor at the end): the loop could not skip even one.
        let scalar = |p: &Prediction| {
            buf.get(pos + p.len as usize)
                .is_some_and(|&b| starts_scalar(b))
        };
        if p.entry == UNREQUESTED && p.len != 0 && scalar(p) {
            (pos, ordinal) = self.skip_run(scope, ordinal, buf, pos);
            match at(ordinal) {
                Some(q) => p = q,
                None => return (pos, ordinal, None),
            }
        }
        let Some(key) = buf.get(pos..).and_then(|s| s.first_chunk::<KEY_WINDOW>()) else {
            return (pos, ordinal, None);
        };
        // SAFETY: the baseline lanes run on every CPU.
        if !unsafe { matches(Baseline, key, p) } {
            return (pos, ordinal, None);
        }
        (pos, ordinal, Some((p.len as usize, p.entry)))
    }

    /// The skip loop of [`KeyOrder::pair`]: a projection's unrequested keys come in runs, and
    /// the loop keeps the position in a register (and uses AVX2 where the CPU has it). Returns
    /// the position and ordinal of the first pair it did not skip.
    #[inline(always)]
    fn skip_run(&self, scope: usize, ordinal: usize, buf: &[u8], pos: usize) -> (usize, usize) {
        let base = scope * MAX_ORDINALS;
        let Some(preds) = self
            .slots
            .get(base + ordinal.min(MAX_ORDINALS)..base + MAX_ORDINALS)
        else {
            return (pos, ordinal);
        };
        #[cfg(target_arch = "x86_64")]
        if let Some(avx2) = self.avx2 {
            // SAFETY: `avx2` exists only where the CPU has AVX2.
            let (pos, skipped) = unsafe { skip_run_avx2(avx2, preds, buf, pos) };
            return (pos, ordinal + skipped);
        }
        // SAFETY: the baseline lanes run on every CPU.
        let (pos, skipped) = unsafe { skip_run_with(Baseline, preds, buf, pos) };
        (pos, ordinal + skipped)
    }

    /// Records `text` (a key's raw text through its `:`) as the prediction for `ordinal` of
    /// `scope`; text too long to predict clears the prediction.
    #[cold]
    pub(crate) fn record(&mut self, scope: usize, ordinal: usize, text: &[u8], entry: u32) {
        if ordinal >= MAX_ORDINALS {
            return;
        }
        let Some(slot) = self.slots.get_mut(scope * MAX_ORDINALS + ordinal) else {
            return;
        };
        if text.is_empty() || text.len() > MAX_TEXT {
            *slot = NEVER;
            return;
        }
        let mut p = Prediction {
            text: [0; KEY_WINDOW],
            need: (1u32 << text.len()) - 1,
            len: text.len() as u32,
            entry,
        };
        p.text[..text.len()].copy_from_slice(text);
        *slot = p;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_key_is_predicted_only_for_its_exact_text() {
        let mut k = KeyOrder::new(2);
        let msg = br#"{"price":1,"price2":2,"pric":3}"#;
        assert_eq!(
            k.predict(0, 0, msg, 1),
            None,
            "empty predictions never match"
        );
        k.record(0, 0, b"\"price\":", 7);
        assert_eq!(k.predict(0, 0, msg, 1), Some((8, 7)));
        // A longer key with the same prefix, and a shorter one, do not match.
        assert_eq!(k.predict(0, 0, msg, 11), None);
        assert_eq!(k.predict(0, 0, msg, 22), None);
        // Other ordinals and other scopes are separate.
        assert_eq!(k.predict(0, 1, msg, 1), None);
        assert_eq!(k.predict(1, 0, msg, 1), None);
        // Whitespace before the colon is part of the text.
        k.record(1, 3, b"\"a\" \t:", UNREQUESTED);
        assert_eq!(k.predict(1, 3, b"{\"a\" \t: 1}", 1), Some((6, UNREQUESTED)));
        assert_eq!(k.predict(1, 3, b"{\"a\"\t :1}", 1), None);
    }

    /// The skip loop compiled for the baseline and for AVX2 (where the CPU has it) stops at
    /// the same pair for random values after predicted keys, and that pair is the first one
    /// that is requested, not the predicted key, too close to the end, or not a short scalar
    /// directly followed by `,` (what `value_before_comma` answers; its own test checks it
    /// against the full scanner). [`KeyOrder::pair`] reports the same run.
    #[test]
    fn skip_loops_stop_at_the_first_pair_they_cannot_skip() {
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        const VALUES: &[&str] = &[
            "1",
            "-0",
            "01",
            "12.5",
            "1e9",
            "-2.5E-3",
            "1.",
            "\"\"",
            "\"abc\"",
            "\"a\\\"b\"",
            "\"é\"",
            "\"\u{1}\"",
            "true",
            "false",
            "null",
            "tru",
            "{}",
            "[1]",
            "\"a string of thirty bytes......\"",
            "\"a string of thirty-one bytes...\"",
            "\"a string that is longer than the thirty-two byte window\"",
            "123456789012345678901234567890123",
            " 1",
        ];
        let (mut runs, mut longest) = (0, 0);
        for _ in 0..20_000 {
            let mut k = KeyOrder::new(1);
            let mut msg = b"{".to_vec();
            let keys = 1 + next(12);
            // Per pair: where it starts, whether it can be skipped, its key text's length.
            let mut pairs = Vec::new();
            for i in 0..keys {
                // Key texts of 5 to 31 bytes, so the value's window starts anywhere in the
                // 64 bytes the loop reads.
                let text = format!("\"{:x<w$}\":", format!("k{i}_"), w = 2 + next(27));
                let requested = next(8) == 0;
                k.record(
                    0,
                    i,
                    text.as_bytes(),
                    if requested { 3 } else { UNREQUESTED },
                );
                if i > 0 {
                    msg.push(b',');
                }
                let start = msg.len();
                // Now and then the key is not the predicted one.
                let predicted = next(30) != 0;
                let written = if predicted {
                    text.as_bytes()
                } else {
                    b"\"other\":"
                };
                msg.extend_from_slice(written);
                let value = VALUES[next(VALUES.len())].as_bytes();
                msg.extend_from_slice(value);
                pairs.push((start, requested || !predicted, value, written.len()));
            }
            msg.push(b'}');
            msg.extend(std::iter::repeat_n(b' ', next(70)));
            let skippable = |&(start, stop, value, text): &(usize, bool, &[u8], usize)| {
                if stop || start + 2 * KEY_WINDOW > msg.len() {
                    return false;
                }
                let mut w = [b' '; VALUE_WINDOW];
                let rest = &msg[start + text..];
                w[..rest.len().min(VALUE_WINDOW)]
                    .copy_from_slice(&rest[..rest.len().min(VALUE_WINDOW)]);
                // SAFETY: the baseline lanes run on every CPU.
                let n = unsafe { value_before_comma(Baseline, &w) };
                n == value.len()
            };
            let expected = pairs.iter().take_while(|p| skippable(p)).count();
            let expected_pos = pairs.get(expected).map_or(msg.len(), |p| p.0);
            let preds = &k.slots[..MAX_ORDINALS];
            // SAFETY: the baseline lanes run on every CPU.
            let base = unsafe { skip_run_with(Baseline, preds, &msg, 1) };
            assert_eq!(
                base,
                (expected_pos, expected),
                "{}",
                String::from_utf8_lossy(&msg)
            );
            #[cfg(target_arch = "x86_64")]
            if let Some(avx2) = Avx2::detect() {
                // SAFETY: `avx2` exists only where the CPU has AVX2.
                let wide = unsafe { skip_run_avx2(avx2, preds, &msg, 1) };
                assert_eq!(base, wide, "{}", String::from_utf8_lossy(&msg));
            }
            let (pos, after, start) = k.pair(0, 0, &msg, 1);
            assert_eq!((pos, after), base);
            if after > 0 {
                runs += 1;
                longest = longest.max(after);
            }
            let other = msg[pos..].starts_with(b"\"other");
            match start {
                Some((len, entry)) => {
                    let (_, stop, _, text) = pairs[after];
                    assert!(!other);
                    assert_eq!(len, text);
                    assert_eq!(entry != UNREQUESTED, stop);
                }
                // Past the last pair, not the predicted key, or too close to the end for one
                // key window.
                None => {
                    assert!(after == keys || other || msg.len() < pos + KEY_WINDOW)
                }
            }
        }
        assert!(
            runs > 5_000 && longest >= 6,
            "{runs} runs, the longest {longest}"
        );
    }

    #[test]
    fn text_of_every_length_matches_near_the_end_of_the_buffer() {
        let mut k = KeyOrder::new(1);
        for len in 3..=MAX_TEXT {
            let mut text = vec![b'"'];
            text.extend((0..len - 3).map(|i| b'a' + (i % 26) as u8));
            text.extend_from_slice(b"\":");
            k.record(0, 5, &text, len as u32);
            // At the very end of the buffer, and with bytes after it.
            assert_eq!(k.predict(0, 5, &text, 0), Some((len, len as u32)));
            let mut longer = text.clone();
            longer.extend_from_slice(b"1234567890123456789012345678901234567890");
            assert_eq!(k.predict(0, 5, &longer, 0), Some((len, len as u32)));
            // One byte changed anywhere in the text: no match.
            for i in 0..len {
                let mut changed = longer.clone();
                changed[i] ^= 0x01;
                assert_eq!(k.predict(0, 5, &changed, 0), None, "len {len} byte {i}");
            }
            // The text cut short by the end of the buffer: no match.
            assert_eq!(k.predict(0, 5, &text[..len - 1], 0), None);
        }
        // Too long to predict: cleared.
        k.record(0, 5, &[b'x'; MAX_TEXT + 1], 1);
        assert_eq!(k.predict(0, 5, &[b'x'; 40], 0), None);
        // Past the last predicted ordinal: never.
        k.record(0, MAX_ORDINALS, b"\"a\":", 1);
        assert_eq!(k.predict(0, MAX_ORDINALS, b"\"a\":", 0), None);
    }
}
