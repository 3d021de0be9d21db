//! How messages are laid out in a file: `varint` (a protobuf varint length before each message,
//! as `writeDelimitedTo` writes them), `u32be` (a 4-byte big-endian length) or `lines` (one
//! message per line; `\r\n` accepted, blank lines skipped).

use std::fmt;
use std::str::FromStr;

/// The framing of messages in a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// A base-128 varint length, then the message.
    Varint,
    /// A 4-byte big-endian length, then the message.
    U32Be,
    /// One message per line.
    Lines,
    /// An Avro object container file: a header, then blocks of datums. A frame is one block
    /// (its count and size, its data, its 16-byte sync marker); the message is the block's
    /// data, which a decoder splits into datums. The header is the reader's to skip.
    AvroContainer,
}

/// A message that cannot be written in a framing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// `u32be` holds lengths below 4 GiB only.
    TooLong(usize),
    /// A line cannot hold a newline byte.
    Newline,
    /// A container file is written a block at a time with its header, not a message at a
    /// time.
    Container,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLong(len) => write!(
                f,
                "a message of {len} bytes does not fit a 4-byte length; use 'framing' = 'varint'"
            ),
            Self::Newline => f.write_str(
                "a message contains a newline byte; use 'framing' = 'varint' or 'u32be'",
            ),
            Self::Container => f.write_str(
                "messages cannot be written one by one as an Avro container file; use \
                 'framing' = 'varint', 'u32be' or 'lines'",
            ),
        }
    }
}

impl std::error::Error for FrameError {}

impl FromStr for Framing {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "varint" => Ok(Self::Varint),
            "u32be" => Ok(Self::U32Be),
            "lines" => Ok(Self::Lines),
            "avro-container" => Ok(Self::AvroContainer),
            _ => Err(format!(
                "unknown framing '{s}': expected 'varint', 'u32be', 'lines' or 'avro-container'"
            )),
        }
    }
}

impl fmt::Display for Framing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Varint => "varint",
            Self::U32Be => "u32be",
            Self::Lines => "lines",
            Self::AvroContainer => "avro-container",
        })
    }
}

/// One step of reading frames from a buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A whole message: `buf[start..end]`; the next frame begins at `next`.
    Message {
        /// First byte of the message.
        start: usize,
        /// One past its last byte.
        end: usize,
        /// Where the next frame begins.
        next: usize,
    },
    /// A frame that produced no message (a blank line); the next frame begins at `next`.
    Empty {
        /// Where the next frame begins.
        next: usize,
    },
    /// The buffer ends inside this frame.
    Partial {
        /// The message length the frame header declares, when the header is whole.
        message_len: Option<u64>,
        /// The header's own length in bytes (0 for lines).
        header_len: usize,
    },
    /// The frame header is malformed; nothing after it can be trusted.
    Corrupt(String),
}

impl Frame {
    /// For a [`Frame::Partial`] with a known length: the bytes the whole frame takes, header
    /// included, saturating at `u64::MAX` (a declared length near 2^64 must not wrap around).
    pub fn needed(&self) -> Option<u64> {
        match *self {
            Self::Partial {
                message_len: Some(len),
                header_len,
            } => Some(len.saturating_add(header_len as u64)),
            _ => None,
        }
    }
}

impl Framing {
    /// Reads the frame starting at `buf[at..]`. `at_eof` says no more bytes will come, so a
    /// last line without its newline is still a message.
    #[inline]
    pub fn frame(self, buf: &[u8], at: usize, at_eof: bool) -> Frame {
        let rest = &buf[at..];
        match self {
            Self::Varint => {
                let mut len: u64 = 0;
                for i in 0..10 {
                    let Some(&b) = rest.get(i) else {
                        return Frame::Partial {
                            message_len: None,
                            header_len: 0,
                        };
                    };
                    len |= u64::from(b & 0x7f) << (7 * i);
                    if b < 0x80 {
                        return whole(at, i + 1, len, buf.len());
                    }
                }
                Frame::Corrupt("length prefix is a varint longer than 10 bytes".into())
            }
            Self::U32Be => match rest.get(..4) {
                Some(h) => whole(
                    at,
                    4,
                    u64::from(u32::from_be_bytes([h[0], h[1], h[2], h[3]])),
                    buf.len(),
                ),
                None => Frame::Partial {
                    message_len: None,
                    header_len: 0,
                },
            },
            Self::Lines => match memchr::memchr(b'\n', rest) {
                Some(i) => {
                    let mut end = at + i;
                    if end > at && buf[end - 1] == b'\r' {
                        end -= 1;
                    }
                    line(at, end, at + i + 1, buf)
                }
                None if at_eof && !rest.is_empty() => line(at, buf.len(), buf.len(), buf),
                None => Frame::Partial {
                    message_len: None,
                    header_len: 0,
                },
            },
            Self::AvroContainer => match block_head(buf, at) {
                Ok(Some(head)) => {
                    // The sync marker follows the data.
                    match whole(at, head.header_len, head.size.saturating_add(16), buf.len()) {
                        Frame::Message { start, next, .. } => Frame::Message {
                            start,
                            end: next - 16,
                            next,
                        },
                        partial => partial,
                    }
                }
                Ok(None) => Frame::Partial {
                    message_len: None,
                    header_len: 0,
                },
                Err(reason) => Frame::Corrupt(reason),
            },
        }
    }

