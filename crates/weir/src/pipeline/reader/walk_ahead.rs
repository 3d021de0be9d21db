//! The walk ahead: a range's frame starts guessed before its turn.
//!
//! A range's first frame begins where the walk of the range before it ended, so that walk is
//! taken in turn. But a chain of length prefixes is self-synchronising in practice: one begun
//! at any byte reads garbage lengths until it lands on a real frame start, and from there it
//! follows the real frames. So each reader chains through its range from the range's first byte
//! while earlier ranges are still being walked, keeping every start the chains visit. In its
//! turn it walks from the real boundary only until it meets a kept start, then jumps to where
//! that chain stopped. Where the chains never meet the real frames (data whose garbage lengths
//! repeat with the frames), the walk in turn simply walks on, as it would without this.

/// The longest frame a chain ahead takes (header included); a longer length ends the chain and
/// the next begins a byte on. A length read from inside a frame is garbage, and a garbage
/// two-byte varint sends a chain up to 16 KiB on, past a few hundred real frames it could have
/// met; refused, the chains meet the real frames within a few dozen frames of quotes instead of
/// a few thousand. Files of longer frames gain nothing from the walk ahead, but they have so few
/// frames per range that their walk in turn is short anyway.
const AHEAD_FRAME_BYTES: usize = 1 << 10;

/// Chains begun before a walk ahead gives up (each one that stops early starts another a byte
/// on), so that data whose chains do not meet its frames costs little.
const MAX_CHAINS: usize = 1 << 10;

/// Where a frame header sends a chain: the next frame's start, or `None` where the fast walk
/// stops (a long header, or a frame that runs past the bytes read).
pub(super) type Step = fn(&[u8], usize) -> Option<usize>;

/// The frame starts one walk ahead visited, ascending, and where each of its chains stopped.
#[derive(Default)]
pub(super) struct Ahead {
    /// Positions in the buffer where a chain visited a frame header, ascending.
    starts: Vec<usize>,
    /// The chains: their visited starts are `starts[first..]` up to the next chain's `first`,
    /// and `stop` is where the chain left off (at or past the range's end, or a header where
    /// `step` stopped or that declared a frame longer than [`AHEAD_FRAME_BYTES`]).
    chains: Vec<Chain>,
}

#[derive(Clone, Copy)]
struct Chain {
    first: usize,
    stop: usize,
}

impl Ahead {
    /// Chains through the headers in `buf[from..end]`, forgetting the last walk's.
    pub(super) fn walk(&mut self, buf: &[u8], from: usize, end: usize, step: Step) {
        self.starts.clear();
        self.chains.clear();
        let mut at = from;
        while at < end && self.chains.len() < MAX_CHAINS {
            let first = self.starts.len();
            while at < end {
                self.starts.push(at);
                match step(buf, at) {
                    Some(next) if next - at <= AHEAD_FRAME_BYTES => at = next,
                    _ => break,
                }
            }
            self.chains.push(Chain { first, stop: at });
            // A chain that stopped inside the range read a bad length: try the next byte.
            at += 1;
        }
    }

    /// Skips whole frames from `at` (a real frame start) while they begin before `end` and
    /// `step` takes them; once it meets a chain of the walk ahead, it jumps to where that chain
    /// stopped. Returns where it stopped.
    pub(super) fn skip(&self, buf: &[u8], mut at: usize, end: usize, step: Step) -> usize {
        let mut i = self.starts.partition_point(|&s| s < at);
        while at < end {
            while self.starts.get(i).is_some_and(|&s| s < at) {
                i += 1;
            }
            if self.starts.get(i) == Some(&at) {
                // From here the real walk would visit what this chain visited.
                let c = self.chains.partition_point(|c| c.first <= i) - 1;
                at = self.chains[c].stop;
                i = self
                    .chains
                    .get(c + 1)
                    .map_or(self.starts.len(), |n| n.first);
                if at >= end {
                    break;
                }
                // The chain stopped at `at`: step past it here, since the chain refused long
                // frames and the bytes after the range may have been read since.
            }
            match step(buf, at) {
                Some(next) => at = next,
                None => break,
            }
        }
        at
    }
}

/// A frame with a one- or two-byte varint length (a message under 16 KiB) whole in `buf`.
#[inline]
pub(super) fn varint_step(buf: &[u8], at: usize) -> Option<usize> {
    let (len, header) = match (buf.get(at), buf.get(at + 1)) {
        (Some(&b0), _) if b0 < 0x80 => (usize::from(b0), 1),
        (Some(&b0), Some(&b1)) if b1 < 0x80 => (usize::from(b0 & 0x7f) | usize::from(b1) << 7, 2),
        _ => return None,
    };
    Some(at + header + len).filter(|&next| next <= buf.len())
}

