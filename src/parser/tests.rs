use super::*;

const SAMPLE: &str = "Total captured activations: 3
Excluded ops dispatched: t, _to_copy, view
================================================================================

[layers.0.attention.wq/op_0_mm]
  Shape: torch.Size([2, 128, 256]), Dtype: torch.float32
  L2 norm: 1.234568e+02
  Min: -4.567890e+00
  Max: 4.321000e+00
  Mean: 1.000000e-03
  Output hash: 5.432100e+03
  Input hashes: 1.000000e+03, 2.000000e+03
  Input producers: layers.0.attention_norm/op_0_mul;
  Location: common/attention.py:534

[layers.0.attention_norm/op_1_add_]
  Output hash: 1.177788e+02
  Input hashes: 1.177775e+02
  Location: llama3/model.py:152

[FSDPLlama3Model.layers.0/op_3__foreach_add_]
  Input hashes: nan, inf, -inf
  Input producers: ;;
  Location: x.py:1
  Phase: backward

";

fn table(s: &str) -> OpTable {
    parse_bytes(s.as_bytes().to_vec(), "t.log")
}

#[test]
fn parses_every_field_and_the_header() {
    let t = table(SAMPLE);
    assert_eq!(t.len(), 3);
    assert_eq!(t.header().total, Some(3));
    assert_eq!(
        t.header().excluded.as_deref(),
        Some(&["_to_copy".to_string(), "t".into(), "view".into()][..])
    );
    assert!(t.header().has_rule);
    assert_eq!(t.key(0), b"layers.0.attention.wq/op_0_mm");
    assert_eq!(
        t.field(0, Field::Shape),
        b"torch.Size([2, 128, 256]), Dtype: torch.float32"
    );
    assert_eq!(t.field(0, Field::L2Norm), b"1.234568e+02");
    assert_eq!(t.field(0, Field::Min), b"-4.567890e+00");
    assert_eq!(t.field(0, Field::Max), b"4.321000e+00");
    assert_eq!(t.field(0, Field::Mean), b"1.000000e-03");
    assert_eq!(t.field(0, Field::OutputHash), b"5.432100e+03");
    assert_eq!(
        t.field(0, Field::InputHashes),
        b"1.000000e+03, 2.000000e+03"
    );
    assert_eq!(
        t.field(0, Field::InputProducers),
        b"layers.0.attention_norm/op_0_mul;"
    );
    assert_eq!(t.field(0, Field::Location), b"common/attention.py:534");
    assert!(!t.has(0, Field::Phase));
    assert_eq!(t.phase(0), "forward");
    assert_eq!(t.line(0), 5);
    // hash-only in-place block
    assert!(!t.has(1, Field::Shape));
    assert!(!t.has(1, Field::L2Norm));
    assert_eq!(t.field(1, Field::OutputHash), b"1.177788e+02");
    assert_eq!(t.line(1), 16);
    // no Output hash at all, all-separator producers, phase
    assert!(!t.has(2, Field::OutputHash));
    assert_eq!(t.field(2, Field::InputProducers), b";;");
    assert!(t.is_backward(2));
    assert!(t.warnings().is_empty(), "{:?}", t.warnings());
    assert_eq!(t.total_lines(), 26);
    assert!(t.schema().contains(Field::Phase));
    assert!(!t.schema().contains(Field::L1Norm));
}

#[test]
fn none_header_and_missing_header() {
    let t = table("Total captured activations: 0\nExcluded ops dispatched: (none)\n");
    assert_eq!(t.header().excluded, Some(vec![]));
    assert_eq!(t.len(), 0);
    let t = table("[a/op_0_mm]\n  Output hash: 1\n");
    assert_eq!(t.header().excluded, None);
    assert_eq!(t.len(), 1);
    assert!(t
        .warnings()
        .iter()
        .any(|w| w.kind == WarningKind::MissingHeader));
}

#[test]
fn crlf_gives_the_same_fields_and_a_warning() {
    let crlf = SAMPLE.replace('\n', "\r\n");
    let a = table(SAMPLE);
    let b = table(&crlf);
    assert_eq!(a.len(), b.len());
    for row in 0..a.len() {
        for f in Field::ALL {
            assert_eq!(a.field(row, f), b.field(row, f), "row {row} {f:?}");
        }
        assert_eq!(a.line(row), b.line(row));
    }
    assert!(b.warnings().iter().any(|w| w.kind == WarningKind::Crlf));
}

#[test]
fn truncated_last_block_is_kept_and_flagged() {
    let cut = &SAMPLE[..SAMPLE.find("  Location: x.py").unwrap() + 8];
    let t = table(cut);
    assert_eq!(t.len(), 3);
    assert!(t.is_truncated(2));
    assert!(!t.is_truncated(1));
    let w = t
        .warnings()
        .iter()
        .find(|w| w.kind == WarningKind::Truncated)
        .unwrap();
    assert_eq!(w.line, 24);
    // Ends mid-block without a final newline.
    let t = table(SAMPLE.trim_end_matches('\n'));
    assert!(t.is_truncated(2), "ends mid-block without newline");
    // Cut right after a newline: a tracer's log (count header) ends every
    // block with an empty line, so a last block without one was cut.
    let t = table(&SAMPLE[..SAMPLE.len() - 1]);
    assert!(t.is_truncated(2), "no empty line after the last block");
    assert!(!table(SAMPLE).is_truncated(2));
    // Without a count header (not a tracer's log) that alone is no
    // evidence: a last block with every field the block before it has
    // is whole.
    let headerless = &SAMPLE[SAMPLE.find('[').unwrap()..SAMPLE.len() - 1];
    assert!(!table(headerless).is_truncated(2));
    // Headerless and cut right after a newline inside the last block: it
    // lacks fields the block before it has, so it was cut.
    let blocks = &SAMPLE[SAMPLE.find('[').unwrap()..];
    let second = blocks.find("[layers.0.attention_norm").unwrap();
    let cut = &blocks[..second + blocks[second..].find("  Input hashes").unwrap()];
    let t = table(cut);
    assert_eq!(t.len(), 2);
    assert!(t.is_truncated(1), "{cut}");
    assert!(!t.is_truncated(0));
    assert!(t
        .warnings()
        .iter()
        .any(|w| w.kind == WarningKind::Truncated));
    // The same when the last block is alone in the last parse chunk (the
    // block before it is judged from the chunk before).
    let split = parse_chunks(
        Arc::new(LogSource::Owned(cut.as_bytes().to_vec())),
        "t.log".into(),
        &[0, second],
    );
    assert!(split.is_truncated(1) && !split.is_truncated(0));
    assert_eq!(split.warnings(), t.warnings());
    // The same block whole, without the empty line after it: not cut.
    let whole = &blocks[..second + blocks[second..].find("\n\n").unwrap() + 1];
    let t = table(whole);
    assert_eq!(t.len(), 2);
    assert!(!t.is_truncated(1), "{whole}");
}

