//! A stateful fake kcap server (docs/behaviour.md A1-A5) with fault injection.
//!
//! It runs on its own thread with its own tokio runtime, so a test can drive it from sync
//! code while the real binary talks to it, or from an async test while a `KcapClient` does.
//! Every method takes `&self` and can be called at any time, also while requests are in
//! flight.
//!
//! What it models:
//! - Transcript streams keyed by `(session_id, agent_id)`, where a session watcher's stream
//!   has the agent `""`. Stored lines are kept by number; the watermark is the highest stored
//!   number. `GET .../last-line` answers `404` for an unknown stream, `204` for a stream that
//!   exists but is empty (created by `subagent-start`, [`FakeKcap::create_stream`], or emptied
//!   by [`FakeKcap::lose_last_lines`]), else `200 {"last_line_number": N}`.
//! - `POST /hooks/transcript` validates the batch like a strict server (`400` on a malformed
//!   body) and stores its lines; every other `POST /hooks/{route}` must carry a JSON object
//!   and is kept for [`FakeKcap::hooks`]; `subagent-start` also creates the child's stream.
//! - Faults, checked before anything else (before the token check too), in the order they
//!   were added: see [`Fault`].
//!
//! "Routes" name requests throughout: the path after `/hooks/` for posts (`transcript`,
//! `subagent-stop`, `session-end/codex`) and `last-line` for watermark queries.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use http_body::Frame;
use serde_json::Value;

/// A misbehaviour to inject.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Answer with this status and a short text body, storing nothing.
    Status(u16),
    /// `429 Too Many Requests` with `Retry-After: <seconds>`, storing nothing.
    RetryAfter(u64),
    /// Never answer (until the server is dropped).
    Hang,
    /// Handle the request normally, but only after this delay.
    Delay(Duration),
    /// Send `200` headers announcing a body longer than what follows, then close the
    /// connection mid-body. With `store`, the request is processed first (the server kept
    /// it but the answer was lost); without, nothing is stored.
    DropConnection { store: bool },
}

/// One request as the server saw it (also the ones answered by a fault).
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    /// See the module docs.
    pub route: String,
    /// Lower-case names, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl RecordedRequest {
    /// The first value of a header (name case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The agent whose stream the request is about: the body's `agent_id`, or the
    /// watermark query's `agentId`.
    pub fn agent(&self) -> Option<String> {
        if let Some(a) = self
            .json()
            .and_then(|v| v["agent_id"].as_str().map(str::to_owned))
        {
            return Some(a);
        }
        let query = self.query.as_deref()?;
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix("agentId="))
            .map(str::to_owned)
    }

    pub fn authorization(&self) -> Option<&str> {
        self.header("authorization")
    }

    /// The body parsed as JSON, when it is JSON.
    pub fn json(&self) -> Option<Value> {
        serde_json::from_str(&self.body).ok()
    }
}

struct FaultRule {
    route: Option<String>,
    /// Only requests for this agent's stream (body `agent_id` or query `agentId`).
    agent: Option<String>,
    /// `None`: until [`FakeKcap::clear_faults`].
    remaining: Option<usize>,
    fault: Fault,
}

type StreamKey = (String, String);

#[derive(Default)]
struct State {
    streams: HashMap<StreamKey, BTreeMap<u64, String>>,
    requests: Vec<RecordedRequest>,
    hooks: Vec<(String, Value)>,
    faults: Vec<FaultRule>,
    required_token: Option<String>,
    refused_lines: HashMap<u64, u16>,
    null_for_empty: bool,
    /// The answer of `POST /auth/refresh`: a new access token and its `expires_in`.
    auth_refresh: Option<(String, u64)>,
    /// The answer of `POST /auth/refresh` as a whole body (wins over `auth_refresh`).
    auth_refresh_body: Option<Value>,
}

impl State {
    fn take_fault(&mut self, route: &str, agent: Option<&str>) -> Option<Fault> {
        let idx = self.faults.iter().position(|r| {
            r.remaining != Some(0)
                && r.route.as_deref().is_none_or(|want| want == route)
                && r.agent.as_deref().is_none_or(|want| Some(want) == agent)
        })?;
        let rule = &mut self.faults[idx];
        if let Some(n) = &mut rule.remaining {
            *n -= 1;
        }
        let fault = rule.fault.clone();
        self.faults.retain(|r| r.remaining != Some(0));
        Some(fault)
    }
}

