//! Where a log's bytes come from: a read-only memory map of the file, the
//! decompressed bytes of a gzip file (detected by its magic bytes, whatever
//! the file is called), or the bytes of a stream that cannot be mapped (a
//! pipe, `/dev/stdin`, a process substitution), read to its end, unless
//! its first 4 KiB are already binary data (`/dev/zero`, `/dev/urandom`:
//! endless, and no log).
//!
//! A gzip file cut short (a copy or a writer stopped mid-stream) is read to
//! the cut, as `zcat` does, and kept as [`LogSource::GzipCut`]: the parser
//! marks the log truncated ([`crate::parser::OpTable::gzip_cut`]), so it is
//! incomplete input (exit 3, or compared under `--allow-incomplete`). A
//! gzip file that is corrupt (bad deflate data, a wrong checksum) or cut
//! before any log byte is an input error.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use memmap2::{Mmap, MmapOptions};

use super::ParseError;

/// The bytes of one log file.
pub enum LogSource {
    /// A read-only map of the file (the usual case; no copy).
    Mapped(Mmap),
    /// Bytes held in memory: a decompressed gzip file, an empty file, or
    /// bytes given directly (tests, fuzzing).
    Owned(Vec<u8>),
    /// The bytes a gzip file cut short decompresses to, up to the cut.
    GzipCut(Vec<u8>),
}

impl LogSource {
    /// Opens `path`: maps it, or decompresses it when it starts with the gzip
    /// magic bytes `1f 8b`; a path that is not a regular file (a pipe) is
    /// read to its end instead of mapped.
    ///
    /// Errors: [`ParseError::Io`] when the file cannot be opened or mapped,
    /// [`ParseError::Gzip`] when the gzip stream is corrupt or cut before
    /// any log byte (one cut later is [`LogSource::GzipCut`]).
    pub fn open(path: &Path) -> Result<LogSource, ParseError> {
        let io = |e: std::io::Error| ParseError::Io {
            path: path.to_path_buf(),
            message: e.to_string(),
        };
        let file = File::open(path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if meta.is_dir() {
            return Err(ParseError::Io {
                path: path.to_path_buf(),
                message: "is a directory, expected a log file".into(),
            });
        }
        if !meta.is_file() {
            // A pipe, `/dev/stdin`, a process substitution (`<(zcat b.gz)`):
            // no length and nothing to map; read it to its end. A stream
            // whose first block is binary data (not gzip) is read no
            // further: the parse says "binary data" from that block alone,
            // and `/dev/zero` would otherwise fill memory (trial 25).
            let mut bytes = Vec::new();
            let mut file = file;
            (&mut file)
                .take(BINARY_PROBE as u64)
                .read_to_end(&mut bytes)
                .map_err(io)?;
            if !is_gzip(&bytes) && binary_at(&bytes).is_some() {
                return Ok(LogSource::Owned(bytes));
            }
            file.read_to_end(&mut bytes).map_err(io)?;
            return Self::from_bytes(bytes, path);
        }
        if meta.len() == 0 {
            return Ok(LogSource::Owned(Vec::new()));
        }
        // SAFETY: the map is read-only; a log that another process truncates
        // while we read it is outside what any reader can defend against.
        // Not populated up front: the parse threads fault their own chunks
        // in parallel, which measured faster than one MAP_POPULATE (8 ranks
        // of 268 MB: 4.4 s against 4.7 s).
        // The length is the one just read: memmap2 would ask for it again.
        let map = unsafe { MmapOptions::new().len(meta.len() as usize).map(&file) }.map_err(io)?;
        if let Some(out) = gunzip(&map, path)? {
            return Ok(out);
        }
        Ok(LogSource::Mapped(map))
    }

    /// Bytes read from a stream: decompressed when they start with the
    /// gzip magic bytes.
    fn from_bytes(bytes: Vec<u8>, path: &Path) -> Result<LogSource, ParseError> {
        if let Some(out) = gunzip(&bytes, path)? {
            return Ok(out);
        }
        Ok(LogSource::Owned(bytes))
    }

    /// The log's bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            LogSource::Mapped(m) => m,
            LogSource::Owned(v) | LogSource::GzipCut(v) => v,
        }
    }

    /// Whether the bytes were decompressed from gzip (or given in memory).
    pub fn is_owned(&self) -> bool {
        matches!(self, LogSource::Owned(_) | LogSource::GzipCut(_))
    }

    /// Whether the bytes are those of a gzip file cut short, read to the cut.
    pub fn is_gzip_cut(&self) -> bool {
        matches!(self, LogSource::GzipCut(_))
    }
}

