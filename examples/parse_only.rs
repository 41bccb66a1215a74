//! Parses one log and prints rows and throughput (a profiling aid).
fn main() {
    let p = std::env::args()
        .nth(1)
        .expect("usage: parse_only FILE [serial]");
    let serial = std::env::args().nth(2).is_some();
    let t = std::time::Instant::now();
    let table = if serial {
        actdiff::parser::parse_bytes(std::fs::read(&p).unwrap(), p.clone())
    } else {
        actdiff::parser::parse_path(std::path::Path::new(&p)).unwrap()
    };
    let s = t.elapsed().as_secs_f64();
    let n = table.bytes().len() as f64;
    println!("{} rows {:.3} s {:.0} MB/s", table.len(), s, n / 1e6 / s);
}
