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
}

impl FromStr for Framing {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "varint" => Ok(Self::Varint),
            "u32be" => Ok(Self::U32Be),
            "lines" => Ok(Self::Lines),
            _ => Err(format!(
                "unknown framing '{s}': expected 'varint', 'u32be' or 'lines'"
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
    /// The buffer ends inside this frame; `needed` is the whole frame's size when known.
    Partial {
        /// Bytes the frame needs in total, when the header says so.
        needed: Option<u64>,
    },
    /// The frame header is malformed; nothing after it can be trusted.
    Corrupt(String),
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
                        return Frame::Partial { needed: None };
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
                None => Frame::Partial { needed: None },
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
                None => Frame::Partial { needed: None },
            },
        }
    }
}

#[inline]
fn whole(at: usize, header: usize, len: u64, buf_len: usize) -> Frame {
    let start = at + header;
    let total = header as u64 + len;
    if len <= (buf_len - start) as u64 {
        let end = start + len as usize;
        Frame::Message {
            start,
            end,
            next: end,
        }
    } else {
        Frame::Partial {
            needed: Some(total),
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
        // 0x81 0x01 = 129 bytes needed, 0 present.
        assert_eq!(
            Framing::Varint.frame(&buf, 4, true),
            Frame::Partial { needed: Some(131) }
        );
        assert_eq!(
            Framing::Varint.frame(&[0x80], 0, false),
            Frame::Partial { needed: None }
        );
        assert!(matches!(
            Framing::Varint.frame(&[0xff; 11], 0, false),
            Frame::Corrupt(_)
        ));
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
            Frame::Partial { needed: None }
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
        assert_eq!(
            Framing::Lines.frame(buf, 8, false),
            Frame::Partial { needed: None }
        );
        assert_eq!(
            Framing::Lines.frame(buf, 8, true),
            Frame::Message {
                start: 8,
                end: 15,
                next: 15
            }
        );
    }
}
