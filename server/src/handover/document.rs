//! The state document a handover passes to the new binary (issue 43): an
//! anonymous memory file (`memfd`), handed over by its descriptor number.
//!
//! Layout: 16 bytes of magic, the format (u32, little-endian), four
//! reserved bytes, then the blobs (window bytes, snapshots) one after the
//! other, then the description as JSON, then its offset and length (two
//! u64). Blobs are written as the description is built, so no window is
//! copied twice in memory; the reader checks every blob and the JSON
//! against the file's size before it reads them.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;

use crate::retained::log::Blob;

const MAGIC: &[u8; 16] = b"tether-handover\n";
const HEADER: u64 = 24;
const TRAILER: u64 = 16;
/// The description is a few hundred bytes per process; this is far more
/// than 4,096 processes need, and bounds what a corrupt file can ask.
const MAX_DESCRIPTION: u64 = 256 << 20;

/// Writes a state document.
pub struct DocumentWriter {
    file: File,
    at: u64,
}

impl DocumentWriter {
    /// A new, empty document of `format`.
    pub fn new(format: u32) -> io::Result<DocumentWriter> {
        let fd = nix::sys::memfd::memfd_create(
            c"tetherd-handover",
            nix::sys::memfd::MFdFlags::MFD_CLOEXEC,
        )?;
        let mut file = File::from(fd);
        let mut header = [0u8; HEADER as usize];
        header[..16].copy_from_slice(MAGIC);
        header[16..20].copy_from_slice(&format.to_le_bytes());
        file.write_all(&header)?;
        Ok(DocumentWriter { file, at: HEADER })
    }

    /// Appends bytes (given in parts) as one blob.
    pub fn put(&mut self, parts: &[&[u8]]) -> io::Result<Blob> {
        let at = self.at;
        for part in parts {
            self.file.write_all(part)?;
            self.at += part.len() as u64;
        }
        Ok(Blob {
            at,
            len: self.at - at,
        })
    }

    /// Appends the description and the trailer; the descriptor to pass.
    pub fn finish(mut self, description: &impl serde::Serialize) -> io::Result<OwnedFd> {
        let json = serde_json::to_vec(description).map_err(io::Error::other)?;
        let at = self.at;
        self.file.write_all(&json)?;
        self.file.write_all(&at.to_le_bytes())?;
        self.file.write_all(&(json.len() as u64).to_le_bytes())?;
        Ok(OwnedFd::from(self.file))
    }
}

/// Reads a state document a handover passed.
pub struct DocumentReader {
    file: File,
    size: u64,
}

fn invalid(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.into())
}

impl DocumentReader {
    /// Opens the document in `fd`: its format and its description (JSON),
    /// checked against the file. Formats not in `formats` are refused.
    pub fn open(fd: OwnedFd, formats: &[u32]) -> io::Result<(DocumentReader, serde_json::Value)> {
        let file = File::from(fd);
        let size = file.metadata()?.len();
        if size < HEADER + TRAILER {
            return Err(invalid("the handover state is shorter than its header"));
        }
        let mut header = [0u8; HEADER as usize];
        file.read_exact_at(&mut header, 0)?;
        if &header[..16] != MAGIC {
            return Err(invalid("not a tetherd handover state"));
        }
        let found = u32::from_le_bytes([header[16], header[17], header[18], header[19]]);
        if !formats.contains(&found) {
            return Err(invalid(format!(
                "handover state format {found}; this binary reads {formats:?}"
            )));
        }
        let mut trailer = [0u8; TRAILER as usize];
        file.read_exact_at(&mut trailer, size - TRAILER)?;
        let word = |i: usize| {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&trailer[i..i + 8]);
            u64::from_le_bytes(bytes)
        };
        let (at, len) = (word(0), word(8));
        let fits =
            at >= HEADER && len <= MAX_DESCRIPTION && at.checked_add(len) == Some(size - TRAILER);
        if !fits {
            return Err(invalid("the handover state's description is out of bounds"));
        }
        let mut json = vec![0u8; len as usize];
        file.read_exact_at(&mut json, at)?;
        let description = serde_json::from_slice(&json).map_err(|e| invalid(e.to_string()))?;
        Ok((DocumentReader { file, size: at }, description))
    }

    /// A blob's bytes, checked to lie within the blobs.
    pub fn take(&self, blob: Blob) -> io::Result<Vec<u8>> {
        let fits = blob.at >= HEADER
            && blob
                .at
                .checked_add(blob.len)
                .is_some_and(|end| end <= self.size);
        if !fits {
            return Err(invalid("a blob of the handover state is out of bounds"));
        }
        let mut bytes = vec![0u8; blob.len as usize];
        self.file.read_exact_at(&mut bytes, blob.at)?;
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_reads_back_and_a_damaged_one_is_refused() {
        let mut writer = DocumentWriter::new(7).unwrap();
        let blob = writer.put(&[b"hello ", b"world"]).unwrap();
        let fd = writer.finish(&serde_json::json!({"blob": blob})).unwrap();
        let copy = fd.try_clone().unwrap();
        let (reader, description) = DocumentReader::open(fd, &[1, 7]).unwrap();
        let blob: Blob = serde_json::from_value(description["blob"].clone()).unwrap();
        assert_eq!(reader.take(blob).unwrap(), b"hello world");
        assert!(
            reader.take(Blob { at: 0, len: 4 }).is_err(),
            "the header is no blob"
        );
        assert!(reader
            .take(Blob {
                at: 24,
                len: u64::MAX
            })
            .is_err());
        assert!(
            DocumentReader::open(copy.try_clone().unwrap(), &[8]).is_err(),
            "another format"
        );
        // A trailer that points past the file is refused, not followed.
        let file = File::from(copy);
        let size = file.metadata().unwrap().len();
        file.write_all_at(&[0xff; 8], size - 8).unwrap();
        assert!(DocumentReader::open(OwnedFd::from(file), &[7]).is_err());
    }
}
