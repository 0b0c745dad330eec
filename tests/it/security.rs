//! Security checks on the real binary: the bearer token never shows up in logs (stderr and
//! `<config>/logs/*.log`, at the most verbose log level too), spools or error messages, even
//! when a hostile server echoes it back in every answer; secrets in the rollout never reach
//! the server or the spool; every file and directory the watcher creates is private (0600 and
//! 0700) even under a permissive umask; and a plain `http` URL to a host other than loopback
//! draws a warning.
// Every test here ends the watcher with SIGTERM (or reads /proc): unix only. Windows is
// linted, not run (see the README's Platforms section).
#![cfg(unix)]

use crate::support;

use support::harness;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use harness::{AGENT_ND, SESSION_ND, Sandbox, child_key, stops_for_child, wait_until};
use support::FakeKcap;

const TOKEN: &str = "kcap_tok_9f8e7d6c5b4a39281706";

/// Every file under `dir`, with its contents, for a search.
fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            let bytes = std::fs::read(&path).unwrap_or_default();
            out.push((path, bytes));
        }
    }
    out
}

fn assert_nowhere(needle: &str, texts: &[(&str, String)], sandbox: &Sandbox) {
    for (what, text) in texts {
        assert!(
            !text.contains(needle),
            "{needle:?} appears in {what}:\n{text}"
        );
    }
    for (path, bytes) in files_under(&sandbox.config) {
        assert!(
            !String::from_utf8_lossy(&bytes).contains(needle),
            "{needle:?} appears in {}",
            path.display()
        );
    }
}

/// A hostile kcap server: every answer echoes the request's `Authorization` header and the
/// bare token back, in error bodies the watcher logs. The watermark fails twice (503) and is
/// then `null`; transcript batches are refused (400), lifecycle hooks fail (500).
struct EchoServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    requests: Arc<AtomicUsize>,
}

