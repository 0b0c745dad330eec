//! Authentication as the kcap CLI does it (docs/behaviour.md R1), against the real binary: the
//! kcap CLI's token store files written here as the kcap CLI writes them, the fake kcap
//! server (which also answers `/auth/refresh`), and local fakes of the WorkOS and machine
//! token endpoints. Also TLS trust through `SSL_CERT_FILE`, proxies and `KCAP_URL` checks.

use crate::support;

use support::harness;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use harness::{Proc, SESSION, SESSION_ND, Sandbox, expected_lines};
use kcap_watch::time::Ts;
use serde_json::{Value, json};
use support::{FakeKcap, Fault};

const ONCE: Duration = Duration::from_secs(40);

// ---- the kcap CLI's files -------------------------------------------------------------

/// `expires_at` as .NET writes a `DateTimeOffset` it has not trimmed: seven fraction digits
/// and an explicit offset.
fn dotnet_time(at: Ts) -> String {
    let secs = at.0.div_euclid(1000);
    let ms = at.0.rem_euclid(1000);
    let t = jiff::Timestamp::from_second(secs).unwrap();
    format!("{}.{:03}0000+00:00", t.strftime("%Y-%m-%dT%H:%M:%S"), ms)
}

/// A token store document with every field the kcap CLI's `StoredTokens` writes, plus one
/// it does not know (a newer kcap's), which must survive a refresh.
fn kcap_tokens(token: &str, provider: &str, server_url: Option<&str>, expires_at: Ts) -> Value {
    json!({
        "access_token": token,
        "refresh_token": null,
        "expires_at": dotnet_time(expires_at),
        "github_username": "alice",
        "provider": provider,
        "client_id": null,
        "server_url": server_url,
        "x_newer_field": {"kept": true},
    })
}

fn write_tokens(config: &Path, profile: &str, doc: &Value) -> PathBuf {
    let dir = config.join("tokens");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{profile}.json"));
    std::fs::write(&path, doc.to_string()).unwrap();
    // File modes exist only on unix (on Windows the profile directory's ACL keeps it private).
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    path
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn hour_from_now() -> Ts {
    Ts::now().plus(Duration::from_secs(3600))
}

fn an_hour_ago() -> Ts {
    Ts::now().minus(Duration::from_secs(3600))
}

// ---- running the watcher --------------------------------------------------------------

/// A session rollout with one turn, at `path`, for the session `id`.
fn session_rollout(path: &Path, id: &str) {
    let mut lines = vec![harness::session_meta().replace(SESSION, id)];
    lines.extend(harness::turn(0));
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(path, text).unwrap();
}

fn with_rollout() -> Sandbox {
    let sandbox = Sandbox::new();
    session_rollout(&sandbox.rollout, SESSION);
    sandbox
}

/// `watch --once` to `url`, with `env`; returns the finished process and its exit code.
fn run_once(sandbox: &Sandbox, url: &str, env: &[(&str, &str)]) -> (Proc, i32) {
    let mut cmd = sandbox.watch(Some(url), &["--once"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut p = sandbox.spawn(&mut cmd);
    let code = p.exit_code(ONCE, "watch --once");
    (p, code)
}

fn assert_all_lines_delivered(server: &FakeKcap, sandbox: &Sandbox, p: &Proc) {
    let want = expected_lines(&std::fs::read(&sandbox.rollout).unwrap());
    assert_eq!(
        server.lines(SESSION_ND, ""),
        want,
        "lines not delivered; log:\n{}",
        p.stderr()
    );
}

/// The `Authorization` of every request to the kcap API (not the token endpoints).
fn api_auth(server: &FakeKcap) -> Vec<Option<String>> {
    server
        .requests()
        .iter()
        .filter(|r| !r.path.starts_with("/auth/"))
        .map(|r| r.authorization().map(str::to_owned))
        .collect()
}

fn all_bearer(server: &FakeKcap, token: &str) -> bool {
    let auth = api_auth(server);
    !auth.is_empty()
        && auth
            .iter()
            .all(|a| a.as_deref() == Some(&*format!("Bearer {token}")))
}

// ---- a fake token endpoint ------------------------------------------------------------

/// A form-posting token endpoint (WorkOS's authenticate, kcap's machine token URL): answers
/// its queued JSON bodies in turn (the last one again once the queue is down to it), after
/// `delay`, recording every form it was sent.
struct TokenEndpoint {
    addr: SocketAddr,
    forms: Arc<Mutex<Vec<BTreeMap<String, String>>>>,
    agents: Arc<Mutex<Vec<Option<String>>>>,
    _thread: std::thread::JoinHandle<()>,
}

impl TokenEndpoint {
    fn start(answers: Vec<Value>, delay: Duration) -> TokenEndpoint {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let forms = Arc::new(Mutex::new(Vec::new()));
        let agents = Arc::new(Mutex::new(Vec::new()));
        let answers = Arc::new(Mutex::new(answers));
        let seen = forms.clone();
        let seen_agents = agents.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let app = axum::Router::new().fallback(
                    move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                        let seen = seen.clone();
                        let seen_agents = seen_agents.clone();
                        let answers = answers.clone();
                        async move {
                            let form: BTreeMap<String, String> =
                                url_pairs(&String::from_utf8_lossy(&body));
                            seen.lock().unwrap().push(form);
                            seen_agents.lock().unwrap().push(
                                headers
                                    .get(axum::http::header::USER_AGENT)
                                    .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()),
                            );
                            tokio::time::sleep(delay).await;
                            let answer = {
                                let mut a = answers.lock().unwrap();
                                if a.len() > 1 {
                                    a.remove(0)
                                } else {
                                    a[0].clone()
                                }
                            };
                            (
                                [(axum::http::header::CONTENT_TYPE, "application/json")],
                                answer.to_string(),
                            )
                        }
                    },
                );
                let _ = axum::serve(listener, app).await;
            });
        });
        TokenEndpoint {
            addr,
            forms,
            agents,
            _thread: thread,
        }
    }

    fn url(&self) -> String {
        format!("http://{}/token", self.addr)
    }

    fn forms(&self) -> Vec<BTreeMap<String, String>> {
        self.forms.lock().unwrap().clone()
    }

    /// The `User-Agent` of every request, in arrival order.
    fn agents(&self) -> Vec<Option<String>> {
        self.agents.lock().unwrap().clone()
    }
}

