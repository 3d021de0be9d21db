//! What the file connector's readers hand the decode stage, one block at a time.

use std::sync::Arc;

use weir_codec::ContainerHeader;

/// What a file feed's next block is ([`FileFeed::next_block`](super::file::FileFeed::next_block)).
#[derive(Debug)]
pub(crate) enum BlockStatus {
    /// `buf[first..len]` holds whole frames of `file`, the first at byte `offset` of the file.
    Block {
        /// The file.
        file: Arc<str>,
        /// File offset of `buf[first]`.
        offset: u64,
        /// Where the first frame begins in the buffer.
        first: usize,
        /// End of the last frame in the buffer.
        len: usize,
        /// The file's header, when the frames are an Avro container file's blocks.
        container: Option<Arc<ContainerHeader>>,
    },
    /// Bytes that cannot be read as messages: a file that ends inside a frame, or a corrupt
    /// frame header (the rest of that file is skipped: no frame boundary can be trusted).
    Bad {
        /// The file.
        file: Arc<str>,
        /// File offset of the frame.
        offset: u64,
        /// What is wrong.
        reason: String,
        /// The bytes that were dropped (at most 64 KiB of them, for a dead letter).
        bytes: Vec<u8>,
    },
    /// No data now, more may come (follow mode).
    Wait,
    /// Every file has been read.
    End,
}
