//! A loopback kcap-like server for the benchmarks: accepts everything, stores nothing but
//! counters, and records when each line arrived.
//!
//! ```text
//! sink_server [--listen 127.0.0.1:0] [--addr-file PATH] [--watermark N] [--not-found]
//!             [--latency-log PATH] [--done-after-lines N --done-file PATH]
//! ```
//!
//! It answers the routes a watcher uses (docs/behaviour.md A1-A5): the watermark
//! (`GET /api/sessions/{sid}/last-line`: `--watermark N` for every stream, else the highest line
//! this sink received on the stream, else `204`, or `404` with `--not-found` so a child watcher
//! posts `subagent-start` first), `POST /hooks/transcript` (counted, `200`) and any other
//! `POST /hooks/...` (`200`). `GET /stats` returns the counters as JSON. For the Fluent Bit
//! comparison, `POST /records` takes its `http` output in `json_lines` format (one record a
//! line, the tailed line in its `log` field) and counts each record as a line.
//!
//! A line marked by `gen_rollout append` (`"bench_append_ns":T`) gets `seq latency_us` written
//! to `--latency-log`, where the latency is this process's arrival time minus `T` (same
//! machine, same wall clock). With `--done-after-lines N`, the counters are written to
//! `--done-file` (atomically) once N lines have arrived, so a script can wait for a file
//! instead of polling the server.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use axum::Router;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use clap::Parser;
use serde::{Deserialize, Serialize};

#[derive(Parser)]
#[command(about = "Loopback kcap-like sink for the kcap-watch benchmarks")]
struct Args {
    /// Address to listen on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Write the base URL (`http://127.0.0.1:PORT`) here once listening.
    #[arg(long)]
    addr_file: Option<PathBuf>,
    /// Answer every watermark query with this line number.
    #[arg(long)]
    watermark: Option<u64>,
    /// Answer `404` (not `204`) for a stream with no watermark.
    #[arg(long)]
    not_found: bool,
    /// Append `seq latency_us` for each marked line here.
    #[arg(long)]
    latency_log: Option<PathBuf>,
    /// Write the counters to `--done-file` once this many lines have arrived.
    #[arg(long, requires = "done_file")]
    done_after_lines: Option<u64>,
    #[arg(long)]
    done_file: Option<PathBuf>,
}

#[derive(Default, Serialize, Clone)]
struct Stats {
    /// Transcript lines received (resends counted again).
    lines: u64,
    /// Bytes of those lines' text (as shipped, after redaction).
    bytes: u64,
    transcript_posts: u64,
    other_posts: u64,
    watermark_queries: u64,
    /// Streams seen, and the highest line number received over all of them.
    streams: usize,
    max_line: Option<u64>,
    /// Wall-clock nanoseconds of the first and last transcript post's arrival.
    first_ns: Option<u128>,
    last_ns: Option<u128>,
}

struct Sink {
    args: Args,
    stats: Stats,
    highest: HashMap<(String, Option<String>), u64>,
    latency: Option<BufWriter<File>>,
    done: bool,
}

type Shared = Arc<Mutex<Sink>>;

#[derive(Deserialize)]
struct Batch {
    session_id: String,
    agent_id: Option<String>,
    lines: Vec<String>,
    line_numbers: Vec<u64>,
}

#[derive(Deserialize)]
struct WatermarkQuery {
    #[serde(rename = "agentId")]
    agent_id: Option<String>,
}

fn unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn marker(line: &str) -> Option<(u64, u128)> {
    fn num_after(line: &[u8], key: &[u8]) -> Option<u128> {
        let at = memchr::memmem::find(line, key)? + key.len();
        let digits = line[at..].iter().take_while(|b| b.is_ascii_digit()).count();
        std::str::from_utf8(&line[at..at + digits])
            .ok()?
            .parse()
            .ok()
    }
    let b = line.as_bytes();
    let seq = num_after(b, b"\"bench_seq\":")? as u64;
    let t = num_after(b, b"\"bench_append_ns\":")?;
    Some((seq, t))
}

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, Sink> {
    // A panic while holding the lock would already have ended the benchmark run.
    s.lock().unwrap_or_else(|e| e.into_inner())
}

async fn watermark(
    State(s): State<Shared>,
    Path(sid): Path<String>,
    Query(q): Query<WatermarkQuery>,
) -> Response {
    let mut s = lock(&s);
    s.stats.watermark_queries += 1;
    let stored = s.highest.get(&(sid, q.agent_id)).copied();
    match s.args.watermark.max(stored) {
        Some(n) => (
            StatusCode::OK,
            [("content-type", "application/json")],
            format!("{{\"last_line_number\":{n}}}"),
        )
            .into_response(),
        None if s.args.not_found => StatusCode::NOT_FOUND.into_response(),
        None => StatusCode::NO_CONTENT.into_response(),
    }
}