#[test]
fn count_mismatch_and_unknown_lines_warn_with_positions() {
    let s = SAMPLE.replace("activations: 3", "activations: 4").replace(
        "  Location: llama3/model.py:152",
        "  Location: llama3/model.py:152\n  Call type: foo",
    );
    let t = table(&s);
    let unknown = t
        .warnings()
        .iter()
        .find(|w| w.kind == WarningKind::UnknownField)
        .unwrap();
    assert_eq!((unknown.line, unknown.column), (20, 3));
    assert!(t
        .warnings()
        .iter()
        .any(|w| w.kind == WarningKind::CountMismatch && w.message.contains("4")));
    assert!(t
        .warning_counts()
        .iter()
        .any(|(k, l, n)| *k == WarningKind::UnknownField && l == "Call type" && *n == 1));
}

/// A line with a stat's label that the reference's rule does not read
/// (its indentation lost, or no value): the block's stat is lost, so it is
/// an unreadable value (the log incomplete), not an unknown field (trial
/// 19 F4: `Min: 3.2.1 @@garbage` passed, exit 0).
#[test]
fn a_stat_line_the_rule_does_not_read_is_unreadable() {
    let min = SAMPLE.find("  Min: ").unwrap();
    let max = SAMPLE.find("  Max: ").unwrap();
    let max_end = max + SAMPLE[max..].find('\n').unwrap();
    let s = format!(
        "{}Min: 3.2.1 @@garbage{}  Max:{}",
        &SAMPLE[..min],
        &SAMPLE[min + SAMPLE[min..].find('\n').unwrap()..max],
        &SAMPLE[max_end..]
    );
    let t = table(&s);
    let got: Vec<(u64, u64, &str)> = t
        .warnings()
        .iter()
        .filter(|w| w.kind == WarningKind::UnreadableStatLine)
        .map(|w| (w.line, w.column, w.label.as_str()))
        .collect();
    let line = |at: usize| SAMPLE[..at].matches('\n').count() as u64 + 1;
    assert_eq!(
        got,
        [(line(min), 1, "Min"), (line(max), 3, "Max")],
        "{:?}",
        t.warnings()
    );
    assert!(!t
        .warnings()
        .iter()
        .any(|w| w.kind == WarningKind::UnknownField));
    // An unknown label is still only that.
    let t = table(&SAMPLE.replace("  Min: ", "  Minimum: "));
    assert!(t
        .warnings()
        .iter()
        .all(|w| w.kind != WarningKind::UnreadableStatLine));
}

#[test]
fn non_utf8_keys_are_kept_lossy_with_a_warning() {
    let mut bytes = b"[caf\xe9/op_0_mm]\n  Output hash: 1\n".to_vec();
    bytes.extend_from_slice(b"\n");
    let t = parse_bytes(bytes, "x.log");
    assert_eq!(t.len(), 1);
    assert_eq!(t.key(0), b"caf\xe9/op_0_mm");
    let w = t
        .warnings()
        .iter()
        .find(|w| w.kind == WarningKind::NonUtf8)
        .unwrap();
    assert_eq!((w.line, w.column), (1, 5));
}

#[test]
fn duplicate_keys_are_listed_with_lines() {
    let s = "[a/op_0_mm]\n  Output hash: 1\n\n[b/op_0_mm]\n\n[a/op_0_mm]\n  Output hash: 2\n";
    let t = table(s);
    assert_eq!(t.len(), 3);
    assert_eq!(
        duplicate_keys(&t),
        vec![("a/op_0_mm".to_string(), vec![1, 6])]
    );
}

fn assert_same(a: &OpTable, b: &OpTable) {
    assert_eq!(a.len(), b.len());
    assert_eq!(a.header(), b.header());
    assert_eq!(a.warnings(), b.warnings());
    assert_eq!(a.warning_counts(), b.warning_counts());
    assert_eq!(a.total_lines(), b.total_lines());
    for row in 0..a.len() {
        assert_eq!(a.line(row), b.line(row));
        assert_eq!(a.is_truncated(row), b.is_truncated(row));
        for f in Field::ALL {
            assert_eq!(a.field(row, f), b.field(row, f));
        }
    }
}

#[test]
fn every_chunk_split_gives_the_serial_result() {
    for text in [SAMPLE.to_string(), SAMPLE.replace('\n', "\r\n")] {
        let serial = table(&text);
        let src = Arc::new(LogSource::Owned(text.as_bytes().to_vec()));
        for target in 1..text.len() + 2 {
            let bounds = chunk_bounds(src.bytes(), target);
            for b in &bounds[1..] {
                assert_eq!(src.bytes()[*b], b'[');
                assert_eq!(src.bytes()[*b - 1], b'\n');
            }
            let par = parse_chunks(src.clone(), "t.log".into(), &bounds);
            assert_same(&serial, &par);
        }
    }
}