impl EchoServer {
    fn start() -> EchoServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicUsize::new(0));
        let (flag, count) = (stop.clone(), requests.clone());
        std::thread::spawn(move || {
            let mut watermarks = 0;
            while !flag.load(Ordering::Relaxed) {
                let Ok((stream, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                count.fetch_add(1, Ordering::Relaxed);
                let _ = stream.set_nonblocking(false);
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let mut reader = BufReader::new(stream);
                let mut request_line = String::new();
                let _ = reader.read_line(&mut request_line);
                let (mut auth, mut length) = (String::new(), 0usize);
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                    let (name, value) = h.split_once(':').unwrap_or((&h, ""));
                    match name.to_ascii_lowercase().as_str() {
                        "authorization" => auth = value.trim().to_string(),
                        "content-length" => length = value.trim().parse().unwrap_or(0),
                        _ => {}
                    }
                }
                let mut body = vec![0; length];
                let _ = reader.read_exact(&mut body);
                let echo = format!("you sent {auth} (that is, {TOKEN}); header {auth}");
                let (status, text) = if request_line.contains("/last-line") {
                    watermarks += 1;
                    if watermarks <= 2 {
                        ("503 Service Unavailable", echo)
                    } else {
                        ("200 OK", r#"{"last_line_number":null}"#.to_string())
                    }
                } else if request_line.contains("/hooks/transcript") {
                    ("400 Bad Request", echo)
                } else {
                    ("500 Internal Server Error", echo)
                };
                let mut stream = reader.into_inner();
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nX-Echo: {auth}\r\nWWW-Authenticate: {auth}\r\nConnection: close\r\n\r\n{text}",
                    text.len()
                );
            }
        });
        EchoServer {
            addr,
            stop,
            requests,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[test]
fn a_server_echoing_the_token_in_every_answer_never_gets_it_into_logs_spools_or_errors() {
    let sandbox = Sandbox::new();
    let mut lines = vec![harness::child_meta()];
    lines.extend(harness::turn(0));
    sandbox.append_lines(&lines);
    let server = EchoServer::start();
    let mut w = sandbox.spawn(
        sandbox
            .watch(Some(&server.url()), &[])
            .env("KCAP_TOKEN", TOKEN)
            .env("KCAP_LOG", "trace"),
    );
    // Refused lines are spooled one by one; then the stop is tried (and fails).
    assert!(
        wait_until(Duration::from_secs(30), || w
            .has_event("subagent_stop_failed")),
        "{}",
        w.stderr()
    );
    assert_eq!(w.terminate(Duration::from_secs(15)), 0);
    // Replay delivers to the same hostile server and prints its own errors.
    let replay = sandbox
        .cmd(Some(&server.url()))
        .env("KCAP_TOKEN", TOKEN)
        .env("KCAP_LOG", "trace")
        .args(["replay", "--session-id", SESSION_ND])
        .output()
        .unwrap();
    assert!(server.requests.load(Ordering::Relaxed) >= 6);
    assert!(
        w.stderr().contains("HTTP 400") && w.stderr().contains("you sent"),
        "the server's answers were not logged at all:\n{}",
        w.stderr()
    );
    let texts = [
        ("the watcher's stderr", w.stderr()),
        ("the watcher's stdout", w.stdout()),
        (
            "replay's stderr",
            String::from_utf8_lossy(&replay.stderr).into_owned(),
        ),
        (
            "replay's stdout",
            String::from_utf8_lossy(&replay.stdout).into_owned(),
        ),
    ];
    assert_nowhere(TOKEN, &texts, &sandbox);
    assert!(
        !files_under(&sandbox.config).is_empty(),
        "nothing spooled or logged: the check above checked nothing"
    );
}

#[test]
fn a_refused_token_from_a_file_stays_out_of_trace_logs_and_the_spool() {
    let sandbox = Sandbox::new();
    let mut lines = vec![harness::child_meta()];
    lines.extend(harness::turn(0));
    sandbox.append_lines(&lines);
    let token_file = sandbox.dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let server = FakeKcap::start();
    server.require_token(Some(TOKEN));
    // The watermark is answered; every batch is refused as if the token had just expired.
    server.fail_always(Some("transcript"), support::Fault::Status(401));
    let mut w = sandbox.spawn(
        sandbox
            .watch(Some(&server.url()), &[])
            .env("KCAP_TOKEN_FILE", &token_file)
            .env("KCAP_LOG", "trace"),
    );
    assert!(wait_until(Duration::from_secs(20), || w
        .stderr()
        .contains("HTTP 401")));
    // The token did go out (to the right server), and only in the Authorization header.
    let sent = server.requests();
    assert_eq!(
        sent[0].authorization(),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    assert_eq!(w.terminate(Duration::from_secs(15)), 0);
    // Lines the server would not take were spooled at shutdown, without the token.
    let spool = sandbox
        .config
        .join("transcript-spool")
        .join(format!("{SESSION_ND}.transcript.jsonl"));
    assert!(spool.exists(), "{}", w.stderr());
    assert_nowhere(
        TOKEN,
        &[("stderr", w.stderr()), ("stdout", w.stdout())],
        &sandbox,
    );
    // `ps` shows the command line: the token is never a flag.
    assert!(
        sent.iter()
            .all(|r| !r.body.contains(TOKEN) && !r.path.contains(TOKEN))
    );
}

#[test]
fn a_password_in_the_server_url_never_appears_in_warnings_or_errors() {
    let sandbox = Sandbox::new();
    sandbox.append(b"");
    for url in [
        "http://kcap:hunter2-pw@kcap.example.com",
        "ftp://kcap:hunter2-pw@kcap.example.com/x",
    ] {
        // `replay` reads the server (`inspect`, which ships nothing, no longer reads it).
        let out = sandbox.cmd(Some(url)).arg("replay").output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("KCAP_URL"), "{err}");
        assert!(
            !err.contains("hunter2-pw"),
            "the URL's password is shown:\n{err}"
        );
    }
}

/// Secret shapes of docs/behaviour.md A2, as they would sit in a tool's output.
const SECRETS: &[&str] = &[
    "ghp_R4nd0mT0k3nV4lu3F0rT3st1ng00aa",
    "AKIAIOSFODNN7EXAMPLE",
    "sk-proj-abcdefghijklmnop1234",
    "xoxb-123456789012-abcdefghijkl",
    "glpat-abcdefghij0123456789",
    "hunter2hunter2hunter2",
];

fn secret_rollout() -> Vec<String> {
    let output = format!(
        "GITHUB_TOKEN={}\naws_access_key_id = {}\ncurl -H 'Authorization: Bearer {}' https://api.example.com\nSLACK={}\nGITLAB_TOKEN={}\nDB_PASSWORD={}\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n-----END RSA PRIVATE KEY-----\n",
        SECRETS[0], SECRETS[1], SECRETS[2], SECRETS[3], SECRETS[4], SECRETS[5]
    );
    vec![
        harness::child_meta(),
        harness::task_started("t1"),
        harness::call("c1", "exec_command"),
        harness::output("c1", &output),
        harness::event(&format!(
            r#"{{"type":"exec_command_end","env":{{"api_key":"{}","password":"{}"}},"url":"https://u:{}@db.example.com/?token={}"}}"#,
            SECRETS[1], SECRETS[5], SECRETS[5], SECRETS[0]
        )),
        harness::task_complete("t1", &format!("done; the token is {}", SECRETS[0])),
    ]
}

#[test]
fn secrets_in_the_rollout_never_reach_the_server_or_the_spool() {
    // Online: shipped lines and the stop's message.
    let sandbox = Sandbox::new();
    sandbox.append_lines(&secret_rollout());
    let server = FakeKcap::start();
    let mut w = sandbox.spawn(&mut sandbox.watch(Some(&server.url()), &["--once"]));
    assert_eq!(w.exit_code(Duration::from_secs(60), "watch --once"), 0);
    assert_eq!(server.lines(SESSION_ND, AGENT_ND).len(), 6);
    assert_eq!(stops_for_child(&server.hooks("subagent-stop")), 1);
    let sent: String = server.requests().iter().map(|r| r.body.clone()).collect();
    // Offline: the spools.
    let offline = Sandbox::new();
    offline.append_lines(&secret_rollout());
    let mut o = offline.spawn(&mut offline.watch(None, &["--once"]));
    assert_eq!(
        o.exit_code(Duration::from_secs(60), "watch --once offline"),
        0
    );
    let spooled: String = files_under(&offline.config.join("transcript-spool"))
        .into_iter()
        .chain(files_under(&offline.config.join("spool")))
        .map(|(_, b)| String::from_utf8_lossy(&b).into_owned())
        .collect();
    assert!(spooled.contains("exec_command_end"), "nothing spooled");
    for secret in SECRETS {
        assert!(!sent.contains(secret), "{secret} reached the server");
        assert!(!spooled.contains(secret), "{secret} reached the spool");
    }
    for text in [&sent, &spooled] {
        assert!(!text.contains("MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun"));
    }
    // Every shipped line is still JSON (redaction edits inside strings only).
    for line in server.lines(SESSION_ND, AGENT_ND).values() {
        assert!(
            serde_json::from_str::<serde_json::Value>(line).is_ok(),
            "redaction broke the JSON: {line}"
        );
    }
}

/// Mode bits of everything under `dir` (the directory itself included).
fn modes(dir: &Path) -> Vec<(PathBuf, u32, bool)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    if let Ok(meta) = std::fs::symlink_metadata(dir) {
        out.push((
            dir.to_owned(),
            meta.permissions().mode() & 0o777,
            meta.is_dir(),
        ));
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                out.extend(modes(&path));
            } else if let Ok(meta) = std::fs::symlink_metadata(&path) {
                out.push((path, meta.permissions().mode() & 0o777, false));
            }
        }
    }
    out
}

