//! Helpers shared by the integration test suites (modules of `tests/it/main.rs`); each suite
//! uses only part of it.
#![allow(dead_code, unused_imports)]

pub mod bin;
pub mod fake_kcap;
pub mod harness;
pub mod kcap_cli_reader;
pub mod kcap_standin;
pub mod lifecycle_table;
pub mod procs;
pub mod rollout;
pub mod secrets;

pub use fake_kcap::{FakeKcap, Fault, RecordedRequest};

/// Taken by the few tests that keep a core busy for seconds (the fuzz properties, the 200 MiB
/// and 4 MiB lines, the capture of lines up to 4 MiB), so that they run one after another while
/// the many tests that mostly wait run beside them. Without it two of them overlapping on a
/// two-core machine would starve each other and every timing-sensitive test around them.
/// A test that failed while holding it does not poison it for the rest.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