#[test]
fn columns_64_kib_into_a_block_read_back() {
    // A 70 KB Location line first: the column fields after it start past
    // what a 16-bit offset holds, and are found by reading the block again.
    let far = "x".repeat(70_000);
    let s = format!(
        "Total captured activations: 2\n\n[a/op_0_mm]\n  Location: {far}\n  Shape: torch.Size([2]), Dtype: torch.float32\n  L2 norm: 1.000000e+00\n  Output hash: 2.000000e+00\n  Input hashes: 3.000000e+00\n\n[b/op_1_add]\n  Location: {far}\n  L1 norm: 4.000000e+00\n\n"
    );
    let mut t = table(&s);
    assert_eq!(t.len(), 2);
    assert_eq!(t.field(0, Field::Location), far.as_bytes());
    assert_eq!(
        t.field(0, Field::Shape),
        b"torch.Size([2]), Dtype: torch.float32"
    );
    assert_eq!(t.field(0, Field::L2Norm), b"1.000000e+00");
    assert_eq!(t.field(0, Field::OutputHash), b"2.000000e+00");
    assert_eq!(t.field(0, Field::InputHashes), b"3.000000e+00");
    assert_eq!(t.key(1), b"b/op_1_add");
    assert!(!t.has(1, Field::OutputHash));
    assert_eq!(t.use_l1_as_output_hash(), 1);
    assert_eq!(
        t.field(1, Field::OutputHash),
        b"4.000000e+00",
        "L1 past 64 KiB"
    );
}

#[test]
fn values_over_64_kib_and_block_fields_read_back() {
    let hashes: Vec<String> = (0..6000)
        .map(|i| format!("{}.000000e+00", i % 10))
        .collect();
    let long = hashes.join(", ");
    assert!(long.len() > 65_535);
    let s = format!(
        "Total captured activations: 2\n\n[<none>/op_0__fused_adamw_]\n  Input hashes: {long}  \r\n  Input producers: a;;b\n  Location: optim/adam.py:1\n  Phase: backward\n\n[x/op_0_mm]\n  L1 norm: 3.0\n  Output hash: 1.0\n\n"
    );
    let t = table(&s);
    assert_eq!(t.len(), 2);
    assert_eq!(t.field(0, Field::InputHashes), long.as_bytes());
    assert_eq!(t.field(0, Field::InputProducers), b"a;;b");
    assert_eq!(t.field(0, Field::Location), b"optim/adam.py:1");
    assert!(t.is_backward(0));
    // No Phase line after the last backward op: the optimizer step.
    assert_eq!(t.phase(1), "optimizer");
    assert_eq!(t.field(1, Field::L1Norm), b"3.0");
    assert!(!t.has(1, Field::Location));
    let mut t = t;
    assert_eq!(
        t.use_l1_as_output_hash(),
        0,
        "row 1 has an Output hash already"
    );
}

/// A full-precision capture with digests (docs/log-format.md, the log-format
/// additions): `Precision: full` in the header, digest lines after the
/// Input hashes.
const FULL: &str = "Total captured activations: 2
Excluded ops dispatched: (none)
Precision: full
================================================================================

[layers.0.attention.wq/op_0_mm]
  Shape: torch.Size([2, 3]), Dtype: torch.float32
  L2 norm: 1.2345678901234567e+02
  Min: -0e+00
  Max: 5e-324
  Mean: -1.7976931348623157e+308
  Output hash: 1.2345678901234567e+02
  Input hashes: 3.0000000000000004, 2.2250738585072014e-308
  Output digest: 0123456789abcdef
  Input digests: ffffffffffffffff, 0000000000000000
  Input producers: ;
  Location: model.py:3

[<none>/op_1_add_]
  Output hash: nan
  Input hashes: inf
  Output digest: 00000000000000zz
  Input digests: 0000000000000001,
  Location: model.py:4

";

#[test]
fn precision_header_and_digest_lines() {
    let t = table(FULL);
    assert_eq!(t.precision(), Precision::Full);
    assert_eq!(t.header().total, Some(2));
    assert!(t.header().has_rule);
    assert!(t.has_digests());
    assert_eq!(
        t.digests(0, Field::OutputDigest).collect::<Vec<_>>(),
        vec![Some(0x0123_4567_89ab_cdef)]
    );
    assert_eq!(
        t.digests(0, Field::InputDigests).collect::<Vec<_>>(),
        vec![Some(u64::MAX), Some(0)]
    );
    // The digest lines set no hash and no other field.
    assert_eq!(t.field(0, Field::OutputHash), b"1.2345678901234567e+02");
    assert_eq!(
        t.field(0, Field::InputHashes),
        b"3.0000000000000004, 2.2250738585072014e-308"
    );
    assert_eq!(t.field(0, Field::InputProducers), b";");
    // Malformed digests: kept in position as `None`, warned with line and
    // column of the bad value.
    assert_eq!(
        t.digests(1, Field::OutputDigest).collect::<Vec<_>>(),
        vec![None]
    );
    assert_eq!(
        t.digests(1, Field::InputDigests).collect::<Vec<_>>(),
        vec![Some(1), None]
    );
    let bad: Vec<(u64, u64)> = t
        .warnings()
        .iter()
        .filter(|w| w.kind == WarningKind::MalformedDigest)
        .map(|w| (w.line, w.column))
        .collect();
    assert_eq!(bad, vec![(22, 18), (23, 35)]);
    assert!(
        t.warnings()
            .iter()
            .all(|w| w.kind == WarningKind::MalformedDigest),
        "{:?}",
        t.warnings()
    );
}