/// Whether `bytes` start with the gzip magic bytes `1f 8b`.
fn is_gzip(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0x1f, 0x8b])
}

/// How far into a log [`binary_at`] looks for a NUL byte.
const BINARY_PROBE: usize = 4096;

/// The offset of a NUL byte in the first 4 KiB of `bytes`: binary data (an
/// activation log is text and never holds one).
pub fn binary_at(bytes: &[u8]) -> Option<u64> {
    memchr::memchr(0, &bytes[..bytes.len().min(BINARY_PROBE)]).map(|i| i as u64)
}

/// The decompressed bytes when `bytes` start with the gzip magic bytes
/// (whatever the file is named), else `None`: [`LogSource::Owned`], or
/// [`LogSource::GzipCut`] when the stream ends early and some log bytes came
/// out before the cut. Corrupt data, or a cut before any log byte, is
/// [`ParseError::Gzip`] naming `path`.
fn gunzip(bytes: &[u8], path: &Path) -> Result<Option<LogSource>, ParseError> {
    if !is_gzip(bytes) {
        return Ok(None);
    }
    let mut out = Vec::new();
    // On an error, `read_to_end` keeps the bytes read before it.
    match flate2::read::MultiGzDecoder::new(bytes).read_to_end(&mut out) {
        Ok(_) => Ok(Some(LogSource::Owned(out))),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !out.is_empty() => {
            Ok(Some(LogSource::GzipCut(out)))
        }
        Err(e) => Err(ParseError::Gzip {
            path: path.to_path_buf(),
            message: if e.kind() == std::io::ErrorKind::UnexpectedEof {
                format!("{e}: the file is cut before any log data")
            } else {
                e.to_string()
            },
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn a_cut_gzip_is_read_to_the_cut() {
        let text: Vec<u8> = (0..2000)
            .flat_map(|i| format!("[layers.{i}/op_0_mm]\n  Output hash: {i}\n\n").into_bytes())
            .collect();
        let gz = gzip(&text);
        let path = Path::new("cut.log.gz");
        match gunzip(&gz, path) {
            Ok(Some(LogSource::Owned(v))) => assert_eq!(v, text),
            _ => panic!("a whole stream reads whole"),
        }
        // Cut in the deflate data, and in the 8-byte trailer.
        for cut in [gz.len() / 4, gz.len() / 2, gz.len() - 20, gz.len() - 4] {
            match gunzip(&gz[..cut], path) {
                Ok(Some(LogSource::GzipCut(v))) => {
                    assert!(!v.is_empty() && text.starts_with(&v), "cut at {cut}")
                }
                Ok(_) => panic!("cut at {cut}: not marked cut"),
                Err(e) => panic!("cut at {cut}: {e}"),
            }
        }
        // Cut before any log byte: an error naming the file.
        for cut in [2, 10] {
            let e = gunzip(&gz[..cut], path).err().expect("an error");
            assert!(e.to_string().contains("cut.log.gz"), "{e}");
            assert!(e.to_string().contains("before any log data"), "{e}");
        }
        // Corrupt data is still an error, not a cut.
        let mut bad = gz.clone();
        for b in &mut bad[30..60] {
            *b ^= 0xa5;
        }
        assert!(gunzip(&bad, path).is_err());
    }
}
