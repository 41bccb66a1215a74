//! Parsing a log against another one already parsed (the reference, run
//! 1's log of the same rank): a block whose bytes are those of a block of
//! the reference is not read line by line. Its row is the reference row's
//! (byte ranges relative to the block, key hash, fields, phase flags, and
//! its module and op type by the reference's numbers, mapped to the
//! chunk's), with the block's own position and line number. Two runs that agree
//! write most of their blocks byte for byte alike, so the second log of a
//! pair costs about one `memcmp` a block where they agree (issue 26:
//! "equal texts need no parse").
//!
//! The result is the table the plain parse gives, whatever the two logs
//! hold (`tests.rs` checks it on pairs that agree, differ in values, in
//! ops, in headers and line ends). Only reference rows whose whole row
//! the parse of their own bytes decides are copied: a row with a block
//! after it (the last block is judged against the end of the file), in a
//! reference whose warnings are all about the file, never about a line
//! of a block ([`Reference::new`]), so that a copied block has no warning
//! to repeat.

use super::key;
use super::line::{classify, LineKind};
use super::table::{
    OpTable, WarningKind, FLAG_BACKWARD, FLAG_MAYBE_NONFINITE, FLAG_PHASE_LINE, FLAG_TRUNCATED,
};

/// A parsed log whose blocks the parse of another log may copy.
pub(crate) struct Reference<'r> {
    table: &'r OpTable,
    data: &'r [u8],
}

/// How far from the row the lock-step guess gives [`Follow`] looks for the
/// block's key (by key hash) when that guess fails: rows on either side
/// (a scan of 8,192 key hashes, about 30,000 instructions).
const SEARCH_ROWS: usize = 4096;

/// After a failed search, this many blocks are parsed on the lock-step
/// guess alone before the next search. Logs that share no key (run 2's
/// keys renamed) then cost 1.6 % more to parse than without a
/// reference (the guess's two key-line compares a block, a search every
/// this many blocks); with a search every 64 blocks they cost 14.5 % more
/// (100k-op pair, callgrind). Two logs that agree lose at most this many
/// blocks' copies after run 2 leaves out two or more of run 1's blocks.
const SEARCH_EVERY: u32 = 4096;

impl<'r> Reference<'r> {
    /// `table` as a reference, or `None` when it has a warning about a line
    /// of a block (an unknown or repeated field, a value that does not
    /// read, CR LF line ends, a key that is not UTF-8 or not closed): those
    /// rows' warnings come from their lines, which a copy does not read.
    /// `None` too once its reference columns are dropped
    /// ([`OpTable::drop_reference_columns`]).
    pub(crate) fn new(table: &'r OpTable) -> Option<Reference<'r>> {
        let file_level = table.warning_counts.iter().all(|(kind, _, _)| {
            matches!(
                kind,
                WarningKind::MissingHeader
                    | WarningKind::CountMismatch
                    | WarningKind::Truncated
                    | WarningKind::UnknownHeader
                    | WarningKind::DuplicateKey
            )
        });
        let columns = table.fields.len() == table.len() && table.module.len() == table.len();
        (file_level && columns && table.len() >= 2).then(|| Reference {
            table,
            data: table.source.bytes(),
        })
    }

    /// Whether reference row `row` starts with the key line `key_line` (a
    /// line of its own: the `\n` follows).
    #[inline]
    fn key_line_is(&self, row: usize, key_line: &[u8]) -> bool {
        let Some(&start) = self.table.block_start.get(row) else {
            return false;
        };
        let start = start as usize;
        self.data
            .get(start..start + key_line.len() + 1)
            .is_some_and(|b| b[key_line.len()] == b'\n' && &b[..key_line.len()] == key_line)
    }

    /// The reference row nearest `guess` (within [`SEARCH_ROWS`]) whose key
    /// line is `key_line`: rows with the key's hash, then their key lines.
    fn find_key_line(
        &self,
        hasher: &ahash::RandomState,
        guess: usize,
        key_line: &[u8],
    ) -> Option<usize> {
        let LineKind::Key { start, end, .. } = classify(key_line) else {
            return None;
        };
        let h = key::key_hash(hasher, &key_line[start..end]);
        let hashes = &self.table.key_hash;
        let lo = guess.saturating_sub(SEARCH_ROWS).min(hashes.len());
        let hi = guess.saturating_add(SEARCH_ROWS).min(hashes.len());
        (lo..hi)
            .filter(|&r| hashes[r] == h && self.key_line_is(r, key_line))
            .min_by_key(|&r| r.abs_diff(guess))
    }

    /// The reference row whose block starts nearest before byte `pos`
    /// (where a log that agrees with the reference has the same block).
    fn row_near(&self, pos: usize) -> usize {
        self.table
            .block_start
            .partition_point(|&s| s as usize <= pos)
            .saturating_sub(1)
    }
}

/// A copied block: the reference row it copies.
pub(super) struct Copied<'r> {
    /// The reference table.
    pub(super) table: &'r OpTable,
    /// The row.
    pub(super) row: usize,
    /// The block's length in bytes (its blank lines included).
    pub(super) len: usize,
    /// The block's lines.
    pub(super) lines: u64,
    /// The row's flags as the parse of its block sets them (before the
    /// join's whole-file marks).
    pub(super) flags: u8,
    /// The row's fields ([`OpTable`]'s `fields`).
    pub(super) fields: u32,
}

