//! Settings as descriptors: one typed entry per setting, and everything made from it.
//!
//! Each setting is declared once, in `registry.rs`: its `KCAP_*` variable, its flag (or that it
//! has none), its doc, and its [kind](kinds), which knows the value's unit, default and how
//! flag and variable are read. From that one entry come the clap argument (with its help),
//! the man page's ENVIRONMENT section, the README's configuration table, and the resolution of
//! flag > variable > default in [`crate::config::resolve`]. Adding a setting is one entry in
//! the registry (plus the field of [`crate::config::Settings`] that carries its value).
//!
//! Flags and variables are deliberately read by different rules. A bad flag is a user's typo
//! and exits 2 naming the flag (clap rejects it while parsing, with the kind's own parser). A
//! bad variable comes from a parent process that configures spawned watchers through the
//! environment alone, so it falls back to its default with a warning naming the variable and
//! the value, and never aborts the watcher. clap's `env` feature would make a bad variable
//! abort like a bad flag, so it is not used; clap only collects the raw flag values here
//! ([`SettingsArgs`]) and the kinds do the rest.

mod docs;
pub mod kinds;
/// Declares the settings flags one command accepts: a type to flatten into its arguments
/// (it reads as [`SettingsArgs`]), taking the flags of every registry entry whose commands
/// name `$command`. A flag of another command is clap's "unexpected argument" error naming it
/// (exit 2); variables of settings a command does not use are not read
/// ([`crate::config::resolve_for`]).
macro_rules! command_settings {
    ($(#[$attr:meta])* $name:ident: $command:expr) => {
        $(#[$attr])*
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct $name(pub SettingsArgs);

        impl $name {
            /// The command these settings are for.
            pub const COMMAND: Command = $command;

            /// The long flags this command accepts, in registry order.
            pub fn flags() -> Vec<&'static str> {
                Self::COMMAND.flags()
            }
        }

        impl std::ops::Deref for $name {
            type Target = SettingsArgs;
            fn deref(&self) -> &SettingsArgs {
                &self.0
            }
        }

        impl clap::Args for $name {
            fn augment_args(cmd: clap::Command) -> clap::Command {
                cmd.args(
                    SETTINGS
                        .iter()
                        .filter(|s| s.commands().contains(&Self::COMMAND))
                        .filter_map(|s| s.arg()),
                )
            }

            fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
                <$name as clap::Args>::augment_args(cmd)
            }
        }

        impl clap::FromArgMatches for $name {
            fn from_arg_matches(m: &clap::ArgMatches) -> Result<$name, clap::Error> {
                let mut s = $name::default();
                s.update_from_arg_matches(m)?;
                Ok(s)
            }

            fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
                self.0.update_from(m, &$name::flags())
            }
        }
    };
}

mod registry;

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fmt;

use clap::{Arg, ArgAction, ArgMatches};

pub use docs::{environment_section, flag_note, markdown_table};
pub use kinds::{Kind, LogFormat};
pub use registry::*;

/// How a setting is reached by a user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposure {
    /// A flag (`--server`, with its value's placeholder, e.g. `URL`) and the variable.
    Flag {
        long: &'static str,
        value_name: &'static str,
    },
    /// The variable only, documented in the man page and the README: a secret must never be
    /// a flag, where `ps` would show it.
    EnvOnly,
    /// The variable only, and documented nowhere a user looks: an override for tests.
    Hidden,
}

/// A command that takes settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Watch,
    Supervise,
    Inspect,
    Replay,
    Daemon,
    Status,
}

impl Command {
    /// Every command that takes settings, in the order of `--help`.
    pub const ALL: [Command; 6] = [
        Command::Watch,
        Command::Inspect,
        Command::Supervise,
        Command::Replay,
        Command::Daemon,
        Command::Status,
    ];

