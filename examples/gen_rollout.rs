//! A synthetic Codex rollout for benchmarks, deterministic for a seed; plus the two small
//! tools the latency and CPU benchmarks need (an appender and an arrival stamper).
//!
//! ```text
//! gen_rollout --size 500MB --seed 7 [--out PATH] [--role child|session] [--end open|complete]
//! gen_rollout append PATH... --count 60 --interval 1s [--line-bytes 1024] [--first-seq 0]
//!                   [--targets-log PATH]
//! tail -F -n0 PATH | gen_rollout stamp [--out latencies.txt]
//! ```
//!
//! The content imitates what docs/behaviour.md X describes, because the classifier's and
//! the redactor's costs depend on it: a `session_meta` header with 10-25 KB of instructions,
//! then turns of `turn_context`, `task_started`, the user message, reasoning with
//! `encrypted_content`, `exec_command` calls whose outputs are mostly 1-40 KB of escaped text
//! (quotes, `\n`, tabs, a little non-ASCII), `apply_patch` custom tool calls, `token_count`
//! with rate limits, the agent message and `task_complete`. Some outputs are hundreds of KB and
//! a few lines are several MB (a base64 screenshot in a user message, a `compacted` record),
//! because that is where a line reader that buffers whole lines falls over. A small share of
//! outputs carry secret-looking text so the redactor's slow path runs too.
//!
//! `append` writes one marked line per interval (each in a single `write(2)`), carrying its
//! sequence number and the wall-clock time of the write in nanoseconds
//! (`"bench_seq":N,"bench_append_ns":T`); the loopback sink (`examples/sink_server.rs`) and
//! `stamp` (reading `tail -F` output) subtract that from their arrival time on the same clock.
//! Given several paths, each line goes to one of them picked at random (seeded by
//! `--first-seq`), and `--targets-log` records `seq path_index` per line so latencies can be
//! told apart per file (the supervise benchmark's 50 children).

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufWriter, Write};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(about = "Generate a synthetic Codex rollout (or append marked lines to one)")]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    tool: Option<Tool>,
    #[command(flatten)]
    generate: GenerateArgs,
}

#[derive(clap::Args)]
struct GenerateArgs {
    /// Approximate size (`KB`, `MB`, `GB`, powers of 1024; a bare number is bytes). The last
    /// turn is finished, so the file ends a little past this.
    #[arg(long, default_value = "10MB", value_parser = parse_size)]
    size: u64,
    /// Seed of the generator: the same seed and options give the same bytes.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Output file [default: stdout].
    #[arg(long)]
    out: Option<PathBuf>,
    /// A sub-agent's rollout (thread_source subagent, a parent) or a top-level session's.
    #[arg(long, value_enum, default_value_t = RoleArg::Child)]
    role: RoleArg,
    /// How the file ends: the last turn complete, or open with one tool call in flight.
    #[arg(long, value_enum, default_value_t = End::Complete)]
    end: End,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RoleArg {
    Child,
    Session,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum End {
    Complete,
    Open,
}

#[derive(Subcommand)]
enum Tool {
    /// Append marked lines to a rollout at a steady pace (one `write(2)` per line).
    Append {
        /// The rollout(s); with several, each line goes to a random one.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Lines to append.
        #[arg(long, default_value_t = 60)]
        count: u64,
        /// Pause between lines (`1s`, `20ms`, ...).
        #[arg(long, default_value = "1s", value_parser = parse_interval)]
        interval: Duration,
        /// Approximate size of each line.
        #[arg(long, default_value = "1KB", value_parser = parse_size)]
        line_bytes: u64,
        /// Sequence number of the first line.
        #[arg(long, default_value_t = 0)]
        first_seq: u64,
        /// Write `seq path_index` (0-based, in the order given) for each line here.
        #[arg(long)]
        targets_log: Option<PathBuf>,
    },
    /// Read lines on stdin; for each marked line print `seq latency_us` (arrival - append).
    Stamp {
        /// Write there instead of stdout (flushed per line).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Exit after this many marked lines.
        #[arg(long)]
        count: Option<u64>,
    },
}

fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("bad size {s:?}"))?;
    let mult = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1u64,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        _ => return Err(format!("bad size unit in {s:?} (use KB, MB or GB)")),
    };
    Ok((n * mult as f64) as u64)
}

fn parse_interval(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, mult) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else {
        (t, 1e-3)
    };
    let v: f64 = num.parse().map_err(|_| format!("bad interval {s:?}"))?;
    Ok(Duration::from_secs_f64(v * mult))
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.tool {
        Some(Tool::Append {
            paths,
            count,
            interval,
            line_bytes,
            first_seq,
            targets_log,
        }) => append(
            &paths,
            count,
            interval,
            line_bytes as usize,
            first_seq,
            targets_log,
        ),
        Some(Tool::Stamp { out, count }) => stamp(out, count),
        None => {
            let g = cli.generate;
            let mut out: Box<dyn Write> = match &g.out {
                Some(p) => Box::new(
                    File::create(p).with_context(|| format!("failed to create {}", p.display()))?,
                ),
                None => Box::new(std::io::stdout().lock()),
            };
            generate(&mut out, g.seed, g.size, g.role, g.end)?;
            out.flush().context("failed to write the rollout")?;
            Ok(())
        }
    }
}