/// The fake server; dropping it stops it (requests still hanging are abandoned).
pub struct FakeKcap {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeKcap {
    /// Starts a server on `127.0.0.1` with a free port.
    pub fn start() -> FakeKcap {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the fake kcap");
        listener
            .set_nonblocking(true)
            .expect("make the listener non-blocking");
        let addr = listener.local_addr().expect("fake kcap address");
        let state = Arc::new(Mutex::new(State::default()));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let app_state = state.clone();
        let thread = std::thread::Builder::new()
            .name("fake-kcap".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("fake kcap runtime");
                runtime.block_on(async move {
                    let listener =
                        tokio::net::TcpListener::from_std(listener).expect("fake kcap listener");
                    let app = Router::new().fallback(move |req: Request| {
                        let state = app_state.clone();
                        async move { handle(state, req).await }
                    });
                    tokio::select! {
                        r = axum::serve(listener, app).into_future() => {
                            if let Err(e) = r {
                                eprintln!("fake kcap stopped: {e}");
                            }
                        }
                        _ = rx => {}
                    }
                });
                // Dropping the runtime drops every connection task, hanging ones included.
                drop(runtime);
            })
            .expect("start the fake kcap thread");
        FakeKcap {
            addr,
            state,
            shutdown: Some(tx),
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:<port>`, without a trailing slash (what `KCAP_URL` gets).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    // ---- what the server holds --------------------------------------------------------

    /// The stored lines of a stream (`agent` is `""` for a session's own stream).
    pub fn lines(&self, session: &str, agent: &str) -> BTreeMap<u64, String> {
        self.state()
            .streams
            .get(&key(session, agent))
            .cloned()
            .unwrap_or_default()
    }

    /// The highest stored line number of a stream.
    pub fn watermark(&self, session: &str, agent: &str) -> Option<u64> {
        self.state()
            .streams
            .get(&key(session, agent))
            .and_then(|l| l.keys().next_back().copied())
    }

    pub fn stream_exists(&self, session: &str, agent: &str) -> bool {
        self.state().streams.contains_key(&key(session, agent))
    }

    /// Bodies of the accepted (`2xx`) posts to `/hooks/{route}`, in arrival order.
    pub fn hooks(&self, route: &str) -> Vec<Value> {
        self.state()
            .hooks
            .iter()
            .filter(|(r, _)| r == route)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Every request received, faulted ones included.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state().requests.clone()
    }

    /// Every request received on one route, faulted ones included.
    pub fn requests_to(&self, route: &str) -> Vec<RecordedRequest> {
        self.state()
            .requests
            .iter()
            .filter(|r| r.route == route)
            .cloned()
            .collect()
    }

    /// How many requests arrived on a route, faulted ones included.
    pub fn request_count(&self, route: &str) -> usize {
        self.state()
            .requests
            .iter()
            .filter(|r| r.route == route)
            .count()
    }

    /// Polls `done` every 10 ms until it holds or `timeout` passes; returns whether it held.
    /// Blocks the calling thread: from an async test use [`FakeKcap::wait_for`].
    pub fn wait_until(&self, timeout: Duration, mut done: impl FnMut(&FakeKcap) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if done(self) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// [`FakeKcap::wait_until`] for async tests (sleeps with tokio).
    pub async fn wait_for(
        &self,
        timeout: Duration,
        mut done: impl FnMut(&FakeKcap) -> bool,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if done(self) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    // ---- arranging the server's state --------------------------------------------------

    /// Creates an empty stream (as `subagent-start` would): its watermark answers `204`.
    pub fn create_stream(&self, session: &str, agent: &str) {
        self.state().streams.entry(key(session, agent)).or_default();
    }

    /// Stores lines as if they had been shipped earlier.
    pub fn store_lines<'a>(
        &self,
        session: &str,
        agent: &str,
        lines: impl IntoIterator<Item = (u64, &'a str)>,
    ) {
        let mut state = self.state();
        let stream = state.streams.entry(key(session, agent)).or_default();
        for (n, text) in lines {
            stream.insert(n, text.to_owned());
        }
    }

    /// Forgets the `k` highest stored lines of a stream: the watermark moves backwards (a
    /// server restored from a backup). The stream itself stays (empty: `204`).
    pub fn lose_last_lines(&self, session: &str, agent: &str, k: usize) {
        if let Some(stream) = self.state().streams.get_mut(&key(session, agent)) {
            for _ in 0..k {
                stream.pop_last();
            }
        }
    }

    /// Answer an existing empty stream with `200 {"last_line_number": null}` instead of `204`.
    pub fn answer_empty_with_null(&self, yes: bool) {
        self.state().null_for_empty = yes;
    }

    // ---- faults ------------------------------------------------------------------------

    /// The next `n` requests, whatever their route, meet `fault`.
    pub fn fail_next(&self, n: usize, fault: Fault) {
        self.add_fault(None, Some(n), fault);
    }

    /// The next `n` requests on `route` meet `fault`.
    pub fn fail_next_on(&self, route: &str, n: usize, fault: Fault) {
        self.add_fault(Some(route), Some(n), fault);
    }

    /// Every request on `route` (`None`: on every route) meets `fault` until
    /// [`FakeKcap::clear_faults`].
    pub fn fail_always(&self, route: Option<&str>, fault: Fault) {
        self.add_fault(route, None, fault);
    }

    /// Every request on `route` for `agent`'s stream meets `fault` until
    /// [`FakeKcap::clear_faults`]; other agents are served normally.
    pub fn fail_always_for_agent(&self, route: &str, agent: &str, fault: Fault) {
        self.state().faults.push(FaultRule {
            route: Some(route.to_owned()),
            agent: Some(agent.to_owned()),
            remaining: None,
            fault,
        });
    }

    pub fn clear_faults(&self) {
        self.state().faults.clear();
    }

    fn add_fault(&self, route: Option<&str>, remaining: Option<usize>, fault: Fault) {
        if remaining == Some(0) {
            return;
        }
        self.state().faults.push(FaultRule {
            route: route.map(str::to_owned),
            agent: None,
            remaining,
            fault,
        });
    }

    /// Requires `Authorization: Bearer <token>` on every request (`401` otherwise); `None`
    /// lifts the requirement. Can be changed at any time (a rotated token).
    pub fn require_token(&self, token: Option<&str>) {
        self.state().required_token = token.map(str::to_owned);
    }

    /// Makes `POST /auth/refresh` (the kcap server's `GitHubApp` token refresh) answer
    /// `{"access_token": token, "expires_in": expires_in}`, whatever token it is sent (the
    /// request is recorded with the route `/auth/refresh`). Unset, it answers `404`.
    pub fn answer_auth_refresh(&self, token: &str, expires_in: u64) {
        self.state().auth_refresh = Some((token.to_owned(), expires_in));
    }

    /// Makes `POST /auth/refresh` answer `200` with exactly `body` (say, an `access_token`
    /// without `expires_in`), whatever token it is sent.
    pub fn answer_auth_refresh_body(&self, body: Value) {
        self.state().auth_refresh_body = Some(body);
    }

    /// Refuses (with `status`, e.g. 400 or 422) any transcript batch holding line `line`,
    /// storing none of its lines.
    pub fn refuse_line(&self, line: u64, status: u16) {
        self.state().refused_lines.insert(line, status);
    }

    pub fn clear_refused_lines(&self) {
        self.state().refused_lines.clear();
    }
}

impl Drop for FakeKcap {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn key(session: &str, agent: &str) -> StreamKey {
    (session.to_owned(), agent.to_owned())
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // A failed assertion in a test thread must not cascade into every later request.
    state.lock().unwrap_or_else(|p| p.into_inner())
}

fn route_of(path: &str) -> String {
    if let Some(rest) = path.strip_prefix("/hooks/") {
        return rest.to_owned();
    }
    if path.starts_with("/api/sessions/") && path.ends_with("/last-line") {
        return "last-line".to_owned();
    }
    path.to_owned()
}

async fn handle(state: Arc<Mutex<State>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = match axum::body::to_bytes(body, 64 << 20).await {
        Ok(b) => b,
        Err(e) => return text(400, &format!("failed to read the request body: {e}")),
    };
    let recorded = RecordedRequest {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        route: route_of(parts.uri.path()),
        headers: parts
            .headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    let fault = {
        let mut st = lock(&state);
        st.requests.push(recorded.clone());
        let agent = recorded.agent();
        st.take_fault(&recorded.route, agent.as_deref())
    };
    match fault {
        None => serve(&state, &parts.method, &recorded),
        Some(Fault::Status(status)) => text(status, "injected failure"),
        Some(Fault::RetryAfter(secs)) => {
            let mut r = text(429, "slow down");
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            r
        }
        Some(Fault::Hang) => std::future::pending().await,
        Some(Fault::Delay(d)) => {
            tokio::time::sleep(d).await;
            serve(&state, &parts.method, &recorded)
        }
        Some(Fault::DropConnection { store }) => {
            if store {
                let _ = serve(&state, &parts.method, &recorded);
            }
            cut_short()
        }
    }
}

/// A `200` whose `Content-Length` promises more than the body holds: hyper sends the
/// headers and the first bytes, and when the body then fails it closes the connection, so
/// the client sees an answer cut off mid-body.
fn cut_short() -> Response {
    let mut r = Response::new(Body::new(CutShort {
        sent: false,
        // The pause makes hyper flush the headers and the first bytes before the cut.
        pause: Box::pin(tokio::time::sleep(Duration::from_millis(20))),
    }));
    r.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(4096u32));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

struct CutShort {
    sent: bool,
    pause: Pin<Box<tokio::time::Sleep>>,
}

impl HttpBody for CutShort {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if !self.sent {
            self.sent = true;
            return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"{\"ok\":tr")))));
        }
        match self.pause.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => Poll::Ready(Some(Err(std::io::Error::other(
                "fake kcap cuts the connection",
            )))),
        }
    }
}

fn text(status: u16, msg: &str) -> Response {
    let mut r = Response::new(Body::from(msg.to_owned()));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r
}

fn json(status: u16, value: &Value) -> Response {
    let mut r = text(status, &value.to_string());
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn serve(state: &Mutex<State>, method: &Method, req: &RecordedRequest) -> Response {
    let mut st = lock(state);
    if *method == Method::POST && req.path == "/auth/refresh" {
        if let Some(body) = &st.auth_refresh_body {
            return json(200, body);
        }
        return match &st.auth_refresh {
            Some((token, expires_in)) => json(
                200,
                &serde_json::json!({"access_token": token, "expires_in": expires_in}),
            ),
            None => text(404, "no such route"),
        };
    }
    if let Some(want) = &st.required_token
        && req.authorization() != Some(format!("Bearer {want}").as_str())
    {
        return text(401, "unauthorized");
    }
    if *method == Method::GET && req.route == "last-line" {
        return last_line(&st, req);
    }
    if *method != Method::POST || !req.path.starts_with("/hooks/") {
        return text(404, "no such route");
    }
    let Some(body) = req.json().filter(Value::is_object) else {
        return text(400, "the body must be a JSON object");
    };
    if req.route == "transcript" {
        if let Err((status, why)) = store_batch(&mut st, &body) {
            return text(status, why);
        }
    } else if req.route == "subagent-start" {
        let (Some(session), Some(agent)) = (body["session_id"].as_str(), body["agent_id"].as_str())
        else {
            return text(400, "subagent-start needs session_id and agent_id");
        };
        st.streams.entry(key(session, agent)).or_default();
    }
    st.hooks.push((req.route.clone(), body));
    json(200, &serde_json::json!({}))
}

fn last_line(st: &State, req: &RecordedRequest) -> Response {
    // `/api/sessions/{session}/last-line`
    let session = req
        .path
        .trim_start_matches("/api/sessions/")
        .trim_end_matches("/last-line");
    let agent = req
        .query
        .as_deref()
        .unwrap_or("")
        .split('&')
        .find_map(|pair| pair.strip_prefix("agentId="))
        .unwrap_or("");
    match st.streams.get(&key(session, agent)) {
        None => text(404, "no such stream"),
        Some(lines) => match lines.keys().next_back() {
            Some(n) => json(200, &serde_json::json!({ "last_line_number": n })),
            None if st.null_for_empty => {
                json(200, &serde_json::json!({ "last_line_number": null }))
            }
            None => {
                let mut r = Response::new(Body::empty());
                *r.status_mut() = StatusCode::NO_CONTENT;
                r
            }
        },
    }
}

/// Validates a `/hooks/transcript` body like a strict server and stores its lines.
/// The refusal is a status and a reason.
fn store_batch(st: &mut State, body: &Value) -> Result<(), (u16, &'static str)> {
    let bad = |why: &'static str| Err((400, why));
    let Some(session) = body["session_id"].as_str() else {
        return bad("session_id must be a string");
    };
    let agent = match &body["agent_id"] {
        Value::Null => "",
        Value::String(s) => s.as_str(),
        _ => return bad("agent_id must be a string or null"),
    };
    if !body["vendor"].is_string() {
        return bad("vendor must be a string");
    }
    let Some(lines) = body["lines"]
        .as_array()
        .and_then(|a| a.iter().map(Value::as_str).collect::<Option<Vec<_>>>())
    else {
        return bad("lines must be an array of strings");
    };
    let Some(numbers) = body["line_numbers"]
        .as_array()
        .and_then(|a| a.iter().map(Value::as_u64).collect::<Option<Vec<_>>>())
    else {
        return bad("line_numbers must be an array of non-negative integers");
    };
    if lines.len() != numbers.len() {
        return bad("lines and line_numbers differ in length");
    }
    if numbers.windows(2).any(|w| w[0] >= w[1]) {
        return bad("line_numbers must be strictly increasing");
    }
    if let Some(status) = numbers.iter().find_map(|n| st.refused_lines.get(n)) {
        return Err((*status, "refused line"));
    }
    let stream = st.streams.entry(key(session, agent)).or_default();
    for (n, line) in numbers.iter().zip(lines) {
        stream.insert(*n, line.to_owned());
    }
    Ok(())
}