fn url_pairs(form: &str) -> BTreeMap<String, String> {
    let url = reqwest::Url::parse(&format!("http://x/?{form}")).unwrap();
    url.query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// A WorkOS-style access token: a JWT whose `exp` is `exp`.
fn jwt(exp: Ts, subject: &str) -> String {
    use base64::Engine;
    let e = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    format!(
        "{}.{}.c2lnbmF0dXJl",
        e.encode(r#"{"alg":"RS256","typ":"JWT"}"#),
        e.encode(json!({"sub": subject, "exp": exp.0 / 1000}).to_string())
    )
}

// ---- server binding and profile -------------------------------------------------------

#[test]
fn a_token_stamped_canonically_is_sent_to_the_same_server_written_differently() {
    let sandbox = with_rollout();
    let server = FakeKcap::start();
    server.require_token(Some("tok-canonical"));
    let stamped = format!("http://127.0.0.1:{}", server.addr().port());
    write_tokens(
        &sandbox.config,
        "default",
        &kcap_tokens(
            "tok-canonical",
            "GitHubApp",
            Some(&stamped),
            hour_from_now(),
        ),
    );
    let url = format!("HTTP://127.0.0.1:{}/", server.addr().port());
    let (p, code) = run_once(&sandbox, &url, &[]);
    assert_eq!(code, 0, "{}", p.stderr());
    assert_all_lines_delivered(&server, &sandbox, &p);
    assert!(
        all_bearer(&server, "tok-canonical"),
        "{:?}",
        api_auth(&server)
    );
}

#[test]
fn a_token_bound_to_another_server_is_withheld_with_one_log() {
    let sandbox = with_rollout();
    let server = FakeKcap::start();
    write_tokens(
        &sandbox.config,
        "default",
        &kcap_tokens(
            "tok-elsewhere",
            "GitHubApp",
            Some("https://kcap.example.com:443"),
            hour_from_now(),
        ),
    );
    let (p, code) = run_once(&sandbox, &server.url(), &[]);
    assert_eq!(code, 0, "{}", p.stderr());
    assert_all_lines_delivered(&server, &sandbox, &p);
    let auth = api_auth(&server);
    assert!(
        auth.len() >= 2 && auth.iter().all(Option::is_none),
        "{auth:?}"
    );
    let logs = p.events_named("token_wrong_server");
    assert_eq!(logs.len(), 1, "{}", p.stderr());
    let text = logs[0].to_string();
    assert!(text.contains("https://kcap.example.com:443"), "{text}");
    assert!(
        text.contains(&format!("http://127.0.0.1:{}", server.addr().port())),
        "{text}"
    );
    assert!(!p.stderr().contains("tok-elsewhere"));
    assert_eq!(server.request_count("/auth/refresh"), 0);
}

#[test]
fn the_active_profile_of_config_json_is_used() {
    let sandbox = with_rollout();
    let server = FakeKcap::start();
    server.require_token(Some("tok-work"));
    std::fs::create_dir_all(&sandbox.config).unwrap();
    std::fs::write(
        sandbox.config.join("config.json"),
        r#"{"version":2,"active_profile":"work","profiles":{"default":{},"work":{"server_url":null}}}"#,
    )
    .unwrap();
    let exp = hour_from_now();
    write_tokens(
        &sandbox.config,
        "default",
        &kcap_tokens("tok-default", "GitHubApp", None, exp),
    );
    write_tokens(
        &sandbox.config,
        "work",
        &kcap_tokens("tok-work", "GitHubApp", None, exp),
    );
    let (p, code) = run_once(&sandbox, &server.url(), &[]);
    assert_eq!(code, 0, "{}", p.stderr());
    assert_all_lines_delivered(&server, &sandbox, &p);
    assert!(all_bearer(&server, "tok-work"), "{:?}", api_auth(&server));
    // KCAP_PROFILE still wins over the active profile.
    let server2 = FakeKcap::start();
    server2.require_token(Some("tok-default"));
    let (p, code) = run_once(&sandbox, &server2.url(), &[("KCAP_PROFILE", "default")]);
    assert_eq!(code, 0, "{}", p.stderr());
    assert!(
        all_bearer(&server2, "tok-default"),
        "{:?}",
        api_auth(&server2)
    );
}

// ---- refresh under the kcap CLI's lock -----------------------------------------------

/// Two watchers of two sessions sharing one config dir, started together.
fn race_two(sandbox: &Sandbox, url: &str, env: &[(&str, &str)]) -> [Proc; 2] {
    let other = sandbox.dir.path().join("other.jsonl");
    let other_id = "0199a2b4-c0de-7000-a000-0000000000f2";
    session_rollout(&other, other_id);
    let start = |rollout: &Path| {
        let mut cmd = sandbox.cmd(Some(url));
        cmd.arg("watch").arg(rollout).arg("--once");
        for (k, v) in env {
            cmd.env(k, v);
        }
        sandbox.spawn(&mut cmd)
    };
    let mut a = start(&sandbox.rollout);
    let mut b = start(&other);
    assert_eq!(a.exit_code(ONCE, "first watcher"), 0, "{}", a.stderr());
    assert_eq!(b.exit_code(ONCE, "second watcher"), 0, "{}", b.stderr());
    [a, b]
}

fn assert_store_kept_and_private(path: &Path, token: &str) -> Value {
    let doc = read_json(path);
    assert_eq!(doc["access_token"], json!(token), "{doc}");
    assert_eq!(doc["github_username"], json!("alice"), "{doc}");
    assert_eq!(doc["x_newer_field"], json!({"kept": true}), "{doc}");
    // File modes exist only on unix (on Windows the profile directory's ACL keeps it private).
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let exp = doc["expires_at"].as_str().unwrap();
    assert!(
        exp.ends_with("+00:00"),
        "written as the kcap CLI writes it: {exp}"
    );
    let at = Ts::parse_rfc3339(exp).unwrap();
    assert!(at > Ts::now().plus(Duration::from_secs(600)), "{exp}");
    doc
}

#[test]
fn an_expired_github_app_token_is_refreshed_once_while_two_watchers_race() {
    let sandbox = with_rollout();
    let server = FakeKcap::start();
    server.require_token(Some("tok-new"));
    server.answer_auth_refresh("tok-new", 3600);
    // A slow refresh, so the second watcher meets the lock held.
    server.fail_always(
        Some("/auth/refresh"),
        Fault::Delay(Duration::from_millis(700)),
    );
    let stamped = format!("http://127.0.0.1:{}", server.addr().port());
    let store = write_tokens(
        &sandbox.config,
        "default",
        &kcap_tokens("tok-old", "GitHubApp", Some(&stamped), an_hour_ago()),
    );
    let [a, b] = race_two(&sandbox, &server.url(), &[]);
    assert_eq!(
        server.request_count("/auth/refresh"),
        1,
        "{}\n{}",
        a.stderr(),
        b.stderr()
    );
    let refresh = &server.requests_to("/auth/refresh")[0];
    assert_eq!(refresh.json(), Some(json!({"access_token": "tok-old"})));
    assert_all_lines_delivered(&server, &sandbox, &a);
    assert!(all_bearer(&server, "tok-new"), "{:?}", api_auth(&server));
    let doc = assert_store_kept_and_private(&store, "tok-new");
    assert_eq!(doc["server_url"], json!(stamped));
    assert!(sandbox.config.join("tokens/default.lock").exists());
}

#[test]
fn an_expired_workos_token_is_refreshed_once_while_two_watchers_race() {
    let sandbox = with_rollout();
    let fresh = jwt(hour_from_now(), "user_01");
    let workos = TokenEndpoint::start(
        vec![json!({"access_token": fresh, "refresh_token": "rt-2", "user": {"id": "user_01"}})],
        Duration::from_millis(700),
    );
    let server = FakeKcap::start();
    server.require_token(Some(&fresh));
    let mut doc = kcap_tokens(
        &jwt(an_hour_ago(), "user_01"),
        "workos",
        None,
        an_hour_ago(),
    );
    doc["refresh_token"] = json!("rt-1");
    doc["client_id"] = json!("client_kcap");
    let store = write_tokens(&sandbox.config, "default", &doc);
    let [a, b] = race_two(
        &sandbox,
        &server.url(),
        &[("KCAP_WORKOS_AUTHENTICATE_URL", &workos.url())],
    );
    let forms = workos.forms();
    assert_eq!(forms.len(), 1, "{}\n{}", a.stderr(), b.stderr());
    assert_eq!(forms[0]["grant_type"], "refresh_token");
    assert_eq!(forms[0]["client_id"], "client_kcap");
    assert_eq!(forms[0]["refresh_token"], "rt-1");
    assert_all_lines_delivered(&server, &sandbox, &a);
    assert!(all_bearer(&server, &fresh), "{:?}", api_auth(&server));
    let doc = assert_store_kept_and_private(&store, &fresh);
    assert_eq!(
        doc["refresh_token"],
        json!("rt-2"),
        "the rotated refresh token is kept"
    );
    assert_eq!(
        doc["server_url"],
        Value::Null,
        "workos refreshes do not stamp a server"
    );
}

#[test]
fn a_401_refreshes_when_the_store_still_holds_the_refused_token() {
    let sandbox = with_rollout();
    let server = FakeKcap::start();
    // Locally valid, but the server no longer takes it.
    server.require_token(Some("tok-b"));
    server.answer_auth_refresh("tok-b", 3600);
    let store = write_tokens(
        &sandbox.config,
        "default",
        &kcap_tokens("tok-a", "GitHubApp", None, hour_from_now()),
    );
    let (p, code) = run_once(&sandbox, &server.url(), &[]);
    assert_eq!(code, 0, "{}", p.stderr());
    assert_all_lines_delivered(&server, &sandbox, &p);
    assert_eq!(server.request_count("/auth/refresh"), 1, "{}", p.stderr());
    let auth = api_auth(&server);
    assert_eq!(auth[0].as_deref(), Some("Bearer tok-a"));
    assert!(
        auth[1..]
            .iter()
            .all(|a| a.as_deref() == Some("Bearer tok-b")),
        "{auth:?}"
    );
    let doc = assert_store_kept_and_private(&store, "tok-b");
    // An unbound GitHubApp token is stamped with the server that refreshed it.
    assert_eq!(
        doc["server_url"],
        json!(format!("http://127.0.0.1:{}", server.addr().port()))
    );
}

#[test]
fn a_401_adopts_the_token_another_process_rotated_in_instead_of_refreshing() {
    let sandbox = with_rollout();
    let server = FakeKcap::start();
    server.require_token(Some("tok-c"));
    // Refreshing here would be wrong: this answer would be refused too.
    server.answer_auth_refresh("tok-wrong", 3600);
    let store = write_tokens(
        &sandbox.config,
        "default",
        &kcap_tokens("tok-a", "GitHubApp", None, hour_from_now()),
    );
    // Another process (the kcap CLI) holds the lock while it rotates the token.
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(sandbox.config.join("tokens/default.lock"))
        .unwrap();
    lock.lock().unwrap();
    let mut p = sandbox.spawn(&mut sandbox.watch(Some(&server.url()), &["--once"]));
    assert!(
        server.wait_until(Duration::from_secs(20), |s| api_auth(s)
            .iter()
            .any(|a| a.as_deref() == Some("Bearer tok-a"))),
        "{}",
        p.stderr()
    );
    std::thread::sleep(Duration::from_millis(300));
    write_tokens(
        &sandbox.config,
        "default",
        &kcap_tokens("tok-c", "GitHubApp", None, hour_from_now()),
    );
    drop(lock);
    assert_eq!(p.exit_code(ONCE, "watch --once"), 0, "{}", p.stderr());
    assert_all_lines_delivered(&server, &sandbox, &p);
    assert_eq!(server.request_count("/auth/refresh"), 0, "{}", p.stderr());
    assert_eq!(read_json(&store)["access_token"], json!("tok-c"));
}

// ---- machine credentials --------------------------------------------------------------

#[test]
fn machine_credentials_mint_once_and_the_token_is_cached() {
    let sandbox = with_rollout();
    let mint = TokenEndpoint::start(
        vec![json!({"access_token": "m-1", "expires_in": 3600, "token_type": "Bearer"})],
        Duration::ZERO,
    );
    let server = FakeKcap::start();
    server.require_token(Some("m-1"));
    let mint_url = mint.url();
    let env = [
        ("KCAP_CLIENT_ID", "client_machine"),
        ("KCAP_CLIENT_SECRET", "machine-secret-value"),
        ("KCAP_WORKOS_TOKEN_URL", mint_url.as_str()),
    ];
    let (p, code) = run_once(&sandbox, &server.url(), &env);
    assert_eq!(code, 0, "{}", p.stderr());
    assert_all_lines_delivered(&server, &sandbox, &p);
    assert!(api_auth(&server).len() >= 2);
    assert!(all_bearer(&server, "m-1"), "{:?}", api_auth(&server));
    let forms = mint.forms();
    assert_eq!(forms.len(), 1, "one mint for every request");
    assert_eq!(forms[0]["grant_type"], "client_credentials");
    assert_eq!(forms[0]["client_id"], "client_machine");
    assert_eq!(forms[0]["client_secret"], "machine-secret-value");
    assert!(!sandbox.config.join("tokens").exists(), "in memory only");
    assert!(!p.stderr().contains("machine-secret-value"));
    assert!(!p.stderr().contains("m-1\""));
}

#[test]
fn a_machine_token_refused_with_401_is_minted_again() {
    let sandbox = with_rollout();
    let mint = TokenEndpoint::start(
        vec![
            json!({"access_token": "m-1", "expires_in": 3600}),
            json!({"access_token": "m-2", "expires_in": 3600}),
        ],
        Duration::ZERO,
    );
    let server = FakeKcap::start();
    server.require_token(Some("m-2"));
    let mint_url = mint.url();
    let env = [
        ("KCAP_CLIENT_ID", "client_machine"),
        ("KCAP_CLIENT_SECRET", "machine-secret-value"),
        ("KCAP_WORKOS_TOKEN_URL", mint_url.as_str()),
    ];
    let (p, code) = run_once(&sandbox, &server.url(), &env);
    assert_eq!(code, 0, "{}", p.stderr());
    assert_all_lines_delivered(&server, &sandbox, &p);
    assert_eq!(mint.forms().len(), 2, "{}", p.stderr());
    let auth = api_auth(&server);
    assert_eq!(auth[0].as_deref(), Some("Bearer m-1"));
    assert!(
        auth[1..].iter().all(|a| a.as_deref() == Some("Bearer m-2")),
        "{auth:?}"
    );
}

#[test]
fn half_machine_credential_warns_and_uses_store() {
    for (set, missing) in [
        ("KCAP_CLIENT_ID", "KCAP_CLIENT_SECRET"),
        ("KCAP_CLIENT_SECRET", "KCAP_CLIENT_ID"),
    ] {
        let server = FakeKcap::start();
        server.require_token(Some("tok-store"));
        let sandbox = with_rollout();
        write_tokens(
            &sandbox.config,
            "default",
            &kcap_tokens("tok-store", "GitHubApp", None, hour_from_now()),
        );
        let (p, code) = run_once(&sandbox, &server.url(), &[(set, "half-value")]);
        assert_eq!(code, 0, "{}", p.stderr());
        assert_all_lines_delivered(&server, &sandbox, &p);
        let warning = format!("{set} is set but {missing} is not");
        assert!(p.stderr().contains(&warning), "{}", p.stderr());
        assert!(!p.stderr().contains("half-value"), "{}", p.stderr());
        // Every command that uses credentials says so, and none exits for it; one that has
        // no use for them (`inspect` ships nothing) does not read them (docs/behaviour.md T5).
        for (args, warns) in [
            (&["replay"][..], true),
            (&["inspect", sandbox.rollout.to_str().unwrap()], false),
        ] {
            let mut cmd = sandbox.cmd(Some(&server.url()));
            cmd.args(args).env(set, "half-value");
            let mut p = sandbox.spawn(&mut cmd);
            assert_eq!(p.exit_code(ONCE, args[0]), 0, "{}", p.stderr());
            assert_eq!(
                p.stderr().contains(&warning),
                warns,
                "{args:?}: {}",
                p.stderr()
            );
        }
        assert!(all_bearer(&server, "tok-store"), "{:?}", api_auth(&server));
    }
}

// ---- the refresh floor (docs/behaviour.md S4.2) -----------------------------------------

/// A session rollout long enough for several transcript batches (1000 lines each).
fn long_rollout() -> Sandbox {
    let sandbox = Sandbox::new();
    let mut lines = vec![harness::session_meta()];
    for n in 0..600 {
        lines.extend(harness::turn(n));
    }
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(&sandbox.rollout, text).unwrap();
    sandbox
}

/// How many transcript batches the server was sent.
fn batches(server: &FakeKcap) -> usize {
    server.request_count("transcript")
}

#[test]
fn refresh_answer_without_expires_in_does_not_refresh_before_every_batch() {
    // Missing, zero and ten seconds: each used to make the token expired at once, so it was
    // refreshed (and the store rewritten under the kcap CLI's lock) before every request.
    for (case, answer) in [
        ("missing", json!({"access_token": "tok-new"})),
        ("zero", json!({"access_token": "tok-new", "expires_in": 0})),
        ("ten", json!({"access_token": "tok-new", "expires_in": 10})),
    ] {
        let sandbox = long_rollout();
        let server = FakeKcap::start();
        server.answer_auth_refresh_body(answer);
        let stamped = format!("http://127.0.0.1:{}", server.addr().port());
        let store = write_tokens(
            &sandbox.config,
            "default",
            &kcap_tokens("tok-old", "GitHubApp", Some(&stamped), an_hour_ago()),
        );
        let before = Ts::now();
        let (p, code) = run_once(&sandbox, &server.url(), &[]);
        let after = Ts::now();
        assert_eq!(code, 0, "{case}: {}", p.stderr());
        assert_all_lines_delivered(&server, &sandbox, &p);
        assert!(batches(&server) >= 3, "{case}: {}", batches(&server));
        assert_eq!(
            server.request_count("/auth/refresh"),
            1,
            "{case}: one refresh for {} requests; log:\n{}",
            api_auth(&server).len(),
            p.stderr()
        );
        assert!(
            all_bearer(&server, "tok-new"),
            "{case}: {:?}",
            api_auth(&server)
        );
        let doc = read_json(&store);
        let expires = Ts::parse_rfc3339(doc["expires_at"].as_str().unwrap()).unwrap();
        // Refreshed during the run: it expires the stated lifetime after some moment of it
        // (bracketed by the test's clock around the whole run, however long the machine took
        // to start and run it; a second of slack for how the time is written).
        let stated = Duration::from_secs(if case == "ten" { 10 } else { 60 });
        let slack = Duration::from_secs(1);
        assert!(
            expires >= before.plus(stated).minus(slack)
                && expires <= after.plus(stated).plus(slack),
            "{case}: a missing or zero expires_in counts as 60 s: {doc}"
        );
    }
}

#[test]
fn workos_refresh_with_a_short_lived_jwt_does_not_refresh_before_every_batch() {
    for (case, life) in [("ten seconds", 10), ("expired at once", 0)] {
        let sandbox = long_rollout();
        let fresh = jwt(Ts::now().plus(Duration::from_secs(life)), "user_01");
        let workos = TokenEndpoint::start(
            vec![json!({"access_token": fresh, "refresh_token": "rt-next"})],
            Duration::ZERO,
        );
        let server = FakeKcap::start();
        let mut doc = kcap_tokens(
            &jwt(an_hour_ago(), "user_01"),
            "workos",
            None,
            an_hour_ago(),
        );
        doc["refresh_token"] = json!("rt-1");
        doc["client_id"] = json!("client_kcap");
        write_tokens(&sandbox.config, "default", &doc);
        let (p, code) = run_once(
            &sandbox,
            &server.url(),
            &[("KCAP_WORKOS_AUTHENTICATE_URL", &workos.url())],
        );
        assert_eq!(code, 0, "{case}: {}", p.stderr());
        assert_all_lines_delivered(&server, &sandbox, &p);
        assert!(batches(&server) >= 3, "{case}");
        assert_eq!(
            workos.forms().len(),
            1,
            "{case}: every refresh spends a single-use refresh token; log:\n{}",
            p.stderr()
        );
        assert!(
            all_bearer(&server, &fresh),
            "{case}: {:?}",
            api_auth(&server)
        );
    }
}

#[test]
fn machine_token_with_a_short_life_is_not_minted_before_every_batch() {
    for (case, answer) in [
        ("missing", json!({"access_token": "m-1"})),
        ("zero", json!({"access_token": "m-1", "expires_in": 0})),
        ("ten", json!({"access_token": "m-1", "expires_in": 10})),
    ] {
        let sandbox = long_rollout();
        let mint = TokenEndpoint::start(vec![answer], Duration::ZERO);
        let server = FakeKcap::start();
        server.require_token(Some("m-1"));
        let mint_url = mint.url();
        let env = [
            ("KCAP_CLIENT_ID", "client_machine"),
            ("KCAP_CLIENT_SECRET", "machine-secret-value"),
            ("KCAP_WORKOS_TOKEN_URL", mint_url.as_str()),
        ];
        let (p, code) = run_once(&sandbox, &server.url(), &env);
        assert_eq!(code, 0, "{case}: {}", p.stderr());
        assert_all_lines_delivered(&server, &sandbox, &p);
        assert!(batches(&server) >= 3, "{case}");
        assert_eq!(mint.forms().len(), 1, "{case}: {}", p.stderr());
    }
}

#[test]
fn expired_token_whose_refresh_failed_is_not_sent() {
    // GitHubApp: the kcap server's /auth/refresh answers 404 (the fake's default).
    let sandbox = with_rollout();
    let server = FakeKcap::start();
    write_tokens(
        &sandbox.config,
        "default",
        &kcap_tokens("tok-expired", "GitHubApp", None, an_hour_ago()),
    );
    let (p, code) = run_once(&sandbox, &server.url(), &[]);
    assert_eq!(code, 0, "{}", p.stderr());
    assert_all_lines_delivered(&server, &sandbox, &p);
    assert!(server.request_count("/auth/refresh") >= 1);
    let auth = api_auth(&server);
    assert!(
        !auth.is_empty() && auth.iter().all(Option::is_none),
        "{auth:?}"
    );
    assert!(
        p.stderr().contains("not sending the expired token"),
        "{}",
        p.stderr()
    );

    // WorkOS: the endpoint answers without an access token.
    let sandbox = with_rollout();
    let server = FakeKcap::start();
    let workos = TokenEndpoint::start(vec![json!({"error": "invalid_grant"})], Duration::ZERO);
    let expired = jwt(an_hour_ago(), "user_01");
    let mut doc = kcap_tokens(&expired, "workos", None, an_hour_ago());
    doc["refresh_token"] = json!("rt-1");
    doc["client_id"] = json!("client_kcap");
    write_tokens(&sandbox.config, "default", &doc);
    let (p, code) = run_once(
        &sandbox,
        &server.url(),
        &[("KCAP_WORKOS_AUTHENTICATE_URL", &workos.url())],
    );
    assert_eq!(code, 0, "{}", p.stderr());
    assert_all_lines_delivered(&server, &sandbox, &p);
    assert_eq!(workos.forms().len(), 1, "{}", p.stderr());
    let auth = api_auth(&server);
    assert!(
        !auth.is_empty() && auth.iter().all(Option::is_none),
        "{auth:?}"
    );
    assert!(!p.stderr().contains(&expired));
}

#[test]
fn every_request_carries_user_agent() {
    let agent = format!("kcap-watch/{}", env!("CARGO_PKG_VERSION"));
    // The kcap API and the GitHubApp refresh at the kcap server.
    let sandbox = with_rollout();
    let server = FakeKcap::start();
    server.answer_auth_refresh("tok-new", 3600);
    write_tokens(
        &sandbox.config,
        "default",
        &kcap_tokens("tok-old", "GitHubApp", None, an_hour_ago()),
    );
    let (p, code) = run_once(&sandbox, &server.url(), &[]);
    assert_eq!(code, 0, "{}", p.stderr());
    let requests = server.requests();
    assert!(requests.iter().any(|r| r.path == "/auth/refresh"));
    assert!(requests.len() >= 3);
    for r in &requests {
        assert_eq!(
            r.header("user-agent"),
            Some(agent.as_str()),
            "{} {}",
            r.method,
            r.path
        );
    }
    // The WorkOS and machine token endpoints.
    let sandbox = with_rollout();
    let server = FakeKcap::start();
    let workos = TokenEndpoint::start(
        vec![json!({"access_token": jwt(hour_from_now(), "u"), "refresh_token": "rt-2"})],
        Duration::ZERO,
    );
    let mut doc = kcap_tokens(&jwt(an_hour_ago(), "u"), "workos", None, an_hour_ago());
    doc["refresh_token"] = json!("rt-1");
    doc["client_id"] = json!("client_kcap");
    write_tokens(&sandbox.config, "default", &doc);
    let (p, code) = run_once(
        &sandbox,
        &server.url(),
        &[("KCAP_WORKOS_AUTHENTICATE_URL", &workos.url())],
    );
    assert_eq!(code, 0, "{}", p.stderr());
    assert_eq!(workos.agents(), vec![Some(agent.clone())]);
    let mint = TokenEndpoint::start(
        vec![json!({"access_token": "m-1", "expires_in": 3600})],
        Duration::ZERO,
    );
    let mint_url = mint.url();
    let (p, code) = run_once(
        &with_rollout(),
        &server.url(),
        &[
            ("KCAP_CLIENT_ID", "client_machine"),
            ("KCAP_CLIENT_SECRET", "machine-secret-value"),
            ("KCAP_WORKOS_TOKEN_URL", mint_url.as_str()),
        ],
    );
    assert_eq!(code, 0, "{}", p.stderr());
    assert_eq!(mint.agents(), vec![Some(agent.clone())]);
    for r in server.requests() {
        assert_eq!(
            r.header("user-agent"),
            Some(agent.as_str()),
            "{} {}",
            r.method,
            r.path
        );
    }
}

// ---- token files (docs/behaviour.md S4.3) -----------------------------------------------

fn utf16(text: &str, big_endian: bool) -> Vec<u8> {
    let mut bytes = if big_endian {
        vec![0xFE, 0xFF]
    } else {
        vec![0xFF, 0xFE]
    };
    for unit in text.encode_utf16() {
        bytes.extend(if big_endian {
            unit.to_be_bytes()
        } else {
            unit.to_le_bytes()
        });
    }
    bytes
}

#[test]
fn token_file_utf16_with_bom_is_sent() {
    let token = "tok-from-windows";
    for (case, bytes) in [
        (
            "UTF-8 with a BOM",
            [&b"\xEF\xBB\xBF"[..], token.as_bytes(), b"\r\n"].concat(),
        ),
        // PowerShell 5.1's `echo $t > file`.
        (
            "UTF-16 LE with a BOM",
            utf16(&format!("{token}\r\n"), false),
        ),
        ("UTF-16 BE with a BOM", utf16(&format!("{token}\n"), true)),
        ("UTF-8", format!("{token}\n").into_bytes()),
    ] {
        let sandbox = with_rollout();
        let server = FakeKcap::start();
        server.require_token(Some(token));
        let file = sandbox.dir.path().join("token.txt");
        std::fs::write(&file, bytes).unwrap();
        let (p, code) = run_once(
            &sandbox,
            &server.url(),
            &[("KCAP_TOKEN_FILE", file.to_str().unwrap())],
        );
        assert_eq!(code, 0, "{case}: {}", p.stderr());
        assert_all_lines_delivered(&server, &sandbox, &p);
        assert!(
            all_bearer(&server, token),
            "{case}: {:?}",
            api_auth(&server)
        );
        assert!(
            !p.stderr().contains("ignoring KCAP_TOKEN_FILE"),
            "{case}: {}",
            p.stderr()
        );
    }
}

// Unix only: the watcher is ended with SIGTERM to read its whole log (Windows has no
// SIGTERM; the token-file reasons themselves are unit-tested in ship::auth on every platform).
#[cfg(unix)]
#[test]
fn unusable_token_file_is_named_with_the_true_reason_and_the_401_says_none_was_sent() {
    for (case, bytes, reason) in [
        ("empty", b"\n".to_vec(), "it is empty"),
        (
            "two lines",
            b"tok-a\ntok-b\n".to_vec(),
            "it holds more than one line",
        ),
        (
            "not ASCII",
            "tök-ä\n".as_bytes().to_vec(),
            "it is not ASCII",
        ),
        (
            "UTF-16 BOM, two lines",
            utf16("a\r\nb\r\n", false),
            "it holds more than one line",
        ),
    ] {
        let sandbox = with_rollout();
        let server = FakeKcap::start();
        server.require_token(Some("tok-right"));
        let file = sandbox.dir.path().join("token.txt");
        std::fs::write(&file, &bytes).unwrap();
        let mut cmd = sandbox.watch(Some(&server.url()), &[]);
        cmd.env("KCAP_TOKEN_FILE", &file);
        let mut p = sandbox.spawn(&mut cmd);
        assert!(
            harness::wait_until(ONCE, || p.has_event("ship_failed")),
            "{case}: {}",
            p.stderr()
        );
        assert_eq!(p.terminate(ONCE), 0, "{case}: {}", p.stderr());
        let log = p.stderr();
        assert!(
            log.contains(&format!(
                "ignoring KCAP_TOKEN_FILE {}: {reason}",
                file.display()
            )),
            "{case}: {log}"
        );
        assert!(log.contains("without a token"), "{case}: {log}");
        assert!(!log.contains("refused the token"), "{case}: {log}");
        assert!(api_auth(&server).iter().all(Option::is_none));
    }
}

// ---- the legacy token file (docs/behaviour.md S4.4) -------------------------------------

#[test]
fn legacy_tokens_json_kept_when_other_profile_refreshes() {
    let sandbox = with_rollout();
    let server = FakeKcap::start();
    server.require_token(Some("tok-home-new"));
    server.answer_auth_refresh("tok-home-new", 3600);
    std::fs::create_dir_all(&sandbox.config).unwrap();
    // `work` is active and its only login is the legacy file.
    std::fs::write(
        sandbox.config.join("config.json"),
        r#"{"version":2,"active_profile":"work","profiles":{"work":{},"home":{}}}"#,
    )
    .unwrap();
    let legacy = sandbox.config.join("tokens.json");
    let legacy_doc = kcap_tokens("tok-work", "GitHubApp", None, hour_from_now());
    std::fs::write(&legacy, legacy_doc.to_string()).unwrap();
    let home = write_tokens(
        &sandbox.config,
        "home",
        &kcap_tokens("tok-home-old", "GitHubApp", None, an_hour_ago()),
    );
    let (p, code) = run_once(&sandbox, &server.url(), &[("KCAP_PROFILE", "home")]);
    assert_eq!(code, 0, "{}", p.stderr());
    assert_all_lines_delivered(&server, &sandbox, &p);
    assert_eq!(server.request_count("/auth/refresh"), 1, "{}", p.stderr());
    assert_eq!(read_json(&home)["access_token"], json!("tok-home-new"));
    assert_eq!(
        read_json(&legacy),
        legacy_doc,
        "the active profile's login survives"
    );

    // The active profile's own refresh retires it, as the kcap CLI's migration does.
    let server = FakeKcap::start();
    server.answer_auth_refresh("tok-work-new", 3600);
    std::fs::write(
        &legacy,
        kcap_tokens("tok-work", "GitHubApp", None, an_hour_ago()).to_string(),
    )
    .unwrap();
    let (p, code) = run_once(&sandbox, &server.url(), &[]);
    assert_eq!(code, 0, "{}", p.stderr());
    assert_eq!(server.request_count("/auth/refresh"), 1, "{}", p.stderr());
    assert_eq!(
        read_json(&sandbox.config.join("tokens/work.json"))["access_token"],
        json!("tok-work-new")
    );
    assert!(!legacy.exists());
}

// ---- KCAP_URL, TLS and proxies --------------------------------------------------------

#[test]
fn kcap_url_with_user_info_a_query_or_a_fragment_exits_2() {
    let sandbox = with_rollout();
    for url in [
        "https://alice:pw-secret@kcap.example.com",
        "https://alice@kcap.example.com",
        "https://kcap.example.com/?tenant=a",
        "https://kcap.example.com/#x",
    ] {
        let (p, code) = run_once(&sandbox, url, &[]);
        assert_eq!(code, 2, "{url}: {}", p.stderr());
        assert!(p.stderr().contains("KCAP_URL"), "{}", p.stderr());
        assert!(!p.stderr().contains("pw-secret"), "{}", p.stderr());
    }
}

/// A TLS front for the fake kcap on loopback, with a certificate for `127.0.0.1` and
/// `localhost` issued by a CA made here. Returns the port and the CA's PEM.
// Used only by the https test below, which is unix only.
#[cfg(unix)]
fn tls_front(upstream: SocketAddr) -> (u16, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "kcap-watch test CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();

    use tokio_rustls::rustls;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![leaf.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
    )
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    // A client that does not trust the certificate ends the handshake.
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Ok(mut up) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
                });
            }
        });
    });
    (port, ca_cert.pem())
}