/// Writes a rollout of about `size` bytes (also used by `benches/fold.rs`, which includes this
/// file as a module so the benchmark corpus is the one the comparison script measures).
pub fn generate(out: &mut dyn Write, seed: u64, size: u64, role: RoleArg, end: End) -> Result<()> {
    Generator::new(seed, role).write_rollout(out, size, end)
}

// ---------------------------------------------------------------------------------------
// Randomness: SplitMix64, enough for content and reproducible without a dependency.

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
    /// Log-uniform in `[lo, hi]`: many small values, a long tail of large ones.
    fn log_range(&mut self, lo: u64, hi: u64) -> u64 {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        let (l, h) = ((lo.max(1)) as f64, (hi.max(1)) as f64);
        (l.ln() + u * (h.ln() - l.ln())).exp() as u64
    }
    fn pick<'a, T: ?Sized>(&mut self, items: &[&'a T]) -> &'a T {
        items[self.below(items.len() as u64) as usize]
    }
}

// ---------------------------------------------------------------------------------------
// JSON text helpers.

/// Appends `s` as the body of a JSON string (no surrounding quotes).
fn esc(out: &mut String, s: &str) {
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let rep = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0..=0x1f => {
                out.push_str(&s[start..i]);
                out.push_str(&format!("\\u{b:04x}"));
                start = i + 1;
                continue;
            }
            _ => continue,
        };
        out.push_str(&s[start..i]);
        out.push_str(rep);
        start = i + 1;
    }
    out.push_str(&s[start..]);
}

fn escaped(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + s.len() / 8);
    esc(&mut o, s);
    o
}

