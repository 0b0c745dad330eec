//! kcap-watch: tails a Codex rollout, ships its redacted lines to a kcap server and tells the
//! server when a sub-agent is done.
//!
//! The crate splits a pure core (classification, fold, decisions, redaction, batching: no
//! clock, file or socket inside; `now` is an argument) from a thin shell (tail reader, HTTP
//! client, files, the runtime loop). See docs/design.md and docs/guide.md.

pub mod cli;
pub mod codex;
pub mod commands;
pub mod config;
pub mod daemon;
pub mod decide;
pub mod error;
pub mod files;
pub mod fold;
pub(crate) mod host;
pub mod inspect;
pub mod key;
pub(crate) mod launch;
pub mod logging;
pub(crate) mod pipeline;
pub mod platform;
pub(crate) mod secret_names;
pub mod settings;
pub mod ship;
pub mod status;
pub mod status_file;
pub(crate) mod supervise;
pub mod tail;
pub(crate) mod telemetry;
pub mod time;
pub mod url_display;
pub mod watch;