    /// The subcommand's name on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Command::Watch => "watch",
            Command::Supervise => "supervise",
            Command::Inspect => "inspect",
            Command::Replay => "replay",
            Command::Daemon => "daemon",
            Command::Status => "status",
        }
    }

    /// Whether this command takes `setting`.
    pub fn takes(self, setting: &dyn Entry) -> bool {
        setting.commands().contains(&self)
    }

    /// The long flags this command accepts, in registry order.
    pub fn flags(self) -> Vec<&'static str> {
        SETTINGS
            .iter()
            .filter(|s| self.takes(**s))
            .filter_map(|s| s.flag())
            .collect()
    }
}

/// One setting: its variable, how it is exposed, what it does, its kind (unit, default,
/// reading rules), the commands that take it and whether it is a secret.
#[derive(Debug)]
pub struct Setting<K> {
    pub var: &'static str,
    pub exposure: Exposure,
    /// One or two sentences for `--help`, the man page and the README. The unit of the
    /// variable and the default are added from the kind; do not repeat them.
    pub doc: &'static str,
    pub kind: K,
    /// The commands that use it (the daemon takes what it passes on to its supervisors too).
    /// Any other command refuses its flag and does not read its variable.
    pub commands: &'static [Command],
    /// A credential, or half of one: never a flag, never written to a service file or a
    /// command line (the service names where it comes from instead).
    pub secret: bool,
}

impl<K> Setting<K> {
    /// A setting with a flag and a variable.
    pub const fn flag(
        var: &'static str,
        long: &'static str,
        value_name: &'static str,
        kind: K,
        doc: &'static str,
    ) -> Setting<K> {
        Setting {
            var,
            exposure: Exposure::Flag { long, value_name },
            doc,
            kind,
            commands: &[],
            secret: false,
        }
    }

    /// A documented setting with a variable and no flag.
    pub const fn env_only(var: &'static str, kind: K, doc: &'static str) -> Setting<K> {
        Setting {
            var,
            exposure: Exposure::EnvOnly,
            doc,
            kind,
            commands: &[],
            secret: false,
        }
    }

    /// An undocumented variable (a test override); `why` is for readers of the registry.
    pub const fn hidden(var: &'static str, kind: K, why: &'static str) -> Setting<K> {
        Setting {
            var,
            exposure: Exposure::Hidden,
            doc: why,
            kind,
            commands: &[],
            secret: false,
        }
    }

    /// The commands that take this setting.
    pub const fn taken_by(mut self, commands: &'static [Command]) -> Setting<K> {
        self.commands = commands;
        self
    }

    /// Marks a credential: it can have no flag (checked by a unit test) and is never written
    /// where others read (service files, command lines of spawned processes).
    pub const fn secret(mut self) -> Setting<K> {
        self.secret = true;
        self
    }

    /// The flag (`--server`), if the setting has one.
    pub const fn long(&self) -> Option<&'static str> {
        match self.exposure {
            Exposure::Flag { long, .. } => Some(long),
            Exposure::EnvOnly | Exposure::Hidden => None,
        }
    }
}

/// A setting seen without its kind's value type: what the registry list, clap and the
/// documents need.
pub trait Entry: Sync {
    fn var(&self) -> &'static str;
    fn exposure(&self) -> Exposure;
    fn doc(&self) -> &'static str;
    /// The flag (`--server`), if any.
    fn flag(&self) -> Option<&'static str>;
    /// The default as users see it, durations in flag syntax (`1h`).
    fn shown_default(&self) -> String;
    /// What the variable takes (`whole minutes`).
    fn var_syntax(&self) -> String;
    /// The clap argument for the flag, `None` without one.
    fn arg(&'static self) -> Option<Arg>;
    /// The commands that take it.
    fn commands(&self) -> &'static [Command];
    /// Whether it is a credential (see [`Setting::secret`]).
    fn is_secret(&self) -> bool;
    /// A valid value for the variable other than the default, and one for the flag (`None`
    /// for a switch, which takes none): what a test gives every setting to prove it
    /// round-trips (through a printed service, to a supervisor).
    fn example(&self) -> (String, Option<String>);
}

impl<K: Kind> Entry for Setting<K> {
    fn var(&self) -> &'static str {
        self.var
    }

