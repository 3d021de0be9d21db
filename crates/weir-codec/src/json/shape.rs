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

#[cfg(target_arch = "x86_64")]
use super::scan::Avx2;
use super::scan::{value_before_comma, Baseline, Lanes, WINDOW};

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

/// What [`KeyOrder::pair`] found at a pair's start.
pub(crate) enum PairStart {
    /// An unrequested key and its value, skipped: the position after the `,`.
    Skipped(usize),
    /// The predicted key: its text's length (through the `:`) and its entry.
    Key(usize, u32),
    /// Not predicted, or too close to the end: take the full path.
    Unknown,
}

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

/// The length through the `,` of a key text of `len` bytes at the start of `w` and the short
/// scalar value after it, when a `,` directly follows that value; else 0.
///
/// # Safety
/// The CPU must have what `lanes` needs (see [`Lanes`]).
#[inline(always)]
unsafe fn value_through_comma<L: Lanes>(lanes: L, w: &[u8; 2 * KEY_WINDOW], len: usize) -> usize {
    // `len` is at most MAX_TEXT (31): the value's window lies inside `w`.
    let v = len & MAX_TEXT;
    let Some(value) = w.get(v..).and_then(|s| s.first_chunk::<WINDOW>()) else {
        return 0;
    };
    // SAFETY: the caller's promise.
    let n = unsafe { value_before_comma(lanes, value) };
    // n < WINDOW, and value[n] is the comma.
    if n != 0 {
        v + n + 1
    } else {
        0
    }
}

/// One pair of the skip loop: the position after its `,` when the pair at `pos` (at most
/// `limit`, so 64 bytes are readable) has `p`'s key and a short scalar value directly followed
/// by `,`; else 0. `p` must be unrequested.
///
/// # Safety
/// The CPU must have what `lanes` needs (see [`Lanes`]).
#[inline(always)]
unsafe fn step<L: Lanes>(lanes: L, p: &Prediction, buf: &[u8], limit: usize, pos: usize) -> usize {
    if pos > limit {
        return 0;
    }
    let Some(w) = buf[pos..].first_chunk::<{ 2 * KEY_WINDOW }>() else {
        return 0;
    };
    let key = w.first_chunk::<KEY_WINDOW>().unwrap_or(&[0; KEY_WINDOW]);
    // SAFETY: the caller's promise.
    if !unsafe { matches(lanes, key, p) } {
        return 0;
    }
    // `len` is at most MAX_TEXT (31): the value's window lies inside `w`. The next pair starts
    // at `q + n + 1`: that sum is what each pair waits for from the one before.
    let v = p.len as usize & MAX_TEXT;
    let q = pos + v;
    let Some(value) = w.get(v..).and_then(|s| s.first_chunk::<WINDOW>()) else {
        return 0;
    };
    // SAFETY: the caller's promise.
    let n = unsafe { value_before_comma(lanes, value) };
    if n == 0 {
        return 0;
    }
    q + (n + 1)
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
    mut pos: usize,
) -> (usize, usize) {
    // Every pair read starts at or before `limit`.
    let Some(limit) = buf.len().checked_sub(2 * KEY_WINDOW) else {
        return (pos, 0);
    };
    let mut skipped = 0;
    for p in preds {
        if p.entry != UNREQUESTED {
            break;
        }
        // SAFETY: the caller's promise.
        let next = unsafe { step(lanes, p, buf, limit, pos) };
        if next == 0 {
            break;
        }
        pos = next;
        skipped += 1;
    }
    (pos, skipped)
}