/// A u32be frame whole in `buf`.
#[inline]
pub(super) fn u32be_step(buf: &[u8], at: usize) -> Option<usize> {
    let &[a, b, c, d] = buf.get(at..at + 4)?.first_chunk::<4>()?;
    usize::try_from(u32::from_be_bytes([a, b, c, d]))
        .ok()
        .and_then(|len| (at + 4).checked_add(len))
        .filter(|&next| next <= buf.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_codec::Framing;
    use weir_testdata::{QuoteGenerator, Rng};

    /// Frames of generated options quotes.
    fn quotes(n: usize, framing: Framing) -> (Vec<u8>, Vec<usize>) {
        let mut generator = QuoteGenerator::new(7);
        let (mut buf, mut message, mut starts) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..n {
            message.clear();
            generator.next_quote().encode_protobuf(&mut message);
            starts.push(buf.len());
            framing.write(&mut buf, &message).unwrap();
        }
        (buf, starts)
    }

    /// Frames of random bytes and random lengths below `max_len`.
    fn random_frames(rng: &mut Rng, n: usize, max_len: u64, framing: Framing) -> Vec<u8> {
        let mut buf = Vec::new();
        for _ in 0..n {
            let message: Vec<u8> = (0..rng.below(max_len))
                .map(|_| rng.next_u64() as u8)
                .collect();
            framing.write(&mut buf, &message).unwrap();
        }
        buf
    }

    fn plain(buf: &[u8], at: usize, end: usize, step: Step) -> usize {
        Ahead::default().skip(buf, at, end, step)
    }

    #[test]
    fn the_walk_in_turn_ends_where_a_walk_without_ahead_ends() {
        let mut rng = Rng::new(11);
        let mut ahead = Ahead::default();
        for (framing, step) in [
            (Framing::Varint, varint_step as Step),
            (Framing::U32Be, u32be_step as Step),
        ] {
            for round in 0..300 {
                // Short frames, long ones (over 16 KiB the varint fast walk stops), and pure
                // garbage where nothing is a frame.
                let buf = match round % 3 {
                    0 => random_frames(&mut rng, 400, 200, framing),
                    1 => random_frames(&mut rng, 40, 40_000, framing),
                    _ => (0..20_000).map(|_| rng.next_u64() as u8).collect(),
                };
                let from = rng.index(buf.len());
                let end = (from + rng.index(buf.len() - from) + 1).min(buf.len());
                // The walk ahead sees the range only; the walk in turn may see bytes past it.
                ahead.walk(&buf[..end], from, end, step);
                let valid = (end + rng.index(buf.len() - end + 1)).min(buf.len());
                for _ in 0..20 {
                    let at = from + rng.index(end - from);
                    assert_eq!(
                        ahead.skip(&buf[..valid], at, end, step),
                        plain(&buf[..valid], at, end, step),
                        "{framing:?}, round {round}, range {from}..{end}, from {at}"
                    );
                }
            }
        }
    }

    thread_local! {
        static STEPS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    fn counted_varint_step(buf: &[u8], at: usize) -> Option<usize> {
        STEPS.with(|s| s.set(s.get() + 1));
        varint_step(buf, at)
    }

    fn counted_u32be_step(buf: &[u8], at: usize) -> Option<usize> {
        STEPS.with(|s| s.set(s.get() + 1));
        u32be_step(buf, at)
    }

    #[test]
    fn the_walk_in_turn_meets_the_walk_ahead_within_a_few_frames_of_quotes() {
        for (framing, step) in [
            (Framing::Varint, counted_varint_step as Step),
            (Framing::U32Be, counted_u32be_step as Step),
        ] {
            let (buf, starts) = quotes(200_000, framing);
            let range = 1 << 20;
            let mut ahead = Ahead::default();
            let (mut steps_in_turn, mut frames, mut boundary) = (0, 0, 0);
            for from in (0..buf.len()).step_by(range) {
                let end = (from + range).min(buf.len());
                ahead.walk(&buf[..end], from, end, step);
                STEPS.with(|s| s.set(0));
                let next = ahead.skip(&buf, boundary, end, step);
                steps_in_turn += STEPS.with(std::cell::Cell::get);
                assert_eq!(next, plain(&buf, boundary, end, step));
                frames += starts.partition_point(|&s| s < next)
                    - starts.partition_point(|&s| s < boundary);
                boundary = next;
            }
            assert_eq!(boundary, buf.len());
            assert_eq!(frames, starts.len());
            // Without the walk ahead every frame is a step in turn, about 15,000 a range; with
            // it, a few dozen.
            assert!(
                steps_in_turn < frames / 100,
                "{framing:?}: {steps_in_turn} steps in turn for {frames} frames"
            );
        }
    }
}
