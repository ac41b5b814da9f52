//! The pure ring of one output stream: bytes addressed by absolute offset,
//! eviction, and block-mode floors. No lock, no wake-ups, no IO: the owner,
//! [`super::RetainedOutput`], adds those.
//!
//! Each stream keeps at most `capacity` bytes in a ring. In `drop` mode the
//! oldest bytes are evicted to make room, and a reader whose cursor falls
//! below the retained start learns the exact lost range. Block mode's
//! floors live with the stream's log ([`super::log::StreamLog`]), which
//! knows how much the disk holds besides this ring.

use std::collections::VecDeque;

/// Identifies an attachment's registration with the buffers.
pub type ReaderId = u64;

/// One output stream's retained bytes.
#[derive(Debug)]
pub struct StreamBuffer {
    ring: VecDeque<u8>,
    /// Offset of `ring[0]`.
    start: u64,
    capacity: usize,
    /// Set once capture has finished; `end()` is then the final total.
    complete: bool,
}

/// What a reader at some offset gets next; `F` is what the reader's
/// encoder makes of the bytes (their copy, or a frame ready to send).
#[derive(Debug, PartialEq, Eq)]
pub enum Next<F = Vec<u8>> {
    /// Bytes `offset..offset+length` were evicted before this reader got them.
    Dropped { offset: u64, length: u64 },
    /// Bytes are ready at this offset: `length` of them, already encoded by
    /// the caller's function into `frame`.
    Data { offset: u64, length: u64, frame: F },
    /// Nothing new yet.
    Pending,
    /// Capture is complete and the reader has everything.
    End,
}

impl StreamBuffer {
    pub fn new(capacity: usize) -> StreamBuffer {
        StreamBuffer {
            ring: VecDeque::new(),
            start: 0,
            capacity,
            complete: false,
        }
    }

    /// An empty ring whose next byte has offset `offset` (a stream whose
    /// earlier bytes are kept elsewhere, on disk).
    pub fn resume_at(capacity: usize, offset: u64) -> StreamBuffer {
        StreamBuffer {
            start: offset,
            ..StreamBuffer::new(capacity)
        }
    }

    /// Total bytes written to this stream since spawn.
    pub fn end(&self) -> u64 {
        self.start + self.ring.len() as u64
    }

    /// Offset of the oldest retained byte.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Frees every retained byte at once (the process is forgotten): a
    /// reader behind the end learns the range as dropped, then the end.
    pub fn discard(&mut self) {
        self.start = self.end();
        self.ring = VecDeque::new();
        self.complete = true;
    }

    /// True once capture finished.
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// Appends captured bytes, evicting the oldest beyond capacity.
    pub fn push(&mut self, data: &[u8]) {
        if data.len() >= self.capacity {
            // Only the tail fits; everything before it is evicted at once.
            let skip = data.len() - self.capacity;
            self.start = self.end() + skip as u64;
            self.ring.clear();
            self.ring.extend(&data[skip..]);
            return;
        }
        let excess = (self.ring.len() + data.len()).saturating_sub(self.capacity);
        if excess > 0 {
            self.ring.drain(..excess);
            self.start += excess as u64;
        }
        self.ring.extend(data);
    }

    /// Raises the capacity by `extra` bytes (block mode, after the exit).
    pub fn grow(&mut self, extra: usize) {
        self.capacity = self.capacity.saturating_add(extra);
    }

    /// Marks capture finished.
    pub fn complete(&mut self) {
        self.complete = true;
    }

    /// Gives back the ring's spare allocation (nothing will be appended
    /// any more) and returns the bytes it still allocates.
    pub fn shrink_to_fit(&mut self) -> u64 {
        self.ring.shrink_to_fit();
        self.ring.capacity() as u64
    }

    /// The next thing a reader at `cursor` should be sent, at most `max`
    /// data bytes, which `encode` turns into a frame straight from the ring
    /// (one copy). `cursor` must not be past `end()`.
    pub fn next<F>(
        &self,
        cursor: u64,
        max: usize,
        encode: impl FnOnce(u64, &[&[u8]]) -> F,
    ) -> Next<F> {
        if cursor < self.start {
            return Next::Dropped {
                offset: cursor,
                length: self.start - cursor,
            };
        }
        let end = self.end();
        if cursor >= end {
            return if self.complete {
                Next::End
            } else {
                Next::Pending
            };
        }
        if max == 0 {
            return Next::Pending;
        }
        let from = (cursor - self.start) as usize;
        let to = from + max.min((end - cursor) as usize);
        let (a, b) = self.ring.as_slices();
        let first = &a[from.min(a.len())..to.min(a.len())];
        let second = &b[from.saturating_sub(a.len())..to.saturating_sub(a.len())];
        Next::Data {
            offset: cursor,
            length: (to - from) as u64,
            frame: encode(cursor, &[first, second]),
        }
    }

    /// Bytes held in memory.
    #[cfg(test)]
    pub fn retained(&self) -> usize {
        self.ring.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn concat(_: u64, parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    fn data(next: Next) -> (u64, Vec<u8>) {
        match next {
            Next::Data {
                offset,
                frame,
                length,
            } => {
                assert_eq!(frame.len() as u64, length);
                (offset, frame)
            }
            other => panic!("expected data, got {other:?}"),
        }
    }

    #[test]
    fn reads_from_any_retained_offset() {
        let mut b = StreamBuffer::new(16);
        b.push(b"hello ");
        b.push(b"world");
        assert_eq!(data(b.next(0, 100, concat)), (0, b"hello world".to_vec()));
        assert_eq!(data(b.next(6, 3, concat)), (6, b"wor".to_vec()));
        assert_eq!(b.next(11, 100, concat), Next::Pending);
        b.complete();
        assert_eq!(b.next(11, 100, concat), Next::End);
    }

    #[test]
    fn eviction_reports_the_exact_lost_range() {
        let mut b = StreamBuffer::new(4);
        b.push(b"abcdef");
        assert_eq!(b.start(), 2);
        assert_eq!(b.end(), 6);
        assert_eq!(
            b.next(0, 10, concat),
            Next::Dropped {
                offset: 0,
                length: 2
            }
        );
        b.push(b"gh");
        assert_eq!(
            b.next(3, 10, concat),
            Next::Dropped {
                offset: 3,
                length: 1
            }
        );
        assert_eq!(data(b.next(4, 10, concat)), (4, b"efgh".to_vec()));
        assert!(b.retained() <= 4);
    }

    #[test]
    fn a_write_larger_than_capacity_keeps_only_its_tail() {
        let mut b = StreamBuffer::new(3);
        b.push(b"ab");
        b.push(b"cdefg");
        assert_eq!((b.start(), b.end(), b.retained()), (4, 7, 3));
        assert_eq!(
            b.next(1, 10, concat),
            Next::Dropped {
                offset: 1,
                length: 3
            }
        );
        assert_eq!(data(b.next(4, 10, concat)), (4, b"efg".to_vec()));
    }

    #[test]
    fn a_read_across_the_ring_seam_is_whole() {
        let mut b = StreamBuffer::new(4);
        b.push(b"abc");
        b.push(b"de");
        b.push(b"f");
        assert_eq!(data(b.next(2, 4, concat)), (2, b"cdef".to_vec()));
        assert_eq!(b.next(2, 0, concat), Next::Pending);
    }
}