fn assert_private(dir: &Path) -> usize {
    let all = modes(dir);
    for (path, mode, is_dir) in &all {
        let want = if *is_dir { 0o700 } else { 0o600 };
        assert_eq!(
            *mode,
            want,
            "{} has mode {mode:o}, want {want:o}",
            path.display()
        );
    }
    all.len()
}

#[test]
fn every_file_and_directory_created_is_private_even_with_umask_0() {
    use std::os::unix::process::CommandExt;
    let sandbox = Sandbox::new();
    // Offline, a child that completes: transcript spool, hook spool (the stop), log file and
    // watcher files. Lines big enough to fill the 8 MiB spool cap make it write the
    // needs-import marker too.
    let mut lines = vec![harness::child_meta(), harness::task_started("t1")];
    let big = "z".repeat(60_000);
    for i in 0..150 {
        lines.push(harness::output(&format!("c{i}"), &big));
    }
    lines.push(harness::task_complete("t1", "done"));
    sandbox.append_lines(&lines);
    let watchers = sandbox.dir.path().join("elsewhere").join("watchers");
    let umask0 = |c: &mut std::process::Command| {
        // SAFETY: umask is async-signal-safe and touches only the child's own mask.
        unsafe {
            c.pre_exec(|| {
                libc::umask(0);
                Ok(())
            });
        }
    };
    let mut cmd = sandbox.watch(None, &[]);
    cmd.env("KCAP_WATCHER_DIR", &watchers);
    umask0(&mut cmd);
    let mut w = sandbox.spawn(&mut cmd);
    let needs_import = sandbox
        .config
        .join("transcript-spool")
        .join(format!("{SESSION_ND}.needs-import"));
    assert!(
        wait_until(Duration::from_secs(60), || needs_import.exists()
            && sandbox.config.join("spool").exists()),
        "{}",
        w.stderr()
    );
    // While it runs: pid, started, heartbeat and lock files.
    let key = child_key();
    for ext in ["pid", "started", "heartbeat", "lock"] {
        assert!(watchers.join(format!("{key}.{ext}")).exists(), "{ext}");
    }
    let running = assert_private(&sandbox.config) + assert_private(&watchers);
    assert_eq!(w.terminate(Duration::from_secs(15)), 0);
    // A replay to a server that is down leaves the spools where they were, still private.
    let mut replay = sandbox.cmd(Some(&format!("http://127.0.0.1:{}", harness::free_port())));
    replay.args(["replay", "--session-id", SESSION_ND]);
    umask0(&mut replay);
    let _ = replay.output().unwrap();
    let after = assert_private(&sandbox.config) + assert_private(&watchers);
    assert!(running >= 10 && after >= 8, "{running} {after}");
    // The parent of the watcher dir was created by the watcher too.
    assert_private(&sandbox.dir.path().join("elsewhere"));
}