/// One chunk's walk along the reference: the reference row its next block
/// most likely copies (the rows of two logs that agree come in the same
/// order).
pub(super) struct Follow<'r> {
    reference: &'r Reference<'r>,
    /// The reference row the next block is guessed to be; `None` before
    /// the chunk's first block.
    next: Option<usize>,
    /// Blocks left before the next search for a key line.
    wait: u32,
    hasher: ahash::RandomState,
}

impl<'r> Follow<'r> {
    pub(super) fn new(reference: &'r Reference<'r>) -> Follow<'r> {
        Follow {
            reference,
            next: None,
            wait: 0,
            hasher: key::hasher(),
        }
    }

    /// The reference's table.
    pub(super) fn table(&self) -> &'r OpTable {
        self.reference.table
    }

    /// The block at byte `pos` of `data` (`key_line` is its first line,
    /// without its line end; the chunk ends at `end`): the reference row
    /// it is a byte-for-byte copy of, or `None` (the block is parsed).
    #[inline]
    pub(super) fn copy(
        &mut self,
        data: &[u8],
        pos: usize,
        end: usize,
        key_line: &[u8],
    ) -> Option<Copied<'r>> {
        let r = self.reference;
        let guess = match self.next {
            Some(g) => g,
            None => r.row_near(pos),
        };
        // The guess, the row after it (this block's key changed, or the
        // block before it was one the reference lacks), then a search.
        // A block not found leaves the guess where it is: a block the
        // reference lacks takes no row of it.
        let row = if r.key_line_is(guess, key_line) {
            guess
        } else if r.key_line_is(guess + 1, key_line) {
            guess + 1
        } else if self.wait == 0 {
            match r.find_key_line(&self.hasher, guess, key_line) {
                Some(row) => row,
                None => {
                    self.wait = SEARCH_EVERY;
                    self.next = Some(guess);
                    return None;
                }
            }
        } else {
            self.wait -= 1;
            self.next = Some(guess);
            return None;
        };
        self.next = Some(row + 1);
        let t = r.table;
        // Rows with a block after them only: the last block is judged
        // against the end of its file.
        let (start, after) = (
            *t.block_start.get(row)? as usize,
            *t.block_start.get(row + 1)? as usize,
        );
        let len = after - start;
        let (line, line_after) = (t.line[row], t.line[row + 1]);
        if pos + len >= end
            || data[pos + len] != b'['
            || line_after == u32::MAX
            || t.flags[row] & FLAG_TRUNCATED != 0
            || data[pos..pos + len] != r.data[start..after]
        {
            return None;
        }
        Some(Copied {
            table: t,
            row,
            len,
            lines: u64::from(line_after - line),
            flags: parse_flags(t.flags[row]),
            fields: t.fields[row],
        })
    }
}

/// A row's flags as the parse of its block set them, from its flags in a
/// finished table: the join marks rows without a `Phase:` line as the
/// optimizer step's ([`super::join::mark_optimizer_rows`]), and only
/// those rows; a row with the line keeps what its line set.
#[inline]
pub(super) fn parse_flags(f: u8) -> u8 {
    if f & FLAG_PHASE_LINE != 0 {
        f & !FLAG_TRUNCATED
    } else {
        f & (FLAG_BACKWARD | FLAG_MAYBE_NONFINITE)
    }
}