    /// Appends `message` to `out` as one frame.
    pub fn write(self, out: &mut Vec<u8>, message: &[u8]) -> Result<(), FrameError> {
        match self {
            Self::Varint => put_varint(out, message.len() as u64),
            Self::U32Be => {
                let len =
                    u32::try_from(message.len()).map_err(|_| FrameError::TooLong(message.len()))?;
                out.extend_from_slice(&len.to_be_bytes());
            }
            Self::Lines => {
                if memchr::memchr(b'\n', message).is_some() {
                    return Err(FrameError::Newline);
                }
            }
            Self::AvroContainer => return Err(FrameError::Container),
        }
        out.extend_from_slice(message);
        if self == Self::Lines {
            out.push(b'\n');
        }
        Ok(())
    }
}

/// An Avro container block's header: its datum count and where its data lies in the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHead {
    /// How many datums the block holds.
    pub count: u64,
    /// The bytes its count and size take (its data begins here).
    pub header_len: usize,
    /// Its data's length (compressed).
    pub size: u64,
}

/// Reads an Avro container block's count and size at `bytes[at..]`. `Ok(None)`: the bytes end first.
pub fn block_head(bytes: &[u8], at: usize) -> Result<Option<BlockHead>, String> {
    let mut pos = at;
    let head = |pos: &mut usize| read_zigzag(bytes, pos).map_err(str::to_string);
    let Some(count) = head(&mut pos)? else {
        return Ok(None);
    };
    let Some(size) = head(&mut pos)? else {
        return Ok(None);
    };
    if count < 0 || size < 0 {
        return Err(format!(
            "a block declares a negative count ({count}) or size ({size})"
        ));
    }
    Ok(Some(BlockHead {
        count: count as u64,
        header_len: pos - at,
        size: size as u64,
    }))
}

/// An Avro zigzag varint `long` at `bytes[*pos..]`, moving `pos` past it; `None` when the
/// bytes end inside it.
pub(crate) fn read_zigzag(bytes: &[u8], pos: &mut usize) -> Result<Option<i64>, &'static str> {
    let mut v: u64 = 0;
    for i in 0..10 {
        let Some(&b) = bytes.get(*pos + i) else {
            return Ok(None);
        };
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            *pos += i + 1;
            return Ok(Some((v >> 1) as i64 ^ -((v & 1) as i64)));
        }
    }
    Err("a varint longer than 10 bytes")
}

/// Appends `v` as a protobuf base-128 varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline]
fn whole(at: usize, header: usize, len: u64, buf_len: usize) -> Frame {
    let start = at + header;
    // `len` comes from the file: compare it with what is there before any arithmetic on it.
    if len <= buf_len.saturating_sub(start) as u64 {
        let end = start + len as usize;
        Frame::Message {
            start,
            end,
            next: end,
        }
    } else {
        Frame::Partial {
            message_len: Some(len),
            header_len: header,
        }
    }
}