/// Cuts `s` to at most `max` bytes at a character boundary.
fn cut(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

/// RFC 3339 with milliseconds, UTC, from unix milliseconds.
fn rfc3339(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let sod = secs % 86_400;
    // Civil-from-days (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60,
        ms % 1000
    )
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64ish(rng: &mut Rng, out: &mut String, n: usize) {
    out.reserve(n);
    let mut left = n;
    while left > 0 {
        let mut r = rng.next();
        for _ in 0..10.min(left) {
            out.push(B64[(r & 63) as usize] as char);
            r >>= 6;
            left -= 1;
        }
    }
}

// ---------------------------------------------------------------------------------------
// Vocabulary.

const WORDS: &[&str] = &[
    "handler",
    "request",
    "response",
    "session",
    "token",
    "config",
    "server",
    "client",
    "parse",
    "error",
    "result",
    "value",
    "index",
    "buffer",
    "stream",
    "line",
    "offset",
    "state",
    "retry",
    "backoff",
    "timeout",
    "cache",
    "schema",
    "migration",
    "user",
    "account",
    "billing",
    "invoice",
    "queue",
    "worker",
    "job",
    "event",
    "payload",
    "header",
    "route",
    "middleware",
    "test",
    "fixture",
    "assert",
    "expected",
    "actual",
    "panic",
    "unwrap",
    "option",
    "module",
    "crate",
    "trait",
    "impl",
    "struct",
    "enum",
    "async",
    "await",
    "future",
    "spawn",
    "channel",
    "mutex",
    "lock",
    "file",
    "path",
    "directory",
    "permission",
    "deploy",
    "build",
    "release",
    "the",
    "a",
    "to",
    "of",
    "and",
    "in",
    "is",
    "for",
    "with",
    "that",
    "on",
    "this",
    "it",
    "we",
];
const IDENTS: &[&str] = &[
    "handle_request",
    "parse_header",
    "retry_after",
    "UserAccount",
    "InvoiceLine",
    "build_router",
    "load_config",
    "SessionStore",
    "apply_migration",
    "encode_body",
    "RateLimiter",
    "spawn_worker",
    "read_offset",
    "LineIndex",
    "validate_input",
    "QueueConsumer",
    "to_json",
    "from_row",
];
const DIRS: &[&str] = &[
    "src",
    "src/api",
    "src/db",
    "src/handlers",
    "src/models",
    "tests",
    "crates/core/src",
    "web/src/components",
    "scripts",
    "migrations",
];
const EXTS: &[&str] = &[
    "rs", "ts", "tsx", "py", "go", "sql", "toml", "json", "md", "yaml",
];
const NICKNAMES: &[&str] = &[
    "Hypatia",
    "Turing",
    "Noether",
    "Lovelace",
    "Hopper",
    "Ramanujan",
    "Curie",
    "Euler",
];
const ROLES: &[&str] = &["worker", "explorer", "reviewer", "spec_quality", "tester"];
const UNICODE: &[&str] = &["→", "é", "ü", "✓", "✗", "—", "…", "日本", "🚀", "µs"];
const PROJECTS: &[&str] = &[
    "acme-api",
    "billing-svc",
    "webapp",
    "infra",
    "data-pipeline",
];

fn sentence(rng: &mut Rng, out: &mut String, words: u64) {
    for i in 0..words {
        if i > 0 {
            out.push(' ');
        }
        let w = rng.pick(WORDS);
        if i == 0 {
            let mut c = w.chars();
            if let Some(f) = c.next() {
                out.extend(f.to_uppercase());
                out.push_str(c.as_str());
            }
        } else if rng.chance(0.05) {
            out.push('`');
            out.push_str(rng.pick(IDENTS));
            out.push('`');
        } else {
            out.push_str(w);
        }
    }
    out.push('.');
}

fn prose(rng: &mut Rng, target: usize) -> String {
    let mut s = String::with_capacity(target + 64);
    while s.len() < target {
        let w = rng.range(6, 22);
        sentence(rng, &mut s, w);
        s.push(if rng.chance(0.2) { '\n' } else { ' ' });
    }
    cut(&mut s, target);
    s
}

fn file_path(rng: &mut Rng) -> String {
    format!(
        "{}/{}_{}.{}",
        rng.pick(DIRS),
        rng.pick(WORDS),
        rng.pick(WORDS),
        rng.pick(EXTS)
    )
}

// ---------------------------------------------------------------------------------------
// Tool output bodies (raw text, escaped when written).

fn code_line(rng: &mut Rng, s: &mut String) {
    let indent = rng.below(4) as usize * 4;
    s.extend(std::iter::repeat_n(' ', indent));
    match rng.below(8) {
        0 => s.push_str(&format!(
            "let {} = {}(&{}, \"{}\")?;",
            rng.pick(WORDS),
            rng.pick(IDENTS),
            rng.pick(WORDS),
            rng.pick(WORDS)
        )),
        1 => s.push_str(&format!(
            "fn {}(&self, {}: &str) -> Result<{}, Error> {{",
            rng.pick(IDENTS),
            rng.pick(WORDS),
            rng.pick(IDENTS)
        )),
        2 => s.push_str(&format!("// {}", {
            let mut t = String::new();
            let n = rng.range(4, 12);
            sentence(rng, &mut t, n);
            t
        })),
        3 => s.push_str(&format!(
            "assert_eq!({}.{}, {});",
            rng.pick(WORDS),
            rng.pick(WORDS),
            rng.below(10_000)
        )),
        4 => s.push_str(&format!(
            "map.insert(\"{}\".to_string(), json!({{\"{}\": {}, \"ok\": true}}));",
            rng.pick(WORDS),
            rng.pick(WORDS),
            rng.below(1000)
        )),
        5 => s.push('}'),
        6 => s.push_str(&format!(
            "\tprintln!(\"{{}} {} {{:?}}\", {}, {});",
            rng.pick(UNICODE),
            rng.pick(WORDS),
            rng.pick(WORDS)
        )),
        _ => s.push_str(&format!(
            "if {}.is_empty() {{ return Err(Error::{}(\"{}\".into())); }}",
            rng.pick(WORDS),
            rng.pick(IDENTS),
            rng.pick(WORDS)
        )),
    }
    s.push('\n');
}

fn output_body(rng: &mut Rng, target: usize) -> String {
    let mut s = String::with_capacity(target + 256);
    let kind = rng.below(7);
    let mut n = 0u64;
    while s.len() < target {
        n += 1;
        match kind {
            // cargo test
            0 => {
                if rng.chance(0.03) {
                    s.push_str(&format!(
                        "   Compiling {} v0.{}.{} (/home/dev/src/{})\n",
                        rng.pick(WORDS),
                        rng.below(20),
                        rng.below(10),
                        rng.pick(PROJECTS)
                    ));
                } else if rng.chance(0.02) {
                    s.push_str(&format!(
                        "---- tests::{}_{n:04} stdout ----\nthread 'tests::{}' panicked at {}:{}:{}:\nassertion `left == right` failed\n  left: \"{}\"\n right: \"{}\"\n",
                        rng.pick(IDENTS),
                        rng.pick(IDENTS),
                        file_path(rng),
                        rng.below(900),
                        rng.below(80),
                        rng.pick(WORDS),
                        rng.pick(WORDS)
                    ));
                } else {
                    s.push_str(&format!(
                        "test {}::{}_{n:04} ... {}\n",
                        rng.pick(WORDS),
                        rng.pick(IDENTS),
                        if rng.chance(0.97) { "ok" } else { "FAILED" }
                    ));
                }
            }
            // ripgrep
            1 => {
                s.push_str(&format!("{}:{}:", file_path(rng), rng.range(1, 2000)));
                code_line(rng, &mut s);
            }
            // cat of a source file
            2 => code_line(rng, &mut s),
            // git diff / log
            3 => {
                if n.is_multiple_of(20) {
                    s.push_str(&format!(
                        "diff --git a/{0} b/{0}\nindex {1:07x}..{2:07x} 100644\n--- a/{0}\n+++ b/{0}\n@@ -{3},7 +{3},8 @@\n",
                        file_path(rng),
                        rng.below(1 << 28),
                        rng.below(1 << 28),
                        rng.below(500)
                    ));
                }
                s.push(match rng.below(4) {
                    0 => '+',
                    1 => '-',
                    _ => ' ',
                });
                code_line(rng, &mut s);
            }
            // JSON output (heavy escaping)
            4 => s.push_str(&format!(
                "{{\"id\": {}, \"name\": \"{}\", \"status\": \"{}\", \"tags\": [\"{}\", \"{}\"], \"path\": \"/home/dev/src/{}\", \"ratio\": {}.{}}}\n",
                rng.below(100_000),
                rng.pick(IDENTS),
                rng.pick(&["active", "pending", "failed", "done"]),
                rng.pick(WORDS),
                rng.pick(WORDS),
                file_path(rng),
                rng.below(100),
                rng.below(1000)
            )),
            // ls -la / find
            5 => s.push_str(&format!(
                "-rw-r--r--  1 dev dev {:>8} Jul {:>2} {:02}:{:02} {}\n",
                rng.below(200_000),
                rng.range(1, 28),
                rng.below(24),
                rng.below(60),
                file_path(rng)
            )),
            // build log with prose
            _ => {
                s.push_str(&format!(
                    "[{:>5}ms] {} ",
                    rng.below(99_999),
                    rng.pick(&["INFO", "DEBUG", "WARN", "INFO", "INFO"])
                ));
                let w = rng.range(5, 15);
                sentence(rng, &mut s, w);
                s.push('\n');
            }
        }
    }
    cut(&mut s, target);
    s
}

/// Text that the redactor must catch (rare, like in real outputs).
fn secretish(rng: &mut Rng) -> String {
    let mut tok = String::new();
    base64ish(rng, &mut tok, 36);
    let tok: String = tok.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    match rng.below(5) {
        0 => format!("GITHUB_TOKEN=ghp_{tok}\nDATABASE_PASSWORD=hunter2-{tok}\n"),
        1 => format!("> Authorization: Bearer sk-proj-{tok}\n> Cookie: session={tok}\n"),
        2 => format!(
            "export AWS_ACCESS_KEY_ID=AKIA{}\n",
            &tok[..16.min(tok.len())].to_uppercase()
        ),
        3 => format!(
            "url = \"https://deploy:{tok}@git.example.com/acme/api.git?access_token={tok}\"\n"
        ),
        _ => format!(
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEow{tok}\n{tok}{tok}\n-----END RSA PRIVATE KEY-----\n"
        ),
    }
}

// ---------------------------------------------------------------------------------------
// The rollout.

struct Generator {
    rng: Rng,
    role: RoleArg,
    /// Unix milliseconds of the next line.
    now_ms: u64,
    thread_id: String,
    parent_id: String,
    cwd: String,
    call_seq: u64,
    input_tokens: u64,
    output_tokens: u64,
    written: u64,
    next_big_at: u64,
    big_count: u64,
    line: String,
}

impl Generator {
    fn new(seed: u64, role: RoleArg) -> Generator {
        let mut rng = Rng(seed ^ 0x5EED_F00D_C0DE);
        // 2026-07-28 plus up to ~3 months, by seed.
        let now_ms = 1_785_254_400_000 + rng.below(90 * 86_400) * 1000;
        let thread_id = uuid7(&mut rng, now_ms);
        let parent_id = uuid7(&mut rng, now_ms - 60_000);
        let cwd = format!("/home/dev/src/{}", rng.pick(PROJECTS));
        Generator {
            rng,
            role,
            now_ms,
            thread_id,
            parent_id,
            cwd,
            call_seq: 0,
            input_tokens: 9000,
            output_tokens: 0,
            written: 0,
            next_big_at: 0,
            big_count: 0,
            line: String::with_capacity(1 << 20),
        }
    }

    fn tick(&mut self, lo_ms: u64, hi_ms: u64) -> String {
        self.now_ms += self.rng.range(lo_ms, hi_ms);
        rfc3339(self.now_ms)
    }

    /// Starts a line: `{"timestamp":...,"type":KIND,"payload":{` (payload left open).
    fn begin(&mut self, kind: &str, lo_ms: u64, hi_ms: u64) {
        let ts = self.tick(lo_ms, hi_ms);
        self.line.clear();
        self.line.push_str("{\"timestamp\":\"");
        self.line.push_str(&ts);
        self.line.push_str("\",\"type\":\"");
        self.line.push_str(kind);
        self.line.push_str("\",\"payload\":{");
    }

    fn finish(&mut self, out: &mut dyn Write) -> Result<()> {
        self.line.push_str("}}\n");
        out.write_all(self.line.as_bytes())
            .context("failed to write the rollout")?;
        self.written += self.line.len() as u64;
        Ok(())
    }

    fn write_rollout(&mut self, out: &mut dyn Write, size: u64, end: End) -> Result<()> {
        // A few multi-MB lines: roughly one per 60 MB, the first after a fifth of the file.
        self.next_big_at = (size / 5).max(4 << 20);
        self.session_meta(out)?;
        while self.written < size {
            self.turn(out, size, false)?;
        }
        if end == End::Open {
            self.turn(out, size, true)?;
        }
        Ok(())
    }

    fn session_meta(&mut self, out: &mut dyn Write) -> Result<()> {
        let instr_len = self.rng.range(10 << 10, 25 << 10) as usize;
        let instructions = {
            let mut s = String::from(
                "You are Codex, a coding agent based on GPT-5. You and the user share the same workspace.\n\n## General\n\n",
            );
            let p = prose(&mut self.rng, instr_len);
            s.push_str(&p);
            s
        };
        let ts = rfc3339(self.now_ms);
        let id = self.thread_id.clone();
        self.begin("session_meta", 0, 0);
        let l = &mut self.line;
        l.push_str(&format!(
            "\"id\":\"{id}\",\"timestamp\":\"{ts}\",\"cwd\":\"{}\",\"originator\":\"codex_cli_rs\",\"cli_version\":\"0.145.0\",\"instructions\":\"",
            self.cwd
        ));
        esc(l, &instructions);
        l.push_str("\",\"model_provider\":\"openai\",");
        match self.role {
            RoleArg::Child => {
                let nick = self.rng.pick(NICKNAMES);
                let role = self.rng.pick(ROLES);
                l.push_str(&format!(
                    "\"session_id\":\"{p}\",\"parent_thread_id\":\"{p}\",\"thread_source\":\"subagent\",\"source\":{{\"subagent\":{{\"thread_spawn\":{{\"parent_thread_id\":\"{p}\",\"depth\":1,\"agent_nickname\":\"{nick}\",\"agent_role\":\"{role}\"}}}}}},\"agent_path\":\"/root/{role}\",\"agent_nickname\":\"{nick}\",\"agent_role\":\"{role}\"",
                    p = self.parent_id
                ));
            }
            RoleArg::Session => {
                l.push_str(&format!("\"session_id\":\"{id}\",\"source\":\"cli\""));
            }
        }
        l.push_str(&format!(
            ",\"git\":{{\"commit_hash\":\"{:016x}{:016x}\",\"branch\":\"main\",\"repository_url\":\"git@github.com:acme/{}.git\"}}",
            self.rng.next(),
            self.rng.next(),
            self.rng.pick(PROJECTS)
        ));
        self.finish(out)
    }

    fn turn(&mut self, out: &mut dyn Write, size: u64, open: bool) -> Result<()> {
        let turn_id = uuid7(&mut self.rng, self.now_ms);
        let cwd = self.cwd.clone();
        // turn_context
        self.begin("turn_context", 60_000, 600_000);
        let dev = prose(&mut self.rng, 1500);
        self.line.push_str(&format!(
            "\"turn_id\":\"{turn_id}\",\"cwd\":\"{cwd}\",\"approval_policy\":\"never\",\"sandbox_policy\":{{\"type\":\"workspace-write\",\"writable_roots\":[\"{cwd}\"],\"network_access\":false}},\"model\":\"gpt-5.3-codex\",\"effort\":\"medium\",\"summary\":\"auto\",\"developer_instructions\":\""
        ));
        esc(&mut self.line, &dev);
        self.line.push('"');
        self.finish(out)?;
        // task_started
        self.begin("event_msg", 50, 200);
        self.line.push_str(&format!(
            "\"type\":\"task_started\",\"turn_id\":\"{turn_id}\",\"started_at\":{},\"model_context_window\":272000",
            self.now_ms / 1000
        ));
        self.finish(out)?;
        // user message (response_item + event)
        let ask_len = self.rng.log_range(40, 3000) as usize;
        let ask = prose(&mut self.rng, ask_len);
        let big_image = self.written >= self.next_big_at && self.big_count.is_multiple_of(2);
        self.begin("response_item", 50, 200);
        self.line
            .push_str("\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"");
        esc(&mut self.line, &ask);
        self.line.push_str("\"}");
        if big_image {
            // A screenshot pasted into the prompt: a line of several MB.
            let n = self.big_len(size);
            self.line.push_str(
                ",{\"type\":\"input_image\",\"image_url\":\"data:image/png;base64,iVBORw0KGgo",
            );
            base64ish(&mut self.rng, &mut self.line, n);
            self.line.push_str("\"}");
            self.big_done();
        }
        self.line.push(']');
        self.finish(out)?;
        self.begin("event_msg", 10, 100);
        self.line
            .push_str("\"type\":\"user_message\",\"message\":\"");
        esc(&mut self.line, &ask);
        self.line.push_str("\",\"images\":[]");
        self.finish(out)?;
        self.token_count(out)?;

        let steps = self.rng.range(3, 30);
        for step in 0..steps {
            self.reasoning(out)?;
            let last_step = step + 1 == steps;
            if open && last_step {
                // Ends with a call in flight and the turn open.
                self.exec_call(out, false)?;
                return Ok(());
            }
            if self.rng.chance(0.18) {
                self.apply_patch(out)?;
            } else {
                self.exec_call(out, true)?;
            }
            self.token_count(out)?;
            if self.rng.chance(0.15) {
                self.agent_message(out, 200)?;
            }
        }
        if self.written >= self.next_big_at && !self.big_count.is_multiple_of(2) {
            self.compacted(out, size)?;
        }
        let msg_len = self.rng.log_range(80, 4000) as usize;
        let msg = self.agent_message(out, msg_len)?;
        self.token_count(out)?;
        self.begin("event_msg", 50, 200);
        self.line.push_str(&format!(
            "\"type\":\"task_complete\",\"turn_id\":\"{turn_id}\",\"last_agent_message\":\""
        ));
        esc(&mut self.line, &msg);
        self.line.push('"');
        self.finish(out)
    }

    fn big_len(&mut self, size: u64) -> usize {
        // Several MB, but never more than a tenth of a small file.
        (self
            .rng
            .range(2 << 20, 6 << 20)
            .min(size / 10)
            .max(100 << 10)) as usize
    }

    fn big_done(&mut self) {
        self.big_count += 1;
        self.next_big_at = self.written + self.rng.range(40 << 20, 80 << 20);
    }

    fn reasoning(&mut self, out: &mut dyn Write) -> Result<()> {
        let id = self.rng.next();
        self.begin("response_item", 500, 8000);
        let title = {
            let mut t = String::new();
            let n = self.rng.range(2, 5);
            sentence(&mut self.rng, &mut t, n);
            t
        };
        let n = self.rng.log_range(600, 12_000) as usize;
        let summary_len = self.rng.range(0, 600) as usize;
        let summary = prose(&mut self.rng, summary_len);
        self.line.push_str(&format!(
            "\"type\":\"reasoning\",\"id\":\"rs_{id:016x}\",\"summary\":[{{\"type\":\"summary_text\",\"text\":\"**{}**\\n\\n",
            escaped(title.trim_end_matches('.'))
        ));
        esc(&mut self.line, &summary);
        self.line
            .push_str("\"}],\"content\":null,\"encrypted_content\":\"gAAAAAB");
        base64ish(&mut self.rng, &mut self.line, n);
        self.line.push('"');
        self.finish(out)
    }

    fn call_id(&mut self) -> String {
        self.call_seq += 1;
        let mut s = String::from("call_");
        let mut r = self.rng.next();
        for _ in 0..10 {
            s.push(B64[(r % 62) as usize] as char);
            r /= 62;
        }
        s.push_str(&format!("{:06}", self.call_seq));
        s
    }

    fn exec_call(&mut self, out: &mut dyn Write, answered: bool) -> Result<()> {
        let call_id = self.call_id();
        let cmd = match self.rng.below(8) {
            0 => format!(
                "cargo test -p {} {}",
                rng_word(&mut self.rng),
                rng_word(&mut self.rng)
            ),
            1 => format!(
                "rg -n \"{}\" {}",
                rng_ident(&mut self.rng),
                self.rng.pick(DIRS)
            ),
            2 => format!("sed -n '1,200p' {}", file_path(&mut self.rng)),
            3 => "git status --short && git diff".to_string(),
            4 => format!("ls -la {}", self.rng.pick(DIRS)),
            5 => format!("cat {}", file_path(&mut self.rng)),
            6 => "npm run build 2>&1 | tail -n 200".to_string(),
            _ => format!(
                "python3 -m pytest -x -q tests/test_{}.py",
                rng_word(&mut self.rng)
            ),
        };
        let args = format!(
            "{{\"cmd\":\"{}\",\"workdir\":\"{}\",\"yield_time_ms\":10000,\"max_output_tokens\":10000}}",
            escaped(&cmd),
            self.cwd
        );
        self.begin("response_item", 300, 5000);
        // Codex writes `arguments` before `call_id`.
        self.line
            .push_str("\"type\":\"function_call\",\"name\":\"exec_command\",\"arguments\":\"");
        esc(&mut self.line, &args);
        self.line.push_str(&format!("\",\"call_id\":\"{call_id}\""));
        self.finish(out)?;
        if !answered {
            return Ok(());
        }
        // Mostly 1-40 KB (Codex caps tool output around there), sometimes hundreds of KB.
        let len = if self.rng.chance(0.02) {
            self.rng.range(100 << 10, 600 << 10)
        } else {
            self.rng.log_range(1 << 10, 40 << 10)
        } as usize;
        let mut body = format!(
            "Chunk ID: {:06x}\nWall time: {}.{:04} seconds\nProcess exited with code {}\nOriginal token count: {}\nOutput:\n",
            self.rng.below(1 << 24),
            self.rng.below(30),
            self.rng.below(10_000),
            if self.rng.chance(0.85) { 0 } else { 1 },
            len / 4
        );
        if self.rng.chance(0.01) {
            body.push_str(&secretish(&mut self.rng));
        }
        body.push_str(&output_body(&mut self.rng, len));
        self.begin("response_item", 100, 30_000);
        self.line.push_str(&format!(
            "\"type\":\"function_call_output\",\"call_id\":\"{call_id}\",\"output\":\""
        ));
        esc(&mut self.line, &body);
        self.line.push('"');
        self.finish(out)
    }

    fn apply_patch(&mut self, out: &mut dyn Write) -> Result<()> {
        let call_id = self.call_id();
        let path = file_path(&mut self.rng);
        let mut patch = format!("*** Begin Patch\n*** Update File: {path}\n");
        let hunks = self.rng.range(1, 6);
        for _ in 0..hunks {
            patch.push_str("@@\n");
            for _ in 0..self.rng.range(2, 30) {
                patch.push(match self.rng.below(3) {
                    0 => '+',
                    1 => '-',
                    _ => ' ',
                });
                code_line(&mut self.rng, &mut patch);
            }
        }
        patch.push_str("*** End Patch\n");
        self.begin("response_item", 500, 20_000);
        self.line.push_str(&format!(
            "\"type\":\"custom_tool_call\",\"status\":\"completed\",\"call_id\":\"{call_id}\",\"name\":\"apply_patch\",\"input\":\""
        ));
        esc(&mut self.line, &patch);
        self.line.push('"');
        self.finish(out)?;
        let result = format!(
            "{{\"output\":\"Success. Updated the following files:\\nM {path}\\n\",\"metadata\":{{\"exit_code\":0,\"duration_seconds\":0.{}}}}}",
            self.rng.below(1000)
        );
        self.begin("response_item", 20, 300);
        self.line.push_str(&format!(
            "\"type\":\"custom_tool_call_output\",\"call_id\":\"{call_id}\",\"output\":\""
        ));
        esc(&mut self.line, &result);
        self.line.push('"');
        self.finish(out)?;
        self.begin("event_msg", 5, 50);
        self.line.push_str(&format!(
            "\"type\":\"patch_apply_end\",\"call_id\":\"{call_id}\",\"stdout\":\"M {path}\\n\",\"stderr\":\"\",\"success\":true"
        ));
        self.finish(out)
    }

    fn token_count(&mut self, out: &mut dyn Write) -> Result<()> {
        let last_in = self.rng.range(500, 20_000);
        let last_out = self.rng.range(20, 2000);
        self.input_tokens += last_in;
        self.output_tokens += last_out;
        let reset = self.now_ms / 1000 + 3600 * 3;
        self.begin("event_msg", 50, 400);
        self.line.push_str(&format!(
            "\"type\":\"token_count\",\"info\":{{\"total_token_usage\":{{\"input_tokens\":{i},\"cached_input_tokens\":{c},\"output_tokens\":{o},\"reasoning_output_tokens\":{r},\"total_tokens\":{t}}},\"last_token_usage\":{{\"input_tokens\":{li},\"cached_input_tokens\":{lc},\"output_tokens\":{lo},\"reasoning_output_tokens\":0,\"total_tokens\":{lt}}},\"model_context_window\":272000}},\"rate_limits\":{{\"limit_id\":\"codex\",\"limit_name\":null,\"primary\":{{\"used_percent\":{p}.0,\"window_minutes\":300,\"resets_at\":{reset}}},\"secondary\":{{\"used_percent\":{s}.0,\"window_minutes\":10080,\"resets_at\":{reset2}}},\"credits\":null,\"plan_type\":\"pro\",\"rate_limit_reached_type\":null}}",
            i = self.input_tokens,
            c = self.input_tokens * 3 / 4,
            o = self.output_tokens,
            r = self.output_tokens / 3,
            t = self.input_tokens + self.output_tokens,
            li = last_in,
            lc = last_in / 2,
            lo = last_out,
            lt = last_in + last_out,
            p = self.rng.below(90),
            s = self.rng.below(60),
            reset2 = reset + 86_400 * 3,
        ));
        self.finish(out)
    }

    fn agent_message(&mut self, out: &mut dyn Write, len: usize) -> Result<String> {
        let mut msg = prose(&mut self.rng, len);
        if self.rng.chance(0.3) {
            msg.push_str(&format!(
                "\n\n- `{}`: {} {}\n",
                file_path(&mut self.rng),
                self.rng.pick(UNICODE),
                rng_ident(&mut self.rng)
            ));
        }
        self.begin("response_item", 500, 10_000);
        self.line.push_str(
            "\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"",
        );
        esc(&mut self.line, &msg);
        self.line.push_str("\"}]");
        self.finish(out)?;
        self.begin("event_msg", 5, 50);
        self.line
            .push_str("\"type\":\"agent_message\",\"message\":\"");
        esc(&mut self.line, &msg);
        self.line.push('"');
        self.finish(out)?;
        Ok(msg)
    }

    /// A `compacted` record: the summary plus the replacement history (several MB).
    fn compacted(&mut self, out: &mut dyn Write, size: u64) -> Result<()> {
        let target = self.big_len(size);
        let summary = prose(&mut self.rng, 4000);
        self.begin("compacted", 1000, 5000);
        self.line.push_str("\"message\":\"");
        esc(&mut self.line, &summary);
        self.line.push_str("\",\"replacement_history\":[");
        let start = self.line.len();
        let mut first = true;
        while self.line.len() - start < target {
            if !first {
                self.line.push(',');
            }
            first = false;
            let role = if self.rng.chance(0.5) {
                "user"
            } else {
                "assistant"
            };
            let len = self.rng.log_range(200, 40_000) as usize;
            let text = output_body(&mut self.rng, len);
            self.line.push_str(&format!(
                "{{\"type\":\"message\",\"role\":\"{role}\",\"content\":[{{\"type\":\"{}\",\"text\":\"",
                if role == "user" { "input_text" } else { "output_text" }
            ));
            esc(&mut self.line, &text);
            self.line.push_str("\"}]}");
        }
        self.line.push(']');
        self.big_done();
        self.finish(out)
    }
}

fn rng_word(rng: &mut Rng) -> &'static str {
    rng.pick(WORDS)
}

fn rng_ident(rng: &mut Rng) -> &'static str {
    rng.pick(IDENTS)
}