#[test]
fn full_precision_floats_read_exactly() {
    let t = table(FULL);
    let num = |f: Field| py_float(t.field(0, f)).unwrap();
    assert_eq!(num(Field::L2Norm), 1.2345678901234567e+02);
    assert_eq!(
        num(Field::L2Norm).to_bits(),
        123.45678901234567f64.to_bits()
    );
    let z = num(Field::Min);
    assert!(z == 0.0 && z.is_sign_negative(), "-0e+00 keeps its sign");
    assert_eq!(
        num(Field::Max),
        f64::from_bits(1),
        "5e-324 is the smallest subnormal"
    );
    assert_eq!(num(Field::Mean), -f64::MAX);
    for (text, v) in [
        ("-0.0", -0.0f64),
        ("3.0000000000000004", 3.0000000000000004),
        ("2.2250738585072014e-308", f64::MIN_POSITIVE),
        ("1e+16", 1e16),
        ("0.1", 0.1),
        ("9007199254740993", 9007199254740992.0),
    ] {
        assert_eq!(
            py_float(text.as_bytes()).map(f64::to_bits),
            Some(v.to_bits()),
            "{text}"
        );
    }
    // Every float64's shortest round-trip text (Rust's `{:e}` is one, as
    // Python's repr) reads back to the same bits.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let v = f64::from_bits(x);
        if !v.is_finite() {
            continue;
        }
        let text = format!("{v:e}");
        assert_eq!(
            py_float(text.as_bytes()).map(f64::to_bits),
            Some(x),
            "{text}"
        );
    }
}

#[test]
fn logs_without_the_additions_keep_the_reference_defaults() {
    let t = table(SAMPLE);
    assert_eq!(
        t.precision(),
        Precision::Printed {
            significant_digits: 7
        }
    );
    assert!(!t.has_digests());
    assert_eq!(t.digests(0, Field::OutputDigest).count(), 0);
    // An unknown precision is a warning at its value, and the default.
    let t = table(&FULL.replace("Precision: full", "Precision: half"));
    assert_eq!(t.precision(), Precision::default());
    let w = t
        .warnings()
        .iter()
        .find(|w| w.kind == WarningKind::UnknownHeader)
        .unwrap();
    assert_eq!((w.line, w.column), (3, 12));
    // A `Precision:` line after the first block is no header line.
    let late = SAMPLE.replace("  Location: x.py:1", "  Location: x.py:1\nPrecision: full");
    assert_eq!(table(&late).precision(), Precision::default());
}

#[test]
fn digest_lines_take_the_reference_fields_first() {
    // A line the reference reads as one of its fields (it contains
    // `Location:`) stays that field, digest label or not.
    let t = table("[a/op_0_mm]\n  Output digest: Location: x.py:1\n  Output hash: 1\n\n");
    assert_eq!(t.field(0, Field::Location), b"x.py:1");
    assert!(!t.has(0, Field::OutputDigest));
}

#[test]
fn ops_after_the_last_backward_op_are_the_optimizer_step() {
    let log = "[a/op_0_mm]\n  Output hash: 1\n\n\
               [a/op_1_mm]\n  Output hash: 1\n  Phase: backward\n\n\
               [b/op_0_add]\n  Output hash: 1\n\n\
               [c/op_0_mm]\n  Output hash: 1\n  Phase: backward\n\n\
               [<none>/op_1__fused_adamw_]\n  Input hashes: 1\n\n\
               [<none>/op_2_lerp_]\n  Output hash: 1\n  Phase: forward\n\n\
               [<none>/op_3_mul_]\n  Output hash: 1\n  Phase: recompute\n\n\
               [<none>/op_4_add_]\n  Output hash: 1\n\n";
    let want = [
        Phase::Forward,
        Phase::Backward,
        // Between backward ops (a recomputed forward op, say): forward.
        Phase::Forward,
        Phase::Backward,
        Phase::Optimizer,
        // A Phase line says what it says.
        Phase::Forward,
        Phase::Forward,
        Phase::Optimizer,
    ];
    let t = table(log);
    let got: Vec<Phase> = (0..t.len()).map(|r| t.phase_kind(r)).collect();
    assert_eq!(got, want);
    let text: Vec<String> = (0..t.len()).map(|r| t.phase(r).into_owned()).collect();
    assert_eq!(
        text,
        [
            "forward",
            "backward",
            "forward",
            "backward",
            "optimizer",
            "forward",
            "recompute",
            "optimizer"
        ]
    );
    // Any chunk split gives the same phases (the last backward op may be
    // in another chunk than the optimizer rows).
    let src = Arc::new(LogSource::Owned(log.as_bytes().to_vec()));
    for target in 1..log.len() {
        let par = parse_chunks(
            src.clone(),
            "t.log".into(),
            &chunk_bounds(src.bytes(), target),
        );
        let got: Vec<Phase> = (0..par.len()).map(|r| par.phase_kind(r)).collect();
        assert_eq!(got, want, "chunk target {target}");
    }
    // Without backward ops and without an optimizer's Location every row
    // keeps the reference's forward.
    let fwd = table("[a/op_0_mm]\n  Output hash: 1\n\n[<none>/op_1_lerp_]\n  Output hash: 1\n\n");
    assert!((0..fwd.len()).all(|r| fwd.phase_kind(r) == Phase::Forward));
    // `Phase: optimizer` is read as written.
    let opt = table("[a/op_0_mm]\n  Output hash: 1\n  Phase: optimizer\n\n");
    assert_eq!(opt.phase_kind(0), Phase::Optimizer);
    assert_eq!(opt.phase(0), "optimizer");
}

#[test]
fn without_backward_ops_the_optimizer_step_starts_at_its_first_location() {
    // A small model at the default `min_numel` leaves no backward op in
    // its log (trial 14 F5): the optimizer step starts at the first row
    // torch.optim's Location names, and runs to the end.
    let log = "[m/op_0_add_]\n  Output hash: 1\n  Location: moe.py:22\n\n\
               [m/op_1_mul]\n  Output hash: 1\n  Location: proj/optim/lossfn.py:3\n\n\
               [<none>/op_0_mul_]\n  Output hash: 1\n  Location: optim/adam.py:415\n\n\
               [<none>/op_1_lerp_]\n  Output hash: 1\n  Location: optim/adam.py:420\n\n\
               [<none>/op_2_add_]\n  Output hash: 1\n\n\
               [<none>/op_3_add_]\n  Output hash: 1\n  Location: train.py:9\n  Phase: forward\n\n";
    let t = table(log);
    let got: Vec<Phase> = (0..t.len()).map(|r| t.phase_kind(r)).collect();
    use Phase::*;
    assert_eq!(
        got,
        [Forward, Forward, Optimizer, Optimizer, Optimizer, Forward]
    );
    // A forward-only log whose rows no optimizer wrote keeps forward.
    let t = table("[m/op_0_add_]\n  Output hash: 1\n  Location: optim/lossfn.py:2\n\n");
    assert_eq!(t.phase_kind(0), Forward);
}