#[inline]
fn line(start: usize, end: usize, next: usize, buf: &[u8]) -> Frame {
    if buf[start..end].iter().all(|b| b.is_ascii_whitespace()) {
        Frame::Empty { next }
    } else {
        Frame::Message { start, end, next }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn avro_container_frames_are_blocks() {
        // count 2 (zigzag 4), size 3 (zigzag 6), three data bytes, a 16-byte sync marker.
        let mut buf = vec![4u8, 6, b'a', b'b', b'c'];
        buf.extend_from_slice(&[9u8; 16]);
        let f = Framing::AvroContainer;
        assert_eq!(
            f.frame(&buf, 0, true),
            Frame::Message {
                start: 2,
                end: 5,
                next: 21
            }
        );
        // Cut inside the sync marker: the whole frame's length is known.
        let cut = f.frame(&buf[..10], 0, true);
        assert_eq!(cut.needed(), Some(21));
        assert_eq!(
            f.frame(&[4u8], 0, false),
            Frame::Partial {
                message_len: None,
                header_len: 0
            }
        );
        // A negative size (zigzag 1 is -1).
        assert!(matches!(f.frame(&[4u8, 1], 0, true), Frame::Corrupt(_)));
        assert_eq!(f.write(&mut Vec::new(), b"x"), Err(FrameError::Container));
    }

    #[test]
    fn varint_frames() {
        let buf = [2u8, b'a', b'b', 0, 0x81, 0x01];
        assert_eq!(
            Framing::Varint.frame(&buf, 0, false),
            Frame::Message {
                start: 1,
                end: 3,
                next: 3
            }
        );
        assert_eq!(
            Framing::Varint.frame(&buf, 3, false),
            Frame::Message {
                start: 4,
                end: 4,
                next: 4
            }
        );
        // 0x81 0x01 = a 129-byte message after a 2-byte header, none of it present.
        let f = Framing::Varint.frame(&buf, 4, true);
        assert_eq!(
            f,
            Frame::Partial {
                message_len: Some(129),
                header_len: 2
            }
        );
        assert_eq!(f.needed(), Some(131));
        assert_eq!(
            Framing::Varint.frame(&[0x80], 0, false),
            Frame::Partial {
                message_len: None,
                header_len: 0
            }
        );
        assert!(matches!(
            Framing::Varint.frame(&[0xff; 11], 0, false),
            Frame::Corrupt(_)
        ));
    }

    #[test]
    fn a_length_near_two_to_the_64_does_not_wrap() {
        // The largest ten-byte varint: 2^64 - 1.
        let mut buf = vec![0xff; 9];
        buf.push(0x01);
        buf.extend_from_slice(b"tail");
        let f = Framing::Varint.frame(&buf, 0, true);
        assert_eq!(
            f,
            Frame::Partial {
                message_len: Some(u64::MAX),
                header_len: 10
            }
        );
        assert_eq!(f.needed(), Some(u64::MAX));
    }

    #[test]
    fn u32be_frames() {
        let buf = [0u8, 0, 0, 1, b'x', 0, 0];
        assert_eq!(
            Framing::U32Be.frame(&buf, 0, false),
            Frame::Message {
                start: 4,
                end: 5,
                next: 5
            }
        );
        assert_eq!(
            Framing::U32Be.frame(&buf, 5, true),
            Frame::Partial {
                message_len: None,
                header_len: 0
            }
        );
    }

    #[test]
    fn line_frames() {
        let buf = b"{}\r\n\n  \n{\"a\":1}";
        assert_eq!(
            Framing::Lines.frame(buf, 0, false),
            Frame::Message {
                start: 0,
                end: 2,
                next: 4
            }
        );
        assert_eq!(
            Framing::Lines.frame(buf, 4, false),
            Frame::Empty { next: 5 }
        );
        assert_eq!(
            Framing::Lines.frame(buf, 5, false),
            Frame::Empty { next: 8 }
        );
        assert!(matches!(
            Framing::Lines.frame(buf, 8, false),
            Frame::Partial { .. }
        ));
        assert_eq!(
            Framing::Lines.frame(buf, 8, true),
            Frame::Message {
                start: 8,
                end: 15,
                next: 15
            }
        );
    }

    #[test]
    fn written_frames_read_back() {
        let messages: [&[u8]; 4] = [b"", b"a", &[7u8; 300], b"{\"k\":1}"];
        for framing in [Framing::Varint, Framing::U32Be, Framing::Lines] {
            let mut out = Vec::new();
            for m in &messages {
                framing.write(&mut out, m).unwrap();
            }
            let mut at = 0;
            let mut read = Vec::new();
            while at < out.len() {
                match framing.frame(&out, at, true) {
                    Frame::Message { start, end, next } => {
                        read.push(out[start..end].to_vec());
                        at = next;
                    }
                    Frame::Empty { next } => {
                        read.push(Vec::new());
                        at = next;
                    }
                    other => panic!("{framing}: {other:?}"),
                }
            }
            assert_eq!(read, messages.map(<[u8]>::to_vec), "{framing}");
        }
        assert_eq!(
            Framing::Lines.write(&mut Vec::new(), b"a\nb"),
            Err(FrameError::Newline)
        );
    }
}
