//! Reading complete lines of a growing rollout, and noticing that it grew.
//!
//! [`reader::LineReader`] turns the bytes after an offset into complete, numbered lines,
//! holding only the partial last line (bounded) and never re-reading what it has passed, so
//! noticing one appended line costs the same on a 10 KB file as on a 10 GB one.
//! [`seed`] is the start-up pass that folds the whole on-disk prefix.

pub mod index;
pub mod reader;
pub mod seed;
pub mod wake;

pub use reader::{Line, LineReader};