#[test]
fn optimizer_ops_before_a_later_backward_are_found_by_their_location() {
    // A logging metric's backward (`torch.autograd.grad`) after
    // `optimizer.step()`: the step's ops are no longer after the last
    // backward op; torch.optim's and clip_grad's Locations say what they are.
    let log = "[m/op_0_mm]\n  Output hash: 1\n  Location: train.py:10\n\n\
               [m/op_1_mm]\n  Output hash: 1\n  Phase: backward\n\n\
               [<none>/op_0_mul_]\n  Output hash: 1\n  Location: utils/clip_grad.py:88\n\n\
               [<none>/op_1_add_]\n  Output hash: 1\n  Location: optim/sgd.py:379\n\n\
               [<none>/op_2_add_]\n  Output hash: 1\n  Location: /usr/lib/python3/torch/optim/adamw.py:5\n\n\
               [m/op_2_mm]\n  Output hash: 1\n  Location: train.py:10\n  Phase: forward\n\n\
               [<none>/op_3_sum]\n  Output hash: 1\n  Location: train.py:31\n\n\
               [<none>/op_4_add_]\n  Output hash: 1\n  Location: optim/sgd.py:379\n  Phase: forward\n\n\
               [m/op_3_mm]\n  Output hash: 1\n  Phase: backward\n\n";
    let t = table(log);
    let got: Vec<Phase> = (0..t.len()).map(|r| t.phase_kind(r)).collect();
    use Phase::*;
    assert_eq!(
        got,
        [Forward, Backward, Optimizer, Optimizer, Optimizer, Forward, Forward, Forward, Backward]
    );
    // A project's own `optim/` folder is not torch's (a loss computed in
    // `optim/lossfn.py` between micro-batches' backward ops).
    let t = table(
        "[m/op_0_mm]\n  Output hash: 1\n  Phase: backward\n\n\
                   [<none>/op_0_pow]\n  Output hash: 1\n  Location: optim/lossfn.py:2\n\n\
                   [m/op_1_mm]\n  Output hash: 1\n  Phase: backward\n\n",
    );
    assert_eq!(t.phase_kind(1), Forward);
    // Before the first backward op a Location says nothing.
    let t = table(
        "[<none>/op_0_add_]\n  Output hash: 1\n  Location: optim/sgd.py:1\n\n\
                   [m/op_0_mm]\n  Output hash: 1\n  Phase: backward\n\n",
    );
    assert_eq!(t.phase_kind(0), Forward);
}

#[test]
fn a_trailing_field_is_the_field_the_parse_gives() {
    let log = "[a/op_0_mm]\n  Location: x.py:1\n  Input hashes: 1, 2\n  Location: y.py:2\n  Phase: backward\n\n\
               [a/op_1_mm]\r\n  Location: z.py:3\r\n  Input hashes: 1\r\n\r\n\
               [a/op_2_mm]\n  Output hash: 1\n\n\
               [a/op_3_mm]\n  Phase: forward\n  Location: w.py:4";
    let t = table(log);
    for r in 0..t.len() {
        for f in [Field::Location, Field::Phase, Field::InputHashes] {
            assert_eq!(t.trailing_field(r, f), t.field(r, f), "row {r} {f:?}");
        }
    }
    assert_eq!(t.trailing_field(0, Field::Location), b"y.py:2");
    assert_eq!(t.trailing_field(1, Field::Location), b"z.py:3");
    assert_eq!(t.trailing_field(2, Field::Location), b"");
    assert_eq!(t.trailing_field(3, Field::Location), b"w.py:4");
    // Every block of the bundled real logs.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata");
    let mut seen = 0;
    for e in walk(&dir) {
        if !e.to_string_lossy().ends_with("_activations.log") {
            continue;
        }
        let t = crate::parser::parse_path(&e).unwrap();
        for r in 0..t.len() {
            for f in [Field::Location, Field::Phase] {
                assert_eq!(t.trailing_field(r, f), t.field(r, f), "{e:?} row {r}");
            }
        }
        seen += t.len();
    }
    assert!(seen > 1000, "{seen} rows");
}