/// [`skip_run_with`] compiled for AVX2.
///
/// # Safety
/// The CPU must have AVX2 (an [`Avx2`] value proves it).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
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
        // SAFETY (both): the baseline lanes run on every CPU.
        let hit = match buf.get(pos..).and_then(|s| s.first_chunk::<KEY_WINDOW>()) {
            Some(w) => unsafe { matches(Baseline, w, p) },
            None => unsafe { matches(Baseline, &window_near_end(buf, pos), p) },
        };
        hit.then_some((p.len as usize, p.entry))
    }

    /// The fast path of one pair at `pos`, when its key is the one predicted for `ordinal` of
    /// `scope` and has 64 bytes of input from its opening quote: an unrequested key whose value
    /// is a short scalar directly followed by `,` is skipped whole here (one key comparison and
    /// one value window, no bounds check per byte); any other predicted key is returned with its
    /// entry. [`PairStart::Unknown`] sends the caller to the full path.
    #[inline(always)]
    pub(crate) fn pair(&self, scope: usize, ordinal: usize, buf: &[u8], pos: usize) -> PairStart {
        if ordinal >= MAX_ORDINALS {
            return PairStart::Unknown;
        }
        let (Some(p), Some(w)) = (
            self.slots.get(scope * MAX_ORDINALS + ordinal),
            buf.get(pos..)
                .and_then(|s| s.first_chunk::<{ 2 * KEY_WINDOW }>()),
        ) else {
            return PairStart::Unknown;
        };
        let key = w.first_chunk::<KEY_WINDOW>().unwrap_or(&[0; KEY_WINDOW]);
        // SAFETY (both): the baseline lanes run on every CPU.
        if !unsafe { matches(Baseline, key, p) } {
            return PairStart::Unknown;
        }
        if p.entry == UNREQUESTED {
            let n = unsafe { value_through_comma(Baseline, w, p.len as usize) };
            if n != 0 {
                return PairStart::Skipped(pos + n);
            }
        }
        PairStart::Key(p.len as usize, p.entry)
    }

    /// [`KeyOrder::pair`] in a loop while it skips: a projection's unrequested keys come in
    /// runs, and the loop keeps the position in a register (and uses AVX2 where the CPU has
    /// it). Returns the position and ordinal of the first pair it did not skip.
    #[inline(always)]
    pub(crate) fn skip_run(
        &self,
        scope: usize,
        ordinal: usize,
        buf: &[u8],
        pos: usize,
    ) -> (usize, usize) {
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
    /// the same pair for random values after predicted keys, and the baseline loop agrees with
    /// [`KeyOrder::pair`] one pair at a time.
    #[test]
    fn skip_loops_agree_on_random_pairs() {
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
            "\"a string that is longer than the thirty-two byte window\"",
            "123456789012345678901234567890123",
            " 1",
        ];
        for _ in 0..20_000 {
            let mut k = KeyOrder::new(1);
            let mut msg = b"{".to_vec();
            let keys = 1 + next(12);
            for i in 0..keys {
                let text = format!("\"key_{i}\":");
                let entry = if next(8) == 0 { 3 } else { UNREQUESTED };
                k.record(0, i, text.as_bytes(), entry);
                if i > 0 {
                    msg.push(b',');
                }
                // Now and then the key is not the predicted one.
                if next(30) == 0 {
                    msg.extend_from_slice(b"\"other\":");
                } else {
                    msg.extend_from_slice(text.as_bytes());
                }
                msg.extend_from_slice(VALUES[next(VALUES.len())].as_bytes());
            }
            msg.push(b'}');
            msg.extend(std::iter::repeat_n(b' ', next(70)));
            let preds = &k.slots[..MAX_ORDINALS];
            // SAFETY: the baseline lanes run on every CPU.
            let base = unsafe { skip_run_with(Baseline, preds, &msg, 1) };
            #[cfg(target_arch = "x86_64")]
            if let Some(avx2) = Avx2::detect() {
                // SAFETY: `avx2` exists only where the CPU has AVX2.
                let wide = unsafe { skip_run_avx2(avx2, preds, &msg, 1) };
                assert_eq!(base, wide, "{}", String::from_utf8_lossy(&msg));
            }
            let (mut pos, mut ordinal) = (1, 0);
            while let PairStart::Skipped(next) = k.pair(0, ordinal, &msg, pos) {
                pos = next;
                ordinal += 1;
            }
            assert_eq!(base, (pos, ordinal), "{}", String::from_utf8_lossy(&msg));
        }
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