// Unix only: the first watcher is ended with SIGTERM, which Windows does not have.
#[test]
#[cfg(unix)]
fn https_to_a_server_whose_ca_is_trusted_only_through_ssl_cert_file() {
    let server = FakeKcap::start();
    let (port, ca_pem) = tls_front(server.addr());
    let url = format!("https://localhost:{port}");

    // Without the CA: nothing reaches the server, the lines are spooled, and the log says
    // why in words a user can act on.
    let sandbox = with_rollout();
    let mut cmd = sandbox.watch(Some(&url), &[]);
    cmd.env_remove("SSL_CERT_FILE").env_remove("SSL_CERT_DIR");
    let mut p = sandbox.spawn(&mut cmd);
    assert!(
        harness::wait_until(ONCE, || p.stderr().contains("certificate")),
        "{}",
        p.stderr()
    );
    assert_eq!(p.terminate(ONCE), 0, "{}", p.stderr());
    assert!(server.requests().is_empty(), "the handshake failed");
    let log = p.stderr();
    assert!(log.contains("certificate"), "{log}");
    assert!(log.contains("SSL_CERT_FILE"), "{log}");

    // With it, through SSL_CERT_FILE alone.
    let sandbox = with_rollout();
    let ca_file = sandbox.dir.path().join("company-ca.pem");
    std::fs::write(&ca_file, ca_pem).unwrap();
    let mut cmd = sandbox.watch(Some(&url), &["--once"]);
    cmd.env("SSL_CERT_FILE", &ca_file)
        .env_remove("SSL_CERT_DIR");
    let mut p = sandbox.spawn(&mut cmd);
    assert_eq!(p.exit_code(ONCE, "watch --once"), 0, "{}", p.stderr());
    assert_all_lines_delivered(&server, &sandbox, &p);
}

#[test]
fn loopback_is_never_proxied() {
    let sandbox = with_rollout();
    let server = FakeKcap::start();
    let dead = format!("http://127.0.0.1:{}", harness::free_port());
    let mut env = Vec::new();
    for name in [
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "ALL_PROXY",
        "https_proxy",
        "http_proxy",
        "all_proxy",
    ] {
        env.push((name, dead.as_str()));
    }
    let mut cmd = sandbox.watch(Some(&server.url()), &["--once"]);
    cmd.env_remove("NO_PROXY").env_remove("no_proxy");
    for (k, v) in &env {
        cmd.env(k, v);
    }
    let mut p = sandbox.spawn(&mut cmd);
    assert_eq!(p.exit_code(ONCE, "watch --once"), 0, "{}", p.stderr());
    assert_all_lines_delivered(&server, &sandbox, &p);
}