fn walk(d: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn root_class_is_the_one_every_key_has() {
    let t = |keys: &[&str]| {
        let mut s = format!("Total captured activations: {}\n\n", keys.len());
        for k in keys {
            s.push_str(&format!("[{k}]\n  Output hash: 1.0\n\n"));
        }
        parse_bytes(s.into_bytes(), "t.log")
    };
    assert_eq!(t(&["a/op_0_mm", "b/op_1_mm"]).root_class(), Some(&b""[..]));
    assert_eq!(
        t(&["FSDPModel.a/op_0_mm", "FSDPModel.b/op_1_mm"]).root_class(),
        Some(&b"FSDPModel."[..])
    );
    assert_eq!(t(&["FSDPModel.a/op_0_mm", "b/op_1_mm"]).root_class(), None);
    assert_eq!(
        t(&["FSDPModel.a/op_0_mm", "OtherModel.b/op_1_mm"]).root_class(),
        None
    );
    assert_eq!(t(&[]).root_class(), Some(&b""[..]));
    // Across parse chunks: the chunks' classes are joined.
    let keys: Vec<String> = (0..20)
        .map(|i| format!("FSDPModel.l{i}/op_{i}_mm"))
        .collect();
    let mut s = format!("Total captured activations: {}\n\n", keys.len());
    let mut starts = vec![0];
    for (i, k) in keys.iter().enumerate() {
        if i % 5 == 0 && i > 0 {
            starts.push(s.len());
        }
        let k = if i == 17 {
            k.replace("FSDPModel.", "")
        } else {
            k.clone()
        };
        s.push_str(&format!("[{k}]\n  Output hash: 1.0\n\n"));
    }
    let source = std::sync::Arc::new(LogSource::Owned(s.into_bytes()));
    let mixed = crate::parser::parse_chunks(source, "t.log".into(), &starts);
    assert_eq!(mixed.len(), 20);
    assert_eq!(mixed.root_class(), None);
}

#[test]
fn compiled_header_line() {
    use crate::logformat::CompileBackend;
    assert_eq!(table(SAMPLE).header().compiled, None);
    // After the excluded ops, before the precision (the writer's order).
    let t = table(&FULL.replace("Precision: full", "Compiled: inductor\nPrecision: full"));
    let header_warnings = |t: &OpTable| {
        t.warnings()
            .iter()
            .filter(|w| w.kind == WarningKind::UnknownHeader)
            .count()
    };
    assert_eq!(header_warnings(&t), 0, "{:?}", t.warnings());
    assert_eq!(t.header().compiled, Some(CompileBackend::Inductor));
    assert_eq!(t.precision(), Precision::Full);
    assert_eq!(t.len(), 2);
    // Any order of header lines; an unknown backend kept as its text.
    let t = table(&FULL.replace("Precision: full", "Precision: full\nCompiled:  tvm \r"));
    assert_eq!(header_warnings(&t), 0, "{:?}", t.warnings());
    let b = t.header().compiled.clone().unwrap();
    assert!(matches!(b, CompileBackend::Other(_)) && b.name() == "tvm" && b.fuses());
    assert_eq!(t.precision(), Precision::Full);
    // No name: a warning at the value, and not compiled.
    let t = table(&FULL.replace("Precision: full", "Compiled: "));
    assert_eq!(t.header().compiled, None);
    let w = t
        .warnings()
        .iter()
        .find(|w| w.kind == WarningKind::UnknownHeader)
        .unwrap();
    assert_eq!(w.line, 3);
    assert!(w.message.contains("compile backend"), "{}", w.message);
    // After the first block it is no header line.
    let late = SAMPLE.replace(
        "  Location: x.py:1",
        "  Location: x.py:1\nCompiled: inductor",
    );
    assert_eq!(table(&late).header().compiled, None);
}

#[test]
fn compiled_header_line_round_trips_through_the_writer() {
    use crate::logformat::{write_header, CompileBackend, HeaderNotes, Precision as Written};
    for name in ["inductor", "aot_eager", "eager", "cudagraphs"] {
        let b = CompileBackend::from_name(name).unwrap();
        let mut v = Vec::new();
        let notes = HeaderNotes {
            excluded: Some(vec![]),
            compiled: Some(b.clone()),
            compiled_modules: Some(vec!["<none>".into()]),
            level: crate::logformat::CaptureLevel::Modules,
            step: Some(7),
            loss: Some(-0.1 / 3.0),
            rng: None,
            world_size: Some(2),
            mesh: Some(crate::logformat::Mesh::parse("tp=2", "tp=1").unwrap()),
            filter: Some("min_numel=0, op_filter=mm".into()),
            below_min_numel: Some(0),
        };
        write_header(&mut v, 0, &notes, Written::Full);
        let t = parse_bytes(v, "t.log");
        assert!(t.warnings().is_empty(), "{name}: {:?}", t.warnings());
        assert_eq!(t.header().compiled.as_ref(), Some(&b));
        assert_eq!((t.header().step, t.header().world_size), (Some(7), Some(2)));
        assert_eq!(
            t.header().mesh.as_ref().map(|m| m.coords_text()),
            Some("tp=1".into())
        );
        assert_eq!(t.header().level, crate::logformat::CaptureLevel::Modules);
        assert_eq!(t.header().loss, Some(-0.1 / 3.0), "the loss round-trips");
        assert_eq!(t.header().excluded, Some(vec![]));
        assert_eq!(t.precision(), Precision::Full);
    }
}

#[test]
fn bad_step_and_loss_lines_warn_with_their_column() {
    let log = format!(
        "Total captured activations: 0\nStep: five\nLoss: x1\n{}\n\n",
        "=".repeat(80)
    );
    let t = parse_bytes(log.into_bytes(), "t.log");
    assert_eq!((t.header().step, t.header().loss), (None, None));
    let w: Vec<(u64, u64)> = t.warnings().iter().map(|w| (w.line, w.column)).collect();
    assert_eq!(w, vec![(2, 7), (3, 7)], "{:?}", t.warnings());
    assert!(t.warnings()[0].message.contains("step `five`"));
}

#[test]
fn column_of_gives_each_columns_index_and_none_for_the_rest() {
    use super::table::{column_of, COLUMNS};
    for f in Field::ALL {
        let want = COLUMNS.iter().position(|c| *c == f);
        assert_eq!(column_of(f), want, "{f:?}");
    }
}

#[test]
fn op_types_are_numbered_by_name_whatever_the_cache_holds() {
    // 50 op names (more than the cache's slots, many sharing one), in a
    // cycle that revisits each after others took its slot.
    let names: Vec<String> = (0..50)
        .map(|i| format!("op{}{}", "x".repeat(i % 7), i))
        .collect();
    let mut text = String::new();
    let mut want = Vec::new();
    for round in 0..3 {
        for k in 0..names.len() {
            let i = (k * 7 + round) % names.len();
            let name = &names[i];
            text.push_str(&format!(
                "[m{round}/op_{i}_{name}]\n  Output hash: 1.000000e+00\n\n"
            ));
            want.push(name.clone());
        }
    }
    let t = parse_bytes(text.into_bytes(), "rank_0_activations.log");
    assert_eq!(t.len(), want.len());
    for (row, name) in want.iter().enumerate() {
        assert_eq!(t.op_name(t.op_type(row)), name.as_bytes(), "row {row}");
    }
    assert_eq!(t.op_types(), names.len());
}

#[test]
fn prefetches_are_hints_that_never_fail() {
    // A block longer than the prefetch window, a short one, the last one
    // (cut at the end of the file), rows past the end, and an empty table.
    let long = format!("[a/op_0_mm]\n  Location: {}\n", "x".repeat(2000));
    let t = table(&format!(
        "{long}\n[a/op_1_mm]\n  Output hash: 1.0\n\n[a/op_2_add]\n  Output hash: 2.0"
    ));
    assert_eq!(t.len(), 3);
    for row in [0, 1, 2, 3, usize::MAX] {
        t.prefetch(row);
        t.prefetch_block(row);
    }
    let empty = table("");
    empty.prefetch(0);
    empty.prefetch_block(0);
    assert_eq!(t.key(2), b"a/op_2_add");
}

/// Every column and note of two tables, by their fields (the tables of
/// one log parsed plainly and against a reference must be the same).
fn assert_identical(a: &OpTable, b: &OpTable, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: rows");
    assert_eq!(a.header, b.header, "{what}: header");
    assert_eq!(a.block_start, b.block_start, "{what}: block starts");
    assert_eq!(a.line, b.line, "{what}: lines");
    assert_eq!(a.flags, b.flags, "{what}: flags");
    assert_eq!(a.key_hash, b.key_hash, "{what}: key hashes");
    assert_eq!(a.root_class, b.root_class, "{what}: root class");
    assert_eq!(a.layer, b.layer, "{what}: layers");
    assert_eq!(a.layer_lists, b.layer_lists, "{what}: layer lists");
    assert_eq!(a.op_type, b.op_type, "{what}: op types");
    assert_eq!(a.op_names, b.op_names, "{what}: op names");
    assert_eq!(a.module, b.module, "{what}: modules");
    assert_eq!(a.cols, b.cols, "{what}: columns");
    assert_eq!(a.fields, b.fields, "{what}: fields");
    assert_eq!(a.schema, b.schema, "{what}: schema");
    assert_eq!(a.warnings, b.warnings, "{what}: warnings");
    assert_eq!(a.warning_counts, b.warning_counts, "{what}: warning counts");
    assert_eq!(a.total_lines, b.total_lines, "{what}: lines in all");
    assert_eq!(
        a.ends_with_newline, b.ends_with_newline,
        "{what}: last newline"
    );
}

/// Parses `b` plainly and against the table of `a`, split into chunks at
/// every `step`-th possible size, and asserts the tables are the same.
/// Returns how many of `b`'s rows the unsplit parse against `a` copied.
fn assert_parse_against_is_plain(a: &[u8], b: &[u8], step: usize, what: &str) -> usize {
    let ta = parse_bytes(a.to_vec(), "a.log");
    let plain = parse_bytes(b.to_vec(), "b.log");
    let src = Arc::new(LogSource::Owned(b.to_vec()));
    let mut targets: Vec<usize> = (1..b.len() + 2).step_by(step.max(1)).collect();
    targets.push(b.len() + 1);
    for target in targets {
        let bounds = chunk_bounds(src.bytes(), target);
        let against = parse_chunks_against(src.clone(), "b.log".into(), &bounds, &ta);
        assert_identical(
            &plain,
            &against,
            &format!("{what}, chunks of {target} bytes"),
        );
    }
    copied_rows(&ta, b)
}

/// How many blocks of `b` one unsplit parse against `a`'s table copies.
fn copied_rows(ta: &OpTable, b: &[u8]) -> usize {
    let Some(r) = follow::Reference::new(ta) else {
        return 0;
    };
    let mut f = follow::Follow::new(&r);
    let mut n = 0;
    let mut pos = 0;
    while pos < b.len() {
        let end = memchr::memchr(b'\n', &b[pos..]).map_or(b.len(), |i| pos + i);
        let line = &b[pos..end];
        if line.first() == Some(&b'[') {
            if let Some(c) = f.copy(b, pos, b.len(), line) {
                n += 1;
                pos += c.len;
                continue;
            }
        }
        pos = end + 1;
    }
    n
}

/// A log of `n` blocks in the writers' layout: a Phase line on some
/// (backward, optimizer), an empty Input producers value on some, the
/// optimizer step's rows without a Phase line after the last backward op.
fn varied_log(n: usize, header: &str) -> String {
    let mut s = String::from(header);
    for i in 0..n {
        let module = if i % 7 == 6 {
            "<none>"
        } else {
            "layers.1.attn"
        };
        s.push_str(&format!(
            "[{module}/op_{i}_{}]\n",
            ["mm", "add", "mul_"][i % 3]
        ));
        if i % 4 != 3 {
            s.push_str("  Shape: torch.Size([2, 8]), Dtype: torch.float32\n");
            s.push_str(&format!("  L2 norm: {}.000000e+00\n", i % 10));
            s.push_str("  Min: -1.000000e+00\n  Max: 1.000000e+00\n  Mean: 0.000000e+00\n");
        }
        s.push_str(&format!("  Output hash: {}.500000e+01\n", i % 9 + 1));
        s.push_str("  Input hashes: 1.000000e+00, nan\n");
        s.push_str(if i % 5 == 0 {
            "  Input producers:\n"
        } else {
            "  Input producers: a/op_0_mm;\n"
        });
        let loc = if i + 3 >= n {
            "optim/adamw.py:254"
        } else {
            "model.py:12"
        };
        s.push_str(&format!("  Location: {loc}\n"));
        match i % 6 {
            1 if i + 3 < n => s.push_str("  Phase: backward\n"),
            4 => s.push_str("  Phase: optimizer\n"),
            _ => {}
        }
        s.push('\n');
    }
    s
}

#[test]
fn a_parse_against_a_reference_is_the_plain_parse() {
    const HEADER: &str = "Total captured activations: 40\n\n";
    let a = varied_log(40, HEADER);
    let blocks: Vec<&str> = a.split_inclusive("\n\n").collect();
    let mut cases: Vec<(&str, String)> = vec![
        ("the same log", a.clone()),
        (
            "values changed, one a byte longer",
            a.replacen("  Min: -1.000000e+00", "  Min: -2.000000e+00", 3)
                .replacen("  L2 norm: 4.", "  L2 norm: -4.", 1),
        ),
        (
            "a block inserted",
            format!(
                "{}{}{}",
                blocks[..5].concat(),
                "[x/op_0_mm]\n  Output hash: 1.000000e+00\n\n",
                blocks[5..].concat()
            ),
        ),
        (
            "blocks left out",
            format!("{}{}", blocks[..3].concat(), blocks[9..].concat()),
        ),
        (
            "another header",
            a.replacen(
                HEADER,
                "Total captured activations: 40\nStep: 3\nCompiled: no\n\n",
                1,
            ),
        ),
        ("no header", a.replacen(HEADER, "", 1)),
        ("CR LF line ends", a.replace('\n', "\r\n")),
        ("cut in its last block", a[..a.len() - 30].to_string()),
        ("cut after its last field", a[..a.len() - 1].to_string()),
        (
            "a repeated field",
            a.replacen(
                "  Location: model.py:12\n",
                "  Location: model.py:12\n  Location: model.py:13\n",
                1,
            ),
        ),
        (
            "another root class",
            a.replace("[layers.", "[Model.layers."),
        ),
        (
            "root classes mixed",
            a.replacen("[layers.", "[Model.layers.", 5),
        ),
        (
            "keys swapped",
            a.replacen("op_1_add]", "op_X_add]", 1)
                .replacen("op_2_mul_]", "op_1_add]", 1)
                .replacen("op_X_add]", "op_2_mul_]", 1),
        ),
        (
            "a Phase line changed",
            a.replacen("  Phase: backward\n", "  Phase: optimizer\n", 1),
        ),
        ("a duplicate key", a.replacen("op_3_mm]", "op_0_mm]", 1)),
        (
            "nothing in common",
            varied_log(40, HEADER).replace("layers.1", "layers.2"),
        ),
    ];
    // Either run may be the reference.
    cases.push(("a reference with a repeated field", a.clone()));
    for (what, b) in &cases {
        let reference = if *what == "a reference with a repeated field" {
            &cases[9].1
        } else {
            &a
        };
        assert_parse_against_is_plain(reference.as_bytes(), b.as_bytes(), 23, what);
        assert_parse_against_is_plain(
            b.as_bytes(),
            reference.as_bytes(),
            23,
            &format!("{what} (as the reference)"),
        );
    }
    // The copies happen: the same log copies every block but its last.
    assert_eq!(copied_rows(&table(&a), a.as_bytes()), 39);
    let changed = &cases[1].1;
    let n = copied_rows(&table(&a), changed.as_bytes());
    assert!(
        (33..39).contains(&n),
        "{n} blocks copied of a log with 4 changed"
    );
    let inserted = &cases[2].1;
    assert_eq!(
        copied_rows(&table(&a), inserted.as_bytes()),
        39,
        "found again after an inserted block"
    );
    let mut dropped = table(&a);
    dropped.drop_reference_columns();
    assert_eq!(
        copied_rows(&dropped, a.as_bytes()),
        0,
        "no reference columns, no copies"
    );
    let src = Arc::new(LogSource::Owned(a.as_bytes().to_vec()));
    let bounds = chunk_bounds(src.bytes(), a.len());
    let again = parse_chunks_against(src, "b.log".into(), &bounds, &dropped);
    assert_identical(
        &table(&a),
        &again,
        "against a table whose reference columns are dropped",
    );
    let repeated = &cases[9].1;
    assert_eq!(
        copied_rows(&table(repeated), a.as_bytes()),
        0,
        "a reference with a warning in a block is not copied from"
    );
    assert_eq!(
        copied_rows(&table(&a), cases[6].1.as_bytes()),
        0,
        "CR LF blocks are not the same bytes"
    );
}

#[test]
fn a_parse_against_a_reference_is_the_plain_parse_on_generated_and_real_logs() {
    use crate::gen::{write_log, GenOptions};
    for (seed, perturb) in [(1, 0.0), (2, 0.05), (3, 1.0)] {
        let opts = GenOptions {
            ops: 300,
            seed,
            perturb,
            ..Default::default()
        };
        let (mut a, mut b) = (Vec::new(), Vec::new());
        write_log(&mut a, &opts, 0, 1).unwrap();
        write_log(&mut b, &opts, 0, 2).unwrap();
        let copied =
            assert_parse_against_is_plain(&a, &b, 4093, &format!("generated, perturb {perturb}"));
        if perturb == 0.0 {
            assert_eq!(copied, 299, "every block but the last");
        }
    }
    // Every pair of real logs at hand: this repository's and the shared
    // conformance data's (each run's rank against the other run's).
    let mut dirs = vec![std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata")];
    dirs.push(std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/testdata"));
    let mut pairs = 0;
    for dir in dirs.iter().filter(|d| d.is_dir()) {
        for a in walk(dir)
            .into_iter()
            .filter(|p| p.to_string_lossy().contains("/run_A/"))
        {
            let b = std::path::PathBuf::from(a.to_string_lossy().replace("/run_A/", "/run_B/"));
            let (Ok(a), Ok(b)) = (std::fs::read(&a), std::fs::read(&b)) else {
                continue;
            };
            assert_parse_against_is_plain(&a, &b, 50_000, &b.len().to_string());
            pairs += 1;
        }
    }
    assert!(
        pairs >= 2,
        "the repository's own testdata has run_A/run_B pairs"
    );
}