/// A version-7-shaped UUID (time prefix, random rest).
fn uuid7(rng: &mut Rng, ms: u64) -> String {
    let r = rng.next();
    let r2 = rng.next();
    format!(
        "{:08x}-{:04x}-7{:03x}-{:04x}-{:012x}",
        (ms >> 16) as u32,
        (ms & 0xffff) as u16,
        r & 0xfff,
        0x8000 | ((r >> 12) & 0x3fff),
        r2 & 0xffff_ffff_ffff
    )
}

// ---------------------------------------------------------------------------------------
// append and stamp.

fn unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn append(
    paths: &[PathBuf],
    count: u64,
    interval: Duration,
    line_bytes: usize,
    first_seq: u64,
    targets_log: Option<PathBuf>,
) -> Result<()> {
    let mut files = Vec::with_capacity(paths.len());
    for path in paths {
        files.push(
            OpenOptions::new()
                .append(true)
                .open(path)
                .with_context(|| format!("failed to open {} for appending", path.display()))?,
        );
    }
    let mut targets = match &targets_log {
        Some(p) => {
            Some(BufWriter::new(File::create(p).with_context(|| {
                format!("failed to create {}", p.display())
            })?))
        }
        None => None,
    };
    let mut rng = Rng(first_seq ^ 0x00A9_9E4D);
    let pad = prose(&mut rng, line_bytes.saturating_sub(200));
    let pad = escaped(&pad);
    let start = std::time::Instant::now();
    for i in 0..count {
        // Paced against the start, so a slow write does not stretch the run.
        let due = start + interval * i as u32;
        if let Some(wait) = due.checked_duration_since(std::time::Instant::now()) {
            std::thread::sleep(wait);
        }
        let seq = first_seq + i;
        let t = unix_ns();
        let line = format!(
            "{{\"timestamp\":\"{}\",\"type\":\"event_msg\",\"payload\":{{\"type\":\"agent_message\",\"bench_seq\":{seq},\"bench_append_ns\":{t},\"message\":\"{pad}\"}}}}\n",
            rfc3339((t / 1_000_000) as u64)
        );
        let target = if files.len() > 1 {
            rng.below(files.len() as u64) as usize
        } else {
            0
        };
        // One write(2) per line, as Codex writes a small line.
        files[target]
            .write_all(line.as_bytes())
            .with_context(|| format!("failed to append to {}", paths[target].display()))?;
        if let Some(t) = &mut targets {
            writeln!(t, "{seq} {target}").context("failed to write the targets log")?;
        }
    }
    if let Some(mut t) = targets {
        t.flush().context("failed to write the targets log")?;
    }
    Ok(())
}