    fn exposure(&self) -> Exposure {
        self.exposure
    }

    fn doc(&self) -> &'static str {
        self.doc
    }

    fn flag(&self) -> Option<&'static str> {
        self.long()
    }

    fn shown_default(&self) -> String {
        self.kind.shown_default()
    }

    fn commands(&self) -> &'static [Command] {
        self.commands
    }

    fn is_secret(&self) -> bool {
        self.secret
    }

    fn example(&self) -> (String, Option<String>) {
        self.kind.example()
    }

    fn var_syntax(&self) -> String {
        self.kind.var_syntax()
    }

    fn arg(&'static self) -> Option<Arg> {
        let Exposure::Flag { long, value_name } = self.exposure else {
            return None;
        };
        let id = arg_id(long);
        let arg = Arg::new(id).long(id).help_heading("Settings");
        let arg = match self.kind.value_parser() {
            Some(parser) => arg
                .value_name(value_name)
                .value_parser(parser)
                .action(ArgAction::Set),
            None => arg.action(ArgAction::SetTrue),
        };
        let note = flag_note(self);
        Some(arg.help(format!("{} {note}", self.doc)).long_help(format!(
            "{} {} takes {}.\n\n{note}",
            self.doc,
            self.var,
            self.kind.var_syntax()
        )))
    }
}

/// clap's id (and long name) of a flag: `--server` → `server`.
fn arg_id(long: &'static str) -> &'static str {
    long.strip_prefix("--").unwrap_or(long)
}

/// The clap arguments of every setting that has a flag, in registry order.
pub fn args() -> impl Iterator<Item = Arg> {
    SETTINGS.iter().filter_map(|s| s.arg())
}

/// The settings flags given on the command line, as given (checked by their kind's parser
/// while parsing). Empty: nothing given, the variables and defaults decide.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SettingsArgs {
    /// Raw value by flag (`--server`); a switch that was given maps to an empty value.
    given: BTreeMap<&'static str, OsString>,
}

impl SettingsArgs {
    /// The raw value of `flag` if it was given (a given switch reads as empty).
    pub fn get(&self, flag: &str) -> Option<&OsStr> {
        self.given.get(flag).map(OsString::as_os_str)
    }
}

impl clap::Args for SettingsArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        cmd.args(args())
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        cmd.args(args())
    }
}

impl clap::FromArgMatches for SettingsArgs {
    fn from_arg_matches(m: &ArgMatches) -> Result<SettingsArgs, clap::Error> {
        let mut s = SettingsArgs::default();
        s.update_from_arg_matches(m)?;
        Ok(s)
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        let every: Vec<&'static str> = SETTINGS.iter().filter_map(|s| s.flag()).collect();
        self.update_from(m, &every)
    }
}

impl SettingsArgs {
    /// Reads the values of `flags` (the flags a command accepts) from `m`.
    fn update_from(&mut self, m: &ArgMatches, flags: &[&'static str]) -> Result<(), clap::Error> {
        let internal =
            |e: clap::parser::MatchesError| clap::Error::raw(clap::error::ErrorKind::Io, e);
        for &long in flags {
            let id = arg_id(long);
            // A switch is stored as a bool by `SetTrue`, every other flag as the raw value.
            if let Ok(given) = m.try_get_one::<bool>(id) {
                if given.copied().unwrap_or(false) {
                    self.given.insert(long, OsString::new());
                }
                continue;
            }
            if let Some(v) = m.try_get_one::<OsString>(id).map_err(internal)? {
                self.given.insert(long, v.clone());
            }
        }
        Ok(())
    }
}

/// A setting as one command was given it: by its flag, its variable, or both (the flag wins
/// when the command resolves it).
#[derive(Clone)]
pub struct GivenSetting {
    pub setting: &'static dyn Entry,
    /// The flag and its raw value; a switch's value is empty.
    pub flag: Option<(&'static str, OsString)>,
    /// The variable's value, when set and not blank.
    pub var: Option<String>,
}

impl fmt::Debug for GivenSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The value of a secret is not shown.
        let var = match (&self.var, self.setting.is_secret()) {
            (Some(_), true) => Some("[REDACTED]"),
            (v, _) => v.as_deref(),
        };
        f.debug_struct("GivenSetting")
            .field("setting", &self.setting.var())
            .field("flag", &self.flag)
            .field("var", &var)
            .finish()
    }
}

