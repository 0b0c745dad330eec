//! The one integration test binary: every suite is a module of this crate, so all of their
//! tests run as threads of one process (and CI links one binary instead of one per suite).
//! Most of these tests wait on real time — spawned watchers, the fake kcap server, shutdown
//! budgets — so running the suites side by side rather than one after another is what keeps
//! `cargo test` fast. The few tests that need the CPU to themselves take [`support::serial`].
//!
//! One suite alone: `cargo test --test it <suite>::` (for example `e2e_delivery::`).

mod support;

mod auth;
mod bad_input;
mod bench_script;
mod capture;
mod classify_props;
mod cli_config;
mod client;
mod daemon;
mod daemon_faults;
mod daemon_settings;
mod e2e_delivery;
mod e2e_follow;
mod e2e_lifecycle;
mod e2e_real_codex_rollouts;
mod e2e_ship;
mod files_spool;
mod fold_props;
mod fuzz_props;
mod heartbeat_reader;
mod inspect_scenarios;
mod inspect_tree;
mod lifecycle_loop;
mod man_pages;
mod process_behaviour;
mod readme;
mod redact_code_classes;
mod redact_families;
mod redact_forms;
mod redact_oracle;
mod redact_precision;
mod redact_props;
mod redact_table;
mod redact_v2_props;
mod regressions;
mod reliability_soak;
mod scenarios;
mod security;
mod settings_registry;
mod status;
mod status_files;
mod supervise;
mod tail_model;
