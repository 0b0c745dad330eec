//! Redaction throughput on rollout-like lines: `cargo bench --bench redact`.
//!
//! Targets (docs/redaction.md, "Speed"): at least 400 MB/s on secret-free tool output (`quiet_*`, `noisy_*`) and
//! at least 100 MB/s on output dense with secrets (`dense_*`).
//!
//! Every shipped line goes through the redactor, and almost none holds a secret, so the
//! secret-free lines are the ones that must be fast. "Quiet" output is shell output with a
//! keyword only where such output has one (`Author:` of `git log`, `sk` inside `TaskStarted`);
//! "noisy" output mentions tokens, keys and URLs the way source code and logs do; both send
//! the line down the JSON-aware path with nothing to redact. `plain_10k` holds no keyword at
//! all: the floor, the keyword scan alone.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kcap_watch::ship::capture;
use kcap_watch::ship::redact::global;

const QUIET_OUTPUT: &[&str] = &[
    "   Compiling serde_derive v1.0.219",
    "   Compiling tokio v1.47.1",
    "    Finished `dev` profile [unoptimized + debuginfo] target(s) in 12.34s",
    "drwxr-xr-x  5 dev dev  4096 Jul 28 16:14 src",
    "-rw-r--r--  1 dev dev 18234 Jul 28 16:14 Cargo.lock",
    "commit 3f9c2a1b7d4e5f60718293a4b5c6d7e8f9012345",
    "Author: Dev Person <dev@example.com>",
    "    fix: handle partial last line in the tail reader",
    "fn fold_line(state: &mut State, line: &LineInfo) -> Result<(), Error> {",
    "    let turn = state.turn.get_or_insert_with(Turn::default);",
    "    match line.payload_type { PayloadType::TaskStarted => turn.open(line.ts), _ => {} }",
    "test fold::tests::reengagement_opens_a_new_turn ... ok",
    "warning: unused variable: `offset` --> src/tail/mod.rs:88:13",
    "\tmodified:   src/ship/mod.rs",
    "Ünïcödé output: 日本語のテキスト — ok ✓",
];

/// Quiet output with a trigger word every few lines, as in source code and logs.
const NOISY_OUTPUT: &[&str] = &[
    "   Compiling serde_derive v1.0.219",
    "    let total = usage.input_tokens + usage.output_tokens;",
    "drwxr-xr-x  5 dev dev  4096 Jul 28 16:14 src",
    "-rw-r--r--  1 dev dev 18234 Jul 28 16:14 Cargo.lock",
    "Fetching https://docs.example.com/api/reference.html",
    "fn fold_line(state: &mut State, line: &LineInfo) -> Result<(), Error> {",
    "    let turn = state.turn.get_or_insert_with(Turn::default);",
    "    fn parse_cookie_header(raw: &str) -> Vec<Cookie> {",
    "test fold::tests::reengagement_opens_a_new_turn ... ok",
    "warning: unused variable: `offset` --> src/tail/mod.rs:88:13",
    "src/auth/credentials.rs:42: warning: unused import",
    "\tmodified:   src/ship/mod.rs",
];

/// A `function_call_output` line whose output is `target` bytes of shell output.
fn tool_output_line(lines: &[&str], target: usize) -> String {
    tool_output_line_ending(lines, target, "")
}

/// Like [`tool_output_line`], with `last` at the end of the output.
fn tool_output_line_ending(lines: &[&str], target: usize, last: &str) -> String {
    let mut output = String::new();
    let mut i = 0;
    while output.len() < target {
        output.push_str(lines[i % lines.len()]);
        output.push('\n');
        i += 1;
    }
    output.push_str(last);
    let payload = serde_json::json!({
        "type": "function_call_output",
        "call_id": "call_Q2mY8eX3vK1pZ7rT4wN6",
        "output": serde_json::json!({"output": output, "metadata": {"exit_code": 0, "duration_seconds": 1.2}}).to_string(),
    });
    serde_json::json!({"timestamp": "2026-07-28T16:14:05.115Z", "type": "response_item", "payload": payload})
        .to_string()
}

/// Output dense with secrets: every line holds one, in the forms tool output shows them.
const DENSE_OUTPUT: &[&str] = &[
    "export GITHUB_TOKEN=ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
    "DB_PASSWORD=p@ss;w0rd|x ./run.sh",
    "> Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4",
    "curl -u admin:CurlUserPass1 https://api.example.com/v1",
    "Server=db;User Id=app;Password=my secret pass;Database=x",
    "aws_access_key_id = AKIAIOSFODNN7EXAMPLE",
    "git clone https://deploy:UiHunter2Pass@git.example.com/r.git",
    "GET https://x.io/cb?access_token=QkAccessTok1&page=2",
];

