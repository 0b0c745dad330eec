//! `watch` and `replay`: the commands that need the runtime. PLACEHOLDER until shipping lands.

use anyhow::Result;

use crate::cli::{ReplayArgs, SettingsArgs, WatchArgs};
use crate::config::Resolved;

pub fn watch(_args: WatchArgs, _settings: fn(&SettingsArgs) -> Result<Resolved>) -> Result<i32> {
    anyhow::bail!("watch is not implemented yet")
}

pub fn replay(_args: ReplayArgs, _settings: fn(&SettingsArgs) -> Result<Resolved>) -> Result<i32> {
    anyhow::bail!("replay is not implemented yet")
}
