//! Throughput of the seeding path on a ~50 MB synthetic rollout held in memory: the line
//! reader alone, classification alone (whole lines, one reused classifier), reader +
//! classification + fold (what `inspect` and a watcher's start-up do), and redaction of every
//! line, alone and followed by the JSON-string encoding a batch body needs (the shipping
//! path). Throughput is counted in bytes of the whole corpus.
//!
//! `cargo bench --bench fold`. The corpus is `examples/gen_rollout.rs` at seed 42, the same
//! generator `benches/compare.sh` measures the binary with. `KCAP_BENCH_MB` changes its size.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kcap_watch::codex::Classifier;
use kcap_watch::fold::State;
use kcap_watch::fold::seed::{LineTimes, seed};
use kcap_watch::ship::outbox::ShipLine;
use kcap_watch::ship::{LINE_LIMIT, redact};
use kcap_watch::tail::{LineEnd, LineReader, LineSink};
use kcap_watch::time::Ts;

#[allow(dead_code)]
#[path = "../examples/gen_rollout.rs"]
mod gen_rollout;

fn corpus() -> Vec<u8> {
    let mb: u64 = std::env::var("KCAP_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let mut out = Vec::with_capacity((mb as usize + 8) << 20);
    // Writing into a Vec cannot fail.
    gen_rollout::generate(
        &mut out,
        42,
        mb << 20,
        gen_rollout::RoleArg::Child,
        gen_rollout::End::Open,
    )
    .expect("generating into memory cannot fail");
    out
}

/// The corpus's lines (without `\n`), found with the same vectorised search the reader uses,
/// so the per-line benchmarks measure the line's processing, not the split.
fn lines(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut start = 0;
    memchr::memchr_iter(b'\n', data).map(move |end| {
        let line = &data[start..end];
        start = end + 1;
        line
    })
}

/// A sink that only counts lines: what the reader costs by itself.
struct CountLines(u64);

impl LineSink for CountLines {
    fn chunk(&mut self, _: &[u8]) {}

    fn end(&mut self, line: LineEnd<'_>) {
        self.0 += u64::from(!line.blank);
    }
}

/// The reader alone, handing each line's text to a sink that looks at none of it.
fn read_lines(data: &[u8]) -> u64 {
    let mut reader = LineReader::new(0, 0, LINE_LIMIT);
    let mut sink = CountLines(0);
    while !reader
        .read(data, 4096, &mut sink)
        .expect("reading from memory cannot fail")
        .at_eof
    {}
    sink.0
}

/// What a watcher's start-up and `inspect` do: stream complete lines, classify and fold each.
fn seed_fold(data: &[u8]) -> State {
    let at = Ts::from_millis(1_785_254_400_000);
    seed(data, data.len() as u64, LineTimes::All(at), LINE_LIMIT)
        .expect("reading from memory cannot fail")
        .state
}

fn bench(c: &mut Criterion) {
    let data = corpus();
    let n_lines = lines(&data).count();
    eprintln!(
        "corpus: {:.1} MB, {n_lines} lines",
        data.len() as f64 / (1 << 20) as f64
    );
    let mut g = c.benchmark_group("seed");
    g.throughput(Throughput::Bytes(data.len() as u64));
    g.sample_size(10);
    g.bench_function("reader_only", |b| {
        b.iter(|| black_box(read_lines(black_box(&data))))
    });
    g.bench_function("classify_lines", |b| {
        // One classifier for every line, as the tail reader uses it.
        let mut c = Classifier::new();
        b.iter(|| {
            let mut calls = 0usize;
            for line in lines(black_box(&data)) {
                c.feed(line);
                calls += usize::from(c.finish().call_id.is_some());
            }
            black_box(calls)
        })
    });
    g.bench_function("reader_classify_fold", |b| {
        b.iter(|| black_box(seed_fold(black_box(&data))))
    });
    g.bench_function("redact_lines", |b| {
        let r = redact::global();
        b.iter(|| {
            let mut bytes = 0usize;
            for line in lines(black_box(&data)) {
                bytes += r.redact_line(line).len();
            }
            black_box(bytes)
        })
    });
    g.bench_function("redact_and_encode_lines", |b| {
        // What the shipping cursor does per line before batching: redact, then encode as a
        // JSON string for the request body.
        let r = redact::global();
        b.iter(|| {
            let mut bytes = 0usize;
            for (n, line) in lines(black_box(&data)).enumerate() {
                bytes += ShipLine::new(n as u64, &r.redact_line(line)).json.len();
            }
            black_box(bytes)
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
