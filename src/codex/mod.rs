//! The Codex rollout format: the one module that knows what Codex writes.
//!
//! A rollout line is classified (see [`classify`]) into a [`LineInfo`]: only the handful of
//! fields the fold and the identity need, extracted by a streaming scanner that never builds
//! a `serde_json::Value` and never holds more than a bounded amount of a line, because lines
//! of hundreds of MB exist and `function_call` writes its `arguments` before its `call_id`.

pub mod classify;
pub mod header;
pub mod layout;
pub mod lines;
pub mod observe;

pub use classify::{Classifier, classify};

use crate::time::Ts;

/// Longest captured text of an id, name, type or other short field. Longer values are cut at
/// a character boundary (ids are UUIDs; nothing the watcher needs is longer).
pub const MAX_SHORT_FIELD: usize = 512;

/// Longest captured `last_agent_message` (the stop request carries at most 4 KiB of it after
/// redaction; capturing more leaves room for redaction to shorten it).
pub const MAX_MESSAGE_FIELD: usize = 16 * 1024;

/// The envelope `type` of a line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Kind {
    SessionMeta,
    ResponseItem,
    EventMsg,
    TurnContext,
    Compacted,
    /// `inter_agent_communication_metadata`: announces the inter-agent mail that follows
    /// (`trigger_turn: false` means it is only queued, docs/behaviour.md R4.3).
    InterAgentMetadata,
    /// Any other kind (`world_state`, `token_usage_record`, `inter_agent_communication`, ...),
    /// or none at all: shipped, and activity, but nothing else to the fold.
    #[default]
    Other,
}

/// The `payload.type` values the fold distinguishes; everything else is [`PayloadType::Other`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PayloadType {
    /// `task_started`, or its alias `turn_started`.
    TaskStarted,
    /// `task_complete`, or its alias `turn_complete`.
    TaskComplete,
    TurnAborted,
    TokenCount,
    FunctionCall,
    CustomToolCall,
    LocalShellCall,
    ToolSearchCall,
    FunctionCallOutput,
    CustomToolCallOutput,
    ToolSearchOutput,
    /// `agent_message`: under `event_msg` the agent's own text (`message`); under
    /// `response_item` inter-agent mail (multi-agent v2).
    AgentMessage,
    #[default]
    Other,
}

impl PayloadType {
    /// Whether this `response_item` starts a tool call.
    pub fn is_call(self) -> bool {
        matches!(
            self,
            PayloadType::FunctionCall
                | PayloadType::CustomToolCall
                | PayloadType::LocalShellCall
                | PayloadType::ToolSearchCall
        )
    }

    /// Whether this `response_item` answers a tool call.
    pub fn is_output(self) -> bool {
        matches!(
            self,
            PayloadType::FunctionCallOutput
                | PayloadType::CustomToolCallOutput
                | PayloadType::ToolSearchOutput
        )
    }
}

/// One rate-limit window of a `token_count` line (`rate_limits.primary`, `.secondary`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct RateWindow {
    /// The window's key when it is one Codex writes (`primary`, `secondary`); `None` for any
    /// other key (`inspect` then names it by position).
    pub name: Option<&'static str>,
    /// `used_percent`, when present and a number.
    pub used_percent: Option<f64>,
    /// `window_minutes`, when present and a number (300: the five-hour window; 10080: weekly).
    pub window_minutes: Option<f64>,
    /// `resets_at` in unix seconds, when present and a number.
    pub resets_at: Option<f64>,
}

/// The window keys the classifier names; any other key is kept nameless.
pub const KNOWN_WINDOWS: [&str; 2] = ["primary", "secondary"];

/// The fields of a `session_meta` payload the watcher uses (all optional: old files lack most).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SessionMetaInfo {
    pub id: Option<String>,
    pub session_id: Option<String>,
    /// Top-level `parent_thread_id`.
    pub parent_thread_id: Option<String>,
    /// `source.subagent.thread_spawn.parent_thread_id` (the only parent in pre-mid-2026 files).
    pub spawn_parent_thread_id: Option<String>,
    pub thread_source: Option<String>,
    /// `source.subagent` is present (any value but absent).
    pub has_subagent_source: bool,
    /// What kind of sub-agent `source.subagent` names: its string value (`review`,
    /// `memory_consolidation`, ...) or the first key of its object form (`thread_spawn`,
    /// `other`, ...). Only for diagnostics: a child without a parent id is named by it.
    pub subagent_kind: Option<String>,
    /// `source.subagent.thread_spawn.agent_path` / `.agent_nickname`: where older and
    /// grandchild headers name the child when the top-level fields are absent.
    pub spawn_agent_path: Option<String>,
    pub spawn_agent_nickname: Option<String>,
    pub agent_path: Option<String>,
    pub agent_nickname: Option<String>,
    pub agent_role: Option<String>,
    pub cwd: Option<String>,
    pub cli_version: Option<String>,
    pub originator: Option<String>,
    /// `subagent_history_start_ordinal` (newer Codex, `history_mode: "paginated"`): lines of
    /// this file whose `ordinal` is below it are a copy of the parent's history (S6).
    pub history_start_ordinal: Option<u64>,
}

/// What the fold and the identity need from one raw line.
///
/// A line that is not a JSON object (after removing a BOM and a trailing `\r`) has
/// `malformed == true` and every other field at its default.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct LineInfo {
    pub malformed: bool,
    pub kind: Kind,
    pub payload_type: PayloadType,
    /// The raw `payload.type` string, whatever it is (for `inspect` and the stall warning's
    /// "last line kind"), cut to [`MAX_SHORT_FIELD`].
    pub payload_type_raw: Option<String>,
    /// Envelope `timestamp`, when present and a valid RFC 3339 string.
    pub timestamp: Option<Ts>,
    /// `payload.call_id`.
    pub call_id: Option<String>,
    /// `payload.name` (the tool's name on a call).
    pub name: Option<String>,
    /// `payload.turn_id`.
    pub turn_id: Option<String>,
    /// `payload.last_agent_message`: `None` when absent, `Some("")` when `null`.
    pub last_agent_message: Option<String>,
    /// `payload.error.message` (Codex's text for a failed turn, such as the usage-limit
    /// "try again at ..."), cut to [`MAX_MESSAGE_FIELD`].
    pub error_message: Option<String>,
    /// `payload.message` when a string (an `event_msg` `agent_message`'s text), cut to
    /// [`MAX_MESSAGE_FIELD`].
    pub message: Option<String>,
    /// `payload.trigger_turn` when a boolean (`inter_agent_communication_metadata`).
    pub trigger_turn: Option<bool>,
    /// The envelope's `ordinal` (newer Codex numbers every line), when a whole number.
    pub ordinal: Option<u64>,
    /// `payload.error.codex_error_info`: the string, or the single key of the object form
    /// (`{"response_too_many_failed_attempts": {...}}` gives that key).
    pub codex_error_info: Option<String>,
    /// `payload.rate_limits` windows that are objects (`primary`, `secondary`, ...), in order.
    /// Empty when `rate_limits` is absent or `null`. At most 8 are kept.
    pub rate_limits: Vec<RateWindow>,
    /// Set only for `session_meta` lines.
    pub meta: Option<Box<SessionMetaInfo>>,
}

impl LineInfo {
    /// A line that is not a JSON object.
    pub fn malformed() -> LineInfo {
        LineInfo {
            malformed: true,
            ..LineInfo::default()
        }
    }
}
