//! Where a log's bytes come from: a read-only memory map of the file, the
//! decompressed bytes of a gzip file (detected by its magic bytes, whatever
//! the file is called), or the bytes of a stream that cannot be mapped (a
//! pipe, `/dev/stdin`, a process substitution), read to its end.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use memmap2::Mmap;

use super::ParseError;

/// The bytes of one log file.
pub enum LogSource {
    /// A read-only map of the file (the usual case; no copy).
    Mapped(Mmap),
    /// Bytes held in memory: a decompressed gzip file, an empty file, or
    /// bytes given directly (tests, fuzzing).
    Owned(Vec<u8>),
}

impl LogSource {
    /// Opens `path`: maps it, or decompresses it when it starts with the gzip
    /// magic bytes `1f 8b`; a path that is not a regular file (a pipe) is
    /// read to its end instead of mapped.
    ///
    /// Errors: [`ParseError::Io`] when the file cannot be opened or mapped,
    /// [`ParseError::Gzip`] when the gzip stream is corrupt.
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
            // no length and nothing to map; read it to its end.
            let mut bytes = Vec::new();
            let mut file = file;
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
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        if let Some(out) = gunzip(&map, path)? {
            return Ok(LogSource::Owned(out));
        }
        Ok(LogSource::Mapped(map))
    }

    /// Bytes read from a stream: decompressed when they start with the
    /// gzip magic bytes.
    fn from_bytes(bytes: Vec<u8>, path: &Path) -> Result<LogSource, ParseError> {
        if let Some(out) = gunzip(&bytes, path)? {
            return Ok(LogSource::Owned(out));
        }
        Ok(LogSource::Owned(bytes))
    }

    /// The log's bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            LogSource::Mapped(m) => m,
            LogSource::Owned(v) => v,
        }
    }

    /// Whether the bytes were decompressed from gzip (or given in memory).
    pub fn is_owned(&self) -> bool {
        matches!(self, LogSource::Owned(_))
    }
}

/// The decompressed bytes when `bytes` start with the gzip magic bytes
/// (whatever the file is named), else `None`; a corrupt or cut gzip stream
/// is [`ParseError::Gzip`] naming `path`.
fn gunzip(bytes: &[u8], path: &Path) -> Result<Option<Vec<u8>>, ParseError> {
    if bytes.len() < 2 || bytes[0] != 0x1f || bytes[1] != 0x8b {
        return Ok(None);
    }
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(bytes)
        .read_to_end(&mut out)
        .map_err(|e| ParseError::Gzip {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    Ok(Some(out))
}