/// The `(seq, append_ns)` a marked line carries.
fn marker(line: &[u8]) -> Option<(u64, u128)> {
    fn num_after(line: &[u8], key: &[u8]) -> Option<u128> {
        let at = memchr::memmem::find(line, key)? + key.len();
        let digits = line[at..].iter().take_while(|b| b.is_ascii_digit()).count();
        std::str::from_utf8(&line[at..at + digits])
            .ok()?
            .parse()
            .ok()
    }
    let seq = num_after(line, b"\"bench_seq\":")? as u64;
    let t = num_after(line, b"\"bench_append_ns\":")?;
    Some((seq, t))
}

fn stamp(out: Option<PathBuf>, count: Option<u64>) -> Result<()> {
    let mut w: Box<dyn Write> = match out {
        Some(p) => Box::new(BufWriter::new(
            File::create(&p).with_context(|| format!("failed to create {}", p.display()))?,
        )),
        None => Box::new(std::io::stdout().lock()),
    };
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut buf = Vec::new();
    let mut seen = 0;
    loop {
        buf.clear();
        let n = input
            .read_until(b'\n', &mut buf)
            .context("failed to read stdin")?;
        if n == 0 {
            break;
        }
        let now = unix_ns();
        if let Some((seq, t)) = marker(&buf) {
            writeln!(w, "{seq} {}", now.saturating_sub(t) / 1000)?;
            w.flush()?;
            seen += 1;
            if count.is_some_and(|c| seen >= c) {
                break;
            }
        }
    }
    if seen == 0 {
        bail!("no marked line arrived on stdin");
    }
    Ok(())
}
