//! Classifier throughput on the shapes that dominate real rollouts: one multi-MB tool output
//! (escape-dense text), one multi-MB base64 image, and a mix of typical 1-10 KB lines.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kcap_watch::codex::{Classifier, classify};

/// Tool output as Codex escapes it: source lines, quotes, tabs and some non-ASCII text.
fn escaped_text(len: usize) -> String {
    let lines = [
        r#"src/watch.rs:118:        let due = decide::next_due(&state, &config, now);\n"#,
        r#"    Finished `release` profile [optimized] target(s) in 41.07s\n"#,
        r#"error[E0308]: mismatched types: expected \"u64\", found \"i64\"\n"#,
        r#"\tat com.example.Main.run(Main.java:42) — café naïve 日本語\n"#,
        r#"{\"path\":\"/home/dev/src/acme-api/README.md\",\"bytes\":18231}\n"#,
    ];
    let mut s = String::with_capacity(len + 128);
    let mut i = 0;
    while s.len() < len {
        s.push_str(lines[i % lines.len()]);
        i += 1;
    }
    s
}

fn base64ish(len: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    (0..len)
        .map(|i| ALPHABET[(i * 7 + i / 64) % 64] as char)
        .collect()
}

fn big_output_line() -> Vec<u8> {
    format!(
        r#"{{"timestamp":"2026-07-28T16:14:05.115Z","type":"response_item","payload":{{"type":"function_call_output","call_id":"call_Zx81qL","output":"{}"}}}}"#,
        escaped_text(5 << 20)
    )
    .into_bytes()
}

fn big_image_line() -> Vec<u8> {
    format!(
        r#"{{"timestamp":"2026-07-28T16:14:05.115Z","type":"response_item","payload":{{"type":"message","role":"user","content":[{{"type":"input_image","image_url":"data:image/png;base64,{}"}}]}}}}"#,
        base64ish(5 << 20)
    )
    .into_bytes()
}

/// A turn's worth of typical lines, 1-10 KB each.
fn typical_lines() -> Vec<Vec<u8>> {
    let ts = r#""timestamp":"2026-07-28T16:14:05.115Z""#;
    let mut lines = Vec::new();
    for i in 0..400 {
        let n = 1000 + (i * 733) % 9000;
        let line = match i % 6 {
            0 => format!(
                r#"{{{ts},"type":"response_item","payload":{{"type":"function_call","name":"shell","arguments":"{{\"command\":[\"bash\",\"-lc\",\"{}\"],\"timeout_ms\":120000}}","call_id":"call_{i}"}}}}"#,
                escaped_text(n)
            ),
            1 => format!(
                r#"{{{ts},"type":"response_item","payload":{{"type":"function_call_output","call_id":"call_{i}","output":"{}"}}}}"#,
                escaped_text(n)
            ),
            2 => format!(
                r#"{{{ts},"type":"event_msg","payload":{{"type":"token_count","info":{{"total_token_usage":{{"input_tokens":183021,"cached_input_tokens":160256,"output_tokens":4410,"reasoning_output_tokens":2112,"total_tokens":187431}},"model_context_window":258400}},"rate_limits":{{"limit_id":"codex","primary":{{"used_percent":41.0,"window_minutes":300,"resets_at":1785265331}},"secondary":{{"used_percent":18.0,"window_minutes":10080,"resets_at":1785555600}},"rate_limit_reached_type":null}}}},"pad":"{}"}}"#,
                escaped_text(n / 2)
            ),
            3 => format!(
                r#"{{{ts},"type":"response_item","payload":{{"type":"reasoning","summary":[{{"type":"summary_text","text":"{}"}}],"content":null,"encrypted_content":"{}"}}}}"#,
                escaped_text(n / 3),
                base64ish(n / 2)
            ),
            4 => format!(
                r#"{{{ts},"type":"response_item","payload":{{"type":"message","role":"assistant","content":[{{"type":"output_text","text":"{}"}}]}}}}"#,
                escaped_text(n)
            ),
            _ => format!(
                r#"{{{ts},"type":"event_msg","payload":{{"type":"task_complete","turn_id":"019fa981-6ea2-7c3e","last_agent_message":"{}"}}}}"#,
                escaped_text(n)
            ),
        };
        lines.push(line.into_bytes());
    }
    lines
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("classify");
    g.sample_size(20);

    let output = big_output_line();
    g.throughput(Throughput::Bytes(output.len() as u64));
    g.bench_function("function_call_output_5MB", |b| {
        b.iter(|| classify(black_box(&output)))
    });
    g.bench_function("function_call_output_5MB_64KiB_chunks", |b| {
        let mut cl = Classifier::new();
        b.iter(|| {
            for chunk in black_box(&output).chunks(64 * 1024) {
                cl.feed(chunk);
            }
            cl.finish()
        })
    });

    let image = big_image_line();
    g.throughput(Throughput::Bytes(image.len() as u64));
    g.bench_function("base64_image_5MB", |b| {
        b.iter(|| classify(black_box(&image)))
    });

    let lines = typical_lines();
    let total: usize = lines.iter().map(Vec::len).sum();
    g.throughput(Throughput::Bytes(total as u64));
    g.bench_function("typical_1_to_10KB_lines", |b| {
        let mut cl = Classifier::new();
        b.iter(|| {
            for line in black_box(&lines) {
                cl.feed(line);
                black_box(cl.finish());
            }
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
