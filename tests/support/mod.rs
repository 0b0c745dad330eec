//! Helpers shared by the integration tests; each test crate includes this with `mod support;`
//! and uses only part of it.
#![allow(dead_code, unused_imports)]

pub mod bin;
pub mod fake_kcap;
pub mod harness;
pub mod lifecycle_table;
pub mod rollout;

pub use fake_kcap::{FakeKcap, Fault, RecordedRequest};