#[test]
fn plain_http_to_a_host_other_than_loopback_warns_and_nothing_else_does() {
    let sandbox = Sandbox::new();
    sandbox.append(b"");
    let run = |url: &str, flag: bool| {
        // Through `replay` (with nothing spooled, it sends nothing), by flag and by variable:
        // a command reads only its own settings (docs/behaviour.md T5), and `inspect` ships
        // nothing, so it takes no server.
        let mut c = if flag {
            let mut c = sandbox.cmd(None);
            c.args(["replay", "--server", url]);
            c
        } else {
            let mut c = sandbox.cmd(Some(url));
            c.arg("replay");
            c
        };
        let out = c.output().unwrap();
        assert!(out.status.success(), "{url}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    for url in [
        "http://kcap.example.com",
        "http://10.1.2.3:8080/",
        "http://[2001:db8::1]:80",
        "http://127.0.0.1.nip.example",
    ] {
        for flag in [false, true] {
            let err = run(url, flag);
            assert!(
                err.contains("clear text") && err.contains("config_warning"),
                "no clear-text warning for {url} (flag: {flag}):\n{err}"
            );
        }
    }
    for url in [
        "https://kcap.example.com",
        "http://127.0.0.1:8080",
        "http://127.9.9.9",
        "http://localhost:3000",
        "http://[::1]:3000",
    ] {
        let err = run(url, false);
        assert!(!err.contains("clear text"), "{url} warned:\n{err}");
    }
}