async fn transcript(State(s): State<Shared>, body: axum::body::Bytes) -> Response {
    let arrived = unix_ns();
    let batch: Batch = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("bad batch: {e}")).into_response(),
    };
    if batch.lines.len() != batch.line_numbers.len() {
        return (StatusCode::BAD_REQUEST, "lines and line_numbers differ").into_response();
    }
    let mut guard = lock(&s);
    let sink = &mut *guard;
    let st = &mut sink.stats;
    st.transcript_posts += 1;
    st.lines += batch.lines.len() as u64;
    st.bytes += batch.lines.iter().map(|l| l.len() as u64).sum::<u64>();
    st.first_ns.get_or_insert(arrived);
    st.last_ns = Some(arrived);
    if let Some(&last) = batch.line_numbers.last() {
        st.max_line = st.max_line.max(Some(last));
        let h = sink
            .highest
            .entry((batch.session_id, batch.agent_id))
            .or_insert(last);
        *h = (*h).max(last);
        st.streams = sink.highest.len();
    }
    if let Some(log) = &mut sink.latency {
        for line in &batch.lines {
            if let Some((seq, t)) = marker(line) {
                let _ = writeln!(log, "{seq} {}", arrived.saturating_sub(t) / 1000);
            }
        }
        let _ = log.flush();
    }
    finish_post(sink);
    (StatusCode::OK, "{}").into_response()
}

/// Fluent Bit's `http` output, `format json_lines`: one JSON record a line, the tailed line
/// in `log`. Records are counted by their newlines; only with a latency log is each parsed.
async fn records(State(s): State<Shared>, body: axum::body::Bytes) -> Response {
    let arrived = unix_ns();
    let count = memchr::memchr_iter(b'\n', &body).count()
        + usize::from(body.last().is_some_and(|&b| b != b'\n'));
    let mut guard = lock(&s);
    let sink = &mut *guard;
    let st = &mut sink.stats;
    st.transcript_posts += 1;
    st.lines += count as u64;
    st.bytes += body.len() as u64;
    st.first_ns.get_or_insert(arrived);
    st.last_ns = Some(arrived);
    if let Some(log) = &mut sink.latency {
        for record in body.split(|&b| b == b'\n') {
            let line = serde_json::from_slice::<serde_json::Value>(record)
                .ok()
                .and_then(|v| v.get("log")?.as_str().map(str::to_string));
            if let Some((seq, t)) = line.as_deref().and_then(marker) {
                let _ = writeln!(log, "{seq} {}", arrived.saturating_sub(t) / 1000);
            }
        }
        let _ = log.flush();
    }
    finish_post(sink);
    (StatusCode::OK, "{}").into_response()
}

/// Writes the done file once enough lines arrived.
fn finish_post(sink: &mut Sink) {
    if !sink.done
        && let (Some(n), Some(path)) = (sink.args.done_after_lines, &sink.args.done_file)
        && sink.stats.lines >= n
    {
        sink.done = true;
        let tmp = path.with_extension("tmp");
        let json = serde_json::to_string(&sink.stats).unwrap_or_default();
        if std::fs::write(&tmp, json).is_ok() {
            let _ = std::fs::rename(&tmp, path);
        }
    }
}

async fn other_hook(State(s): State<Shared>) -> Response {
    lock(&s).stats.other_posts += 1;
    (StatusCode::OK, "{}").into_response()
}

async fn stats(State(s): State<Shared>) -> Response {
    let json = serde_json::to_string(&lock(&s).stats).unwrap_or_default();
    ([("content-type", "application/json")], json).into_response()
}

fn main() -> Result<()> {
    let args = Args::parse();
    let latency = match &args.latency_log {
        Some(p) => {
            Some(BufWriter::new(File::create(p).with_context(|| {
                format!("failed to create {}", p.display())
            })?))
        }
        None => None,
    };
    let listen = args.listen;
    let addr_file = args.addr_file.clone();
    let shared: Shared = Arc::new(Mutex::new(Sink {
        args,
        stats: Stats::default(),
        highest: HashMap::new(),
        latency,
        done: false,
    }));
    // One thread: the sink shares the 2 cores with the watcher under test.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("failed to start the runtime")?;
    rt.block_on(async move {
        let app = Router::new()
            .route("/api/sessions/{sid}/last-line", get(watermark))
            .route("/hooks/transcript", post(transcript))
            .route("/hooks/{*rest}", post(other_hook))
            .route("/records", post(records))
            .route("/stats", get(stats))
            // Batches reach about 4 MiB; axum's default limit is 2 MB.
            .layer(DefaultBodyLimit::disable())
            .with_state(shared);
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("failed to listen on {listen}"))?;
        let addr = listener
            .local_addr()
            .context("failed to read the bound address")?;
        let url = format!("http://{addr}");
        match &addr_file {
            Some(p) => {
                let tmp = p.with_extension("tmp");
                std::fs::write(&tmp, &url)
                    .and_then(|_| std::fs::rename(&tmp, p))
                    .with_context(|| format!("failed to write {}", p.display()))?;
            }
            None => println!("{url}"),
        }
        axum::serve(listener, app).await.context("failed to serve")
    })
}