/// Every setting `command` takes that it was given, by flag or variable, in registry order:
/// what it must hand on unchanged (to a printed service, to the processes it starts).
pub fn given(
    command: Command,
    args: &SettingsArgs,
    env: &dyn Fn(&str) -> Option<String>,
) -> Vec<GivenSetting> {
    SETTINGS
        .iter()
        .copied()
        .filter(|s| command.takes(*s))
        .filter_map(|setting| {
            let flag = setting
                .flag()
                .and_then(|long| args.get(long).map(|v| (long, v.to_os_string())));
            let var = env(setting.var()).filter(|v| !v.trim().is_empty());
            (flag.is_some() || var.is_some()).then_some(GivenSetting { setting, flag, var })
        })
        .collect()
}

/// A configuration the watcher cannot run with (exit code 2). The message names the flag or
/// variable, which is also in `name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The flag (`--server`) or variable (`KCAP_URL`) at fault.
    pub name: &'static str,
    pub(crate) message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Reads settings through their descriptors: the flag if given, else the variable, else the
/// default, by the rules of each setting's kind. Warnings about bad variables are collected.
pub struct Resolver<'a> {
    args: &'a SettingsArgs,
    env: &'a dyn Fn(&str) -> Option<String>,
    /// The command resolving: a setting it does not take is its default, its variable unread.
    /// `None`: every setting is read.
    command: Option<Command>,
    pub warnings: Vec<String>,
    /// Every variable read so far, so a test can prove no registry entry is left unread.
    read: Vec<&'static str>,
}