fn token_count_line() -> String {
    r#"{"timestamp":"2026-07-28T16:14:06.001Z","type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":1843021,"cached_input_tokens":1650432,"output_tokens":21877,"reasoning_output_tokens":9984,"total_tokens":1864898},"last_token_usage":{"input_tokens":61234,"cached_input_tokens":60928,"output_tokens":412,"reasoning_output_tokens":128,"total_tokens":61646},"model_context_window":258400},"rate_limits":{"limit_id":"codex","primary":{"used_percent":41.0,"window_minutes":300,"resets_at":1785265331},"secondary":{"used_percent":18.0,"window_minutes":10080,"resets_at":1785555600},"rate_limit_reached_type":null}}}"#.to_owned()
}

fn bench(c: &mut Criterion) {
    let mut cases: Vec<(String, String)> = Vec::new();
    for kb in [1, 10, 40] {
        cases.push((
            format!("quiet_{kb}k"),
            tool_output_line(QUIET_OUTPUT, kb * 1024),
        ));
        cases.push((
            format!("noisy_{kb}k"),
            tool_output_line(NOISY_OUTPUT, kb * 1024),
        ));
    }
    // The floor: output that holds no keyword of any rule, so only the keyword scan runs.
    let plain: Vec<&str> = QUIET_OUTPUT
        .iter()
        .copied()
        .filter(|l| !l.starts_with("Author") && !l.contains("Task"))
        .collect();
    cases.push(("plain_10k".to_owned(), tool_output_line(&plain, 10 * 1024)));
    let with_secret = tool_output_line_ending(
        QUIET_OUTPUT,
        10 * 1024,
        "export GITHUB_TOKEN=ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789\n",
    );
    cases.push(("secret_10k".to_owned(), with_secret));
    for kb in [1, 10, 40] {
        cases.push((
            format!("dense_{kb}k"),
            tool_output_line(DENSE_OUTPUT, kb * 1024),
        ));
    }
    cases.push(("token_count".to_owned(), token_count_line()));

    // `REDACT_BENCH_WRITE_CASES=DIR cargo bench --bench redact`: each case written as 100
    // lines to `DIR/<case>.jsonl` instead of timed, the inputs of `examples/redact_lines.rs`
    // under callgrind (instruction counts, which the machine's load does not move).
    if let Some(dir) = std::env::var_os("REDACT_BENCH_WRITE_CASES") {
        let dir = std::path::PathBuf::from(dir);
        std::fs::create_dir_all(&dir).expect("case directory");
        for (name, line) in &cases {
            let text = format!("{line}\n").repeat(100);
            std::fs::write(dir.join(format!("{name}.jsonl")), text).expect("case file");
        }
        eprintln!("wrote {} cases to {}", cases.len(), dir.display());
        return;
    }

    let redactor = global();
    let mut group = c.benchmark_group("redact_line");
    for (name, line) in &cases {
        group.throughput(Throughput::Bytes(line.len() as u64));
        group.bench_function(name.as_str(), |b| {
            b.iter(|| redactor.redact_line(black_box(line.as_bytes())))
        });
    }
    group.finish();

    // The shipping path: the JSON check every line gets, then redaction (docs/capture.md).
    // Lines of 4 MiB, the largest shipped, must cost what their size says: linear, whatever
    // they hold (a keyword every few bytes on one line, a secret every few bytes).
    // 3 MiB of output: escaped into the line (its `\n` twice over) it stays within 4 MiB.
    let big = 3 << 20;
    let mut whole = vec![
        (
            "quiet_10k".to_owned(),
            tool_output_line(QUIET_OUTPUT, 10 * 1024),
        ),
        (
            "dense_10k".to_owned(),
            tool_output_line(DENSE_OUTPUT, 10 * 1024),
        ),
        ("quiet_4m".to_owned(), tool_output_line(QUIET_OUTPUT, big)),
        ("noisy_4m".to_owned(), tool_output_line(NOISY_OUTPUT, big)),
        ("dense_4m".to_owned(), tool_output_line(DENSE_OUTPUT, big)),
    ];
    // A tool's output of `unit` over and over, with no line break in 3 MiB.
    let one_line = |unit: &str| {
        let payload = serde_json::json!({"type": "function_call_output", "call_id": "call_1",
            "output": unit.repeat(big / unit.len())});
        serde_json::json!({"type": "response_item", "payload": payload}).to_string()
    };
    // Minified code: a keyword every few bytes.
    whole.push((
        "keywords_one_line_4m".to_owned(),
        one_line("tokens: 5, secret_name; let password_field = form.get(x); "),
    ));
    // Commands given their password flags, one after another: each command's later flags are
    // read again, within twice the line (docs/redaction.md, "Long values").
    whole.push((
        "commands_one_line_4m".to_owned(),
        one_line("ssh-keygen -P OldPw9Zq -N NewPw9Zq; redis-cli -a RedisPw9 ping; "),
    ));
    let mut group = c.benchmark_group("capture");
    for (name, line) in &whole {
        assert!(
            capture::capture(line.as_bytes(), &redactor).is_ok(),
            "{name} must ship, not be lost"
        );
        group.throughput(Throughput::Bytes(line.len() as u64));
        if line.len() > 1 << 20 {
            group.sample_size(10);
        }
        group.bench_function(name.as_str(), |b| {
            b.iter(|| capture::capture(black_box(line.as_bytes()), &redactor))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
