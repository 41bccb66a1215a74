//! The log writer: a thread that formats [`Record`]s as they arrive over a
//! crossbeam channel and writes one `rank_N_activations.log`.
//!
//! The header's `Total captured activations: N` must equal the number of
//! blocks, which is known only at the end, and a log can be many GiB. So the
//! blocks go to a body file beside the log (`<log>.body.tmp`) while the
//! capture runs; [`LogWriter::finish`] writes the header to `<log>.tmp`,
//! appends the body (one `io::copy`, a kernel copy where the OS has one) and
//! renames it over the log. A reader never sees a half-written log, and a
//! crashed run leaves only `*.tmp` files.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};

use super::record::{write_block, write_header, Precision, Record};
use crate::logformat::HeaderNotes;

/// Writes one log on its own thread. Dropping it without
/// [`finish`](LogWriter::finish) stops the thread and removes the body file.
pub struct LogWriter {
    path: PathBuf,
    body_path: PathBuf,
    precision: Precision,
    tx: Option<Sender<Vec<Record>>>,
    thread: Option<JoinHandle<io::Result<u64>>>,
}

fn with_path(e: io::Error, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

fn run(rx: Receiver<Vec<Record>>, file: File, precision: Precision) -> io::Result<u64> {
    let mut w = BufWriter::with_capacity(1 << 20, file);
    let mut buf = Vec::with_capacity(1 << 16);
    let mut count = 0u64;
    for batch in rx {
        for r in &batch {
            write_block(&mut buf, r, precision);
            count += 1;
            if buf.len() >= 1 << 16 {
                w.write_all(&buf)?;
                buf.clear();
            }
        }
    }
    w.write_all(&buf)?;
    w.flush()?;
    Ok(count)
}

impl LogWriter {
    /// Starts a writer for the log at `path` (its folder is created) that
    /// prints floats in `precision`.
    pub fn create(path: impl Into<PathBuf>, precision: Precision) -> io::Result<LogWriter> {
        let path = path.into();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).map_err(|e| with_path(e, dir))?;
        }
        let body_path = sibling(&path, ".body.tmp");
        let file = File::create(&body_path).map_err(|e| with_path(e, &body_path))?;
        let (tx, rx) = crossbeam_channel::unbounded();
        let thread = std::thread::Builder::new()
            .name("actdiff-log-writer".into())
            .spawn(move || run(rx, file, precision))?;
        Ok(LogWriter {
            path,
            body_path,
            precision,
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Queues records to be written after those queued before. Fails only
    /// when the writer thread has stopped (an I/O error, reported in full by
    /// [`finish`](LogWriter::finish)).
    pub fn write(&self, records: Vec<Record>) -> io::Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        match &self.tx {
            Some(tx) => tx.send(records).map_err(|_| {
                io::Error::other(format!(
                    "{}: the log writer thread stopped (an I/O error; finish() reports it)",
                    self.body_path.display()
                ))
            }),
            None => Err(io::Error::other("log writer already finished")),
        }
    }

    /// Writes every queued record, then the header with the block count
    /// and the lines of `notes` (excluded ops, compile backend, step, loss:
    /// [`crate::logformat::write_header`]), and moves the finished log into
    /// place. Returns the number of blocks.
    pub fn finish(mut self, notes: &HeaderNotes) -> io::Result<u64> {
        drop(self.tx.take());
        let count = match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r.map_err(|e| with_path(e, &self.body_path))?,
            Some(Err(_)) => return Err(io::Error::other("the log writer thread panicked")),
            None => return Err(io::Error::other("log writer already finished")),
        };
        let tmp = sibling(&self.path, ".tmp");
        let mut head = Vec::new();
        write_header(&mut head, count, notes, self.precision);
        let result = (|| -> io::Result<()> {
            let mut out = File::create(&tmp).map_err(|e| with_path(e, &tmp))?;
            out.write_all(&head)?;
            let mut body =
                File::open(&self.body_path).map_err(|e| with_path(e, &self.body_path))?;
            io::copy(&mut body, &mut out)?;
            out.sync_all().ok();
            drop(out);
            fs::rename(&tmp, &self.path).map_err(|e| with_path(e, &self.path))
        })();
        let _ = fs::remove_file(&self.body_path);
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result.map(|()| count)
    }
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            drop(self.tx.take());
            let _ = t.join();
            let _ = fs::remove_file(&self.body_path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::{Moments, Phase, Stats};
    use super::*;
    use crate::logformat::CompileBackend;
    use crate::parser::{parse_bytes, Field};

    fn rec(i: usize) -> Record {
        Record {
            key: format!("layers.{i}.w/op_0_mm"),
            stats: Some(Stats {
                shape: vec![4, i as i64],
                dtype: "float32".into(),
                moments: Some(Moments {
                    l2: 1.5 * i as f64,
                    min: -1.0,
                    max: 2.0,
                    mean: 0.25,
                    nan_count: 0,
                    inf_count: 0,
                }),
            }),
            output_hashes: vec![i as f64],
            input_hashes: vec![1.0, 2.0],
            input_producers: vec![String::new(), format!("x/op_{i}_add")],
            location: Some("m/model.py:10".into()),
            phase: if i % 2 == 1 {
                Phase::Backward
            } else {
                Phase::Forward
            },
            ..Default::default()
        }
    }

    #[test]
    fn header_count_equals_blocks_and_parses_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/rank_0_activations.log");
        let w = LogWriter::create(&path, Precision::PRINTED).unwrap();
        w.write((0..3).map(rec).collect()).unwrap();
        w.write(vec![]).unwrap();
        w.write((3..1000).map(rec).collect()).unwrap();
        let n = w
            .finish(&HeaderNotes {
                excluded: Some(vec!["view".into(), "t".into()]),
                compiled: CompileBackend::from_name("inductor"),
                step: Some(3),
                loss: Some(0.1),
                ..HeaderNotes::default()
            })
            .unwrap();
        assert_eq!(n, 1000);
        let names: Vec<_> = fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, vec!["rank_0_activations.log".to_string()]);
        let bytes = fs::read(&path).unwrap();
        let t = parse_bytes(bytes, &path);
        assert_eq!(t.len(), 1000);
        assert!(t.warnings().is_empty(), "{:?}", t.warnings());
        assert_eq!(t.header().total, Some(1000));
        assert_eq!(t.header().excluded, Some(vec!["t".into(), "view".into()]));
        assert_eq!(t.header().compiled, Some(CompileBackend::Inductor));
        assert_eq!((t.header().step, t.header().loss), (Some(3), Some(0.1)));
        assert_eq!(t.key_str(7), "layers.7.w/op_0_mm");
        assert_eq!(t.text(7, Field::InputProducers), ";x/op_7_add");
        assert!(t.is_backward(7));
        assert!(!t.is_backward(8));
    }

    #[test]
    fn empty_log_and_drop_without_finish() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rank_3_activations.log");
        let n = LogWriter::create(&path, Precision::PRINTED)
            .unwrap()
            .finish(&HeaderNotes::default())
            .unwrap();
        assert_eq!(n, 0);
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            format!("Total captured activations: 0\n{}\n\n", "=".repeat(80))
        );
        let p2 = dir.path().join("rank_4_activations.log");
        let w = LogWriter::create(&p2, Precision::PRINTED).unwrap();
        w.write(vec![rec(1)]).unwrap();
        drop(w);
        assert!(!p2.exists());
        assert!(!sibling(&p2, ".body.tmp").exists());
    }
}