impl<'a> Resolver<'a> {
    pub fn new(args: &'a SettingsArgs, env: &'a dyn Fn(&str) -> Option<String>) -> Resolver<'a> {
        Resolver {
            args,
            env,
            command: None,
            warnings: Vec::new(),
            read: Vec::new(),
        }
    }

    /// A resolver for `command`: the settings it does not take keep their defaults, their
    /// variables unread (a variable meant for another command, e.g. a `KCAP_URL` `status`
    /// has no use for, can neither warn nor fail).
    pub fn for_command(
        command: Command,
        args: &'a SettingsArgs,
        env: &'a dyn Fn(&str) -> Option<String>,
    ) -> Resolver<'a> {
        Resolver {
            command: Some(command),
            ..Resolver::new(args, env)
        }
    }

    /// The value of `setting`.
    pub fn get<K: Kind>(&mut self, setting: &'static Setting<K>) -> Result<K::Value, ConfigError> {
        self.read.push(setting.var);
        if self.command.is_some_and(|c| !c.takes(setting)) {
            let unused = kinds::Input {
                var: setting.var,
                flag: None,
                raw_var: None,
            };
            return setting.kind.resolve(unused, &mut self.warnings);
        }
        let flag = setting
            .long()
            .and_then(|long| self.args.get(long).map(|v| (long, v)));
        let var = (self.env)(setting.var);
        setting.kind.resolve(
            kinds::Input {
                var: setting.var,
                flag,
                raw_var: var,
            },
            &mut self.warnings,
        )
    }

    /// Any other variable (`HOME`), read through the same environment.
    pub fn env(&self, name: &str) -> Option<String> {
        (self.env)(name)
    }

    /// The registry variables never read: empty once resolution covers every setting.
    pub fn unread(&self) -> Vec<&'static str> {
        SETTINGS
            .iter()
            .map(|s| s.var())
            .filter(|v| !self.read.contains(v))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_and_flags_are_unique() {
        let mut vars: Vec<_> = SETTINGS.iter().map(|s| s.var()).collect();
        vars.sort_unstable();
        vars.dedup();
        assert_eq!(vars.len(), SETTINGS.len(), "a variable is registered twice");
        let mut flags: Vec<_> = SETTINGS.iter().filter_map(|s| s.flag()).collect();
        let n = flags.len();
        flags.sort_unstable();
        flags.dedup();
        assert_eq!(flags.len(), n, "a flag is registered twice");
        for f in flags {
            assert!(f.starts_with("--"), "{f} must be written with its dashes");
        }
    }

    #[test]
    fn every_setting_is_taken_by_a_command_and_no_secret_is_a_flag() {
        for s in SETTINGS {
            assert!(!s.commands().is_empty(), "no command takes {}", s.var());
            if s.is_secret() {
                assert_eq!(s.flag(), None, "{} is a secret with a flag", s.var());
                assert_ne!(s.exposure(), Exposure::Hidden, "{}", s.var());
            }
        }
    }

    #[test]
    fn a_command_reads_only_the_variables_of_its_settings() {
        let args = SettingsArgs::default();
        let env = |name: &str| match name {
            "KCAP_URL" => Some("ftp://not-for-status".to_string()),
            "KCAP_CODEX_STALL_MINUTES" => Some("soon".to_string()),
            "HOME" => Some("/home/u".to_string()),
            _ => None,
        };
        let mut status = Resolver::for_command(Command::Status, &args, &env);
        assert_eq!(status.get(&SERVER), Ok(None));
        assert_eq!(status.get(&STALL_AFTER), Ok(Some(STALL_AFTER.kind.default)));
        assert!(status.warnings.is_empty(), "{:?}", status.warnings);
        let mut watch = Resolver::for_command(Command::Watch, &args, &env);
        assert!(watch.get(&SERVER).unwrap().is_some());
        watch.get(&STALL_AFTER).unwrap();
        assert_eq!(watch.warnings.len(), 1, "{:?}", watch.warnings);
    }

    #[test]
    fn given_lists_what_the_command_takes_flag_and_variable() {
        let mut args = SettingsArgs::default();
        args.given.insert("--stop-grace", OsString::from("30s"));
        let env = |name: &str| match name {
            "KCAP_CODEX_SUBAGENT_REAP_MINUTES" => Some("7".to_string()),
            "KCAP_WATCH_EXCLUDE" => Some("/srv/**".to_string()),
            "KCAP_PROFILE" => Some("  ".to_string()),
            _ => None,
        };
        let vars = |c: Command| -> Vec<&str> {
            given(c, &args, &env)
                .iter()
                .map(|g| g.setting.var())
                .collect()
        };
        assert_eq!(
            vars(Command::Daemon),
            [
                "KCAP_CODEX_SUBAGENT_IDLE_MINUTES",
                "KCAP_CODEX_SUBAGENT_REAP_MINUTES",
                "KCAP_WATCH_EXCLUDE"
            ]
        );
        assert_eq!(
            vars(Command::Watch),
            [
                "KCAP_CODEX_SUBAGENT_IDLE_MINUTES",
                "KCAP_CODEX_SUBAGENT_REAP_MINUTES"
            ]
        );
        assert!(vars(Command::Status).is_empty());
    }

    #[test]
    fn hidden_and_env_only_settings_have_no_argument() {
        for s in SETTINGS {
            assert_eq!(s.arg().is_some(), s.flag().is_some(), "{}", s.var());
        }
    }
}
