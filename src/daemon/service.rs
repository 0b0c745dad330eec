//! `kcap-watch daemon --print-service systemd|launchd|windows` (docs/behaviour.md S2.6): the
//! service definition that keeps the daemon running for this user, with the absolute path
//! of the installed binary and the non-secret variables of the current environment.
//!
//! Restart on failure, but never after exit 2 (bad configuration: restarting cannot help) or
//! 75 (another daemon runs). systemd says so with `RestartPreventExitStatus`; launchd can only
//! restart on any failure (`KeepAlive` on `SuccessfulExit` false) and is throttled instead;
//! Task Scheduler restarts a failed task a few times a minute apart.
//!
//! The supervisors are detached from the daemon, and each service manager is told not to end
//! them with it (`KillMode=process`, `AbandonProcessGroup`): the daemon ends them itself on
//! SIGTERM, each spooling what it could not deliver, and a restarted daemon adopts the ones
//! still running.

use std::fmt::Write as _;
use std::path::Path;

use crate::config::Settings;
use crate::settings::{self as registry, GivenSetting};

/// Variables that are not kcap-watch settings but reach its HTTP client (proxies, a company
/// CA): carried when set, a URL among them shown as every URL is.
pub(crate) const OUTSIDE_VARIABLES: &[&str] = &[
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// What a printed service carries: every non-secret setting the daemon was given, as given,
/// so the daemon it starts resolves the same settings (and passes them to its supervisors).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Carried {
    /// The words after `daemon`: the settings flags given (`--stop-grace`, `30s`).
    pub args: Vec<String>,
    /// The variables (name, value): the settings' `KCAP_*` variables set now, then the
    /// [`OUTSIDE_VARIABLES`].
    pub vars: Vec<(String, String)>,
    /// Comment lines: where the token is read, and the secrets left out.
    pub notes: Vec<String>,
}

/// What a service for `given` (the settings `daemon` was given, [`settings::given`]) carries;
/// `settings` are the same resolved, to name where the token comes from. A URL (`--server`,
/// `KCAP_URL`, a proxy) is written as every URL is shown: its userinfo password and
/// secret-named query values as `[REDACTED]` (a service file is read by more than its owner's
/// eyes: backups, dotfile repositories). A secret is never written. Err: a flag's value a
/// service file cannot hold (not UTF-8).
pub fn carried(
    given: &[GivenSetting],
    settings: &Settings,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Carried, String> {
    let is_url =
        |var: &str| var == registry::SERVER.var || var.to_ascii_uppercase().ends_with("_PROXY");
    let shown = |var: &str, v: String| {
        if is_url(var) {
            crate::url_display::redacted(&v)
        } else {
            v
        }
    };
    let mut c = Carried::default();
    let mut left_out = Vec::new();
    for g in given {
        let var = g.setting.var();
        if g.setting.is_secret() {
            left_out.push(var);
            continue;
        }
        if let Some((long, value)) = &g.flag {
            let value = value.to_str().ok_or_else(|| {
                format!("failed to write {long} into the service definition: its value is not valid UTF-8")
            })?;
            c.args.push((*long).to_owned());
            // A given switch has no value.
            if !value.is_empty() {
                c.args.push(shown(var, value.to_owned()));
            }
        }
        if let Some(v) = &g.var {
            c.vars.push((var.to_owned(), shown(var, v.clone())));
        }
    }
    for name in OUTSIDE_VARIABLES {
        if let Some(v) = env(name).filter(|v| !v.is_empty()) {
            c.vars.push(((*name).to_owned(), shown(name, v)));
        }
    }
    c.notes.push(match &settings.token_file {
        Some(file) => format!(
            "The token is read from {} ({}); no secret is written here.",
            file.display(),
            registry::TOKEN_FILE.var
        ),
        None => format!(
            "The token is read from the kcap CLI's token store, {} (kcap login); no secret \
             is written here.",
            settings
                .config_dir
                .join("tokens")
                .join(format!(
                    "{}.json",
                    settings.profile.as_deref().unwrap_or("<active profile>")
                ))
                .display()
        ),
    });
    if !left_out.is_empty() {
        c.notes.push(format!(
            "Left out although set now: {}.",
            left_out.join(", ")
        ));
    }
    Ok(c)
}

/// Whether `exe` is in a cargo target directory, where the next build replaces it, so no
/// service may point there. Recognised by what it is, never by its name (`CARGO_TARGET_DIR`
/// may name any directory, and a directory named `target` may be anything):
/// `cargo_target_dir` (the `CARGO_TARGET_DIR` set now) or a directory above `exe` holding
/// what cargo writes into every target directory, `.rustc_info.json` or a `CACHEDIR.TAG`
/// (a cache directory, by the tag's own convention, is no place to install a program either).
pub fn in_build_dir(exe: &Path, cargo_target_dir: Option<&Path>) -> bool {
    let target_dir = cargo_target_dir
        .filter(|d| !d.as_os_str().is_empty())
        .and_then(|d| std::fs::canonicalize(d).ok())
        // As the binary's own path is written (no `\\?\` prefix on Windows).
        .map(crate::platform::plain_path::plain);
    exe.ancestors().any(|dir| {
        target_dir.as_deref() == Some(dir)
            || dir.join(".rustc_info.json").is_file()
            || crate::files::read_small(&dir.join("CACHEDIR.TAG"), 4096)
                .is_ok_and(|t| t.starts_with(CACHEDIR_SIGNATURE))
    })
}

/// The first line of every `CACHEDIR.TAG` (the Cache Directory Tagging convention).
const CACHEDIR_SIGNATURE: &str = "Signature: 8a477f597d28d172789f06886806bc55";

/// Which service manager.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ServiceKind {
    /// A systemd user unit (`~/.config/systemd/user/kcap-watch.service`).
    Systemd,
    /// A launchd LaunchAgent (`~/Library/LaunchAgents/io.kurrent.kcap-watch.plist`).
    Launchd,
    /// A Task Scheduler task run at logon (`schtasks /Create /XML`).
    Windows,
}

/// The launchd label and the Task Scheduler task name.
pub const LABEL: &str = "io.kurrent.kcap-watch";

/// The definition for `kind`, running `exe daemon` with what `carried` holds.
pub fn render(kind: ServiceKind, exe: &Path, carried: &Carried) -> String {
    match kind {
        ServiceKind::Systemd => systemd(exe, carried),
        ServiceKind::Launchd => launchd(exe, carried),
        ServiceKind::Windows => windows(exe, carried),
    }
}

/// Open files the service allows the daemon and the supervisors it starts (they inherit
/// it): a held child key costs one descriptor (its lock), so thousands of children need more
/// than the 1,024 most service managers give by default.
pub(crate) const OPEN_FILES: u32 = 65_536;

/// systemd's quoting for one word of `ExecStart=` or one `Environment=` assignment.
fn systemd_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '%' => out.push_str("%%"),
            '$' => out.push_str("$$"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn systemd(exe: &Path, carried: &Carried) -> String {
    let mut s = String::new();
    s.push_str("[Unit]\n");
    s.push_str("Description=kcap-watch daemon: ships every Codex sub-agent the kcap CLI watches\n");
    s.push_str("After=network-online.target\n\n");
    s.push_str("[Service]\n");
    s.push_str("Type=simple\n");
    for note in &carried.notes {
        let _ = writeln!(s, "# {note}");
    }
    let mut exec = systemd_quote(&exe.display().to_string());
    for word in std::iter::once("daemon").chain(carried.args.iter().map(String::as_str)) {
        exec.push(' ');
        exec.push_str(&systemd_quote(word));
    }
    let _ = writeln!(s, "ExecStart={exec}");
    for (k, v) in &carried.vars {
        let _ = writeln!(s, "Environment={}", systemd_quote(&format!("{k}={v}")));
    }
    s.push_str("Restart=on-failure\n");
    s.push_str("RestartSec=5\n");
    // Bad configuration (2) and a second daemon (75) are not cured by a restart.
    s.push_str("RestartPreventExitStatus=2 75\n");
    // The daemon ends its supervisors itself (each spools first); a crashed daemon's
    // supervisors keep running and are adopted by the next one.
    s.push_str("KillMode=process\n");
    s.push_str("TimeoutStopSec=10\n");
    let _ = writeln!(s, "LimitNOFILE={OPEN_FILES}\n");
    s.push_str("[Install]\n");
    s.push_str("WantedBy=default.target\n");
    s
}

fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// Text inside an XML comment, read literally (no entities), which may not hold `--` nor end
/// with `-`.
fn xml_comment(s: &str) -> String {
    let mut out = s.replace("--", "- -");
    if out.ends_with('-') {
        out.push(' ');
    }
    out
}

/// One word of a Windows command line as the C runtime splits it: quoted when it holds a
/// blank or a quote (or is empty), a quote escaped with a backslash, and the backslashes just
/// before a quote doubled.
fn windows_quote(word: &str) -> String {
    if !word.is_empty() && !word.contains([' ', '\t', '"']) {
        return word.to_owned();
    }
    let mut out = String::from("\"");
    let mut backslashes = 0;
    for c in word.chars() {
        match c {
            '\\' => backslashes += 1,
            '"' => {
                out.push_str(&"\\".repeat(2 * backslashes + 1));
                out.push('"');
                backslashes = 0;
            }
            c => {
                out.push_str(&"\\".repeat(backslashes));
                out.push(c);
                backslashes = 0;
            }
        }
    }
    out.push_str(&"\\".repeat(2 * backslashes));
    out.push('"');
    out
}

fn launchd(exe: &Path, carried: &Carried) -> String {
    let vars = &carried.vars;
    let mut s = String::new();
    s.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    s.push_str("<!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" \"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n");
    s.push_str("<plist version=\"1.0\">\n<dict>\n");
    for note in &carried.notes {
        let _ = writeln!(s, "  <!-- {} -->", xml_comment(note));
    }
    let _ = writeln!(s, "  <key>Label</key>\n  <string>{LABEL}</string>");
    s.push_str("  <key>ProgramArguments</key>\n  <array>\n");
    let _ = writeln!(
        s,
        "    <string>{}</string>\n    <string>daemon</string>",
        xml_escape(&exe.display().to_string())
    );
    for word in &carried.args {
        let _ = writeln!(s, "    <string>{}</string>", xml_escape(word));
    }
    s.push_str("  </array>\n");
    if !vars.is_empty() {
        s.push_str("  <key>EnvironmentVariables</key>\n  <dict>\n");
        for (k, v) in vars {
            let _ = writeln!(
                s,
                "    <key>{}</key>\n    <string>{}</string>",
                xml_escape(k),
                xml_escape(v)
            );
        }
        s.push_str("  </dict>\n");
    }
    s.push_str("  <key>RunAtLoad</key>\n  <true/>\n");
    // Restarted after any failure (launchd cannot exempt exit 2 or 75), at most every 30 s.
    s.push_str("  <key>KeepAlive</key>\n  <dict>\n    <key>SuccessfulExit</key>\n    <false/>\n  </dict>\n");
    s.push_str("  <key>ThrottleInterval</key>\n  <integer>30</integer>\n");
    // The supervisors are ended by the daemon, not by launchd along with it.
    s.push_str("  <key>AbandonProcessGroup</key>\n  <true/>\n");
    s.push_str("  <key>ProcessType</key>\n  <string>Background</string>\n");
    let _ = writeln!(
        s,
        "  <key>SoftResourceLimits</key>\n  <dict>\n    <key>NumberOfFiles</key>\n    <integer>{OPEN_FILES}</integer>\n  </dict>"
    );
    s.push_str("</dict>\n</plist>\n");
    s
}

/// The Task Scheduler task, declared UTF-8 and written as UTF-8 like every other output of
/// this command (it used to declare UTF-16 over UTF-8 bytes). Task Scheduler's XML reader
/// takes UTF-8 as well as the UTF-16 its own exports use, but an XML parser holds a file to
/// the encoding its declaration names, and bytes in another one are refused as malformed.
/// UTF-8 rather than UTF-16 because UTF-16 on stdout would not survive the shells: Windows
/// PowerShell decodes a program's output as text before `>` or `Out-File` writes it (in its
/// own encoding), so the README's install command writes this text with `-Encoding utf8`.
fn windows(exe: &Path, carried: &Carried) -> String {
    let vars = &carried.vars;
    let mut s = String::new();
    s.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    s.push_str(
        "<Task version=\"1.2\" xmlns=\"http://schemas.microsoft.com/windows/2004/02/mit/task\">\n",
    );
    s.push_str("  <RegistrationInfo>\n");
    let _ = writeln!(
        s,
        "    <Description>kcap-watch daemon: ships every Codex sub-agent the kcap CLI watches</Description>\n    <URI>\\{LABEL}</URI>"
    );
    s.push_str("  </RegistrationInfo>\n");
    for note in &carried.notes {
        let _ = writeln!(s, "  <!-- {} -->", xml_comment(note));
    }
    if !vars.is_empty() {
        // Task Scheduler has no per-task environment: set these for the user (`setx`).
        s.push_str("  <!-- Set for your user before the first logon run (setx NAME VALUE):\n");
        for (k, v) in vars {
            let _ = writeln!(s, "       {}={}", xml_comment(k), xml_comment(v));
        }
        s.push_str("  -->\n");
    }
    s.push_str("  <Triggers>\n    <LogonTrigger>\n      <Enabled>true</Enabled>\n    </LogonTrigger>\n  </Triggers>\n");
    s.push_str("  <Principals>\n    <Principal id=\"Author\">\n      <LogonType>InteractiveToken</LogonType>\n      <RunLevel>LeastPrivilege</RunLevel>\n    </Principal>\n  </Principals>\n");
    s.push_str("  <Settings>\n");
    s.push_str("    <MultipleInstancesPolicy>IgnoreNew</MultipleInstancesPolicy>\n");
    s.push_str("    <DisallowStartIfOnBatteries>false</DisallowStartIfOnBatteries>\n");
    s.push_str("    <StopIfGoingOnBatteries>false</StopIfGoingOnBatteries>\n");
    s.push_str("    <ExecutionTimeLimit>PT0S</ExecutionTimeLimit>\n");
    s.push_str("    <RestartOnFailure>\n      <Interval>PT1M</Interval>\n      <Count>5</Count>\n    </RestartOnFailure>\n");
    s.push_str("    <Hidden>true</Hidden>\n");
    s.push_str("  </Settings>\n");
    s.push_str("  <Actions Context=\"Author\">\n    <Exec>\n");
    let arguments: Vec<String> = std::iter::once("daemon")
        .chain(carried.args.iter().map(String::as_str))
        .map(windows_quote)
        .collect();
    let _ = writeln!(
        s,
        "      <Command>{}</Command>\n      <Arguments>{}</Arguments>",
        xml_escape(&exe.display().to_string()),
        xml_escape(&arguments.join(" "))
    );
    s.push_str("    </Exec>\n  </Actions>\n</Task>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn given(args: &[(&'static str, &str)], env: &[(&str, &str)]) -> Carried {
        use crate::settings::{Command, SettingsArgs};
        let mut words = vec!["daemon".to_owned()];
        for (long, v) in args {
            words.push((*long).to_owned());
            if !v.is_empty() {
                words.push((*v).to_owned());
            }
        }
        #[derive(clap::Parser)]
        struct Argv {
            #[command(flatten)]
            settings: crate::settings::DaemonSettings,
        }
        let argv = <Argv as clap::Parser>::try_parse_from(words).unwrap();
        let pairs: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let env = move |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        let args: &SettingsArgs = &argv.settings;
        let settings = Settings::with_defaults("/home/u/.config/kcap".into());
        carried(
            &crate::settings::given(Command::Daemon, args, &env),
            &settings,
            &env,
        )
        .unwrap()
    }

    #[test]
    fn only_non_secret_settings_are_carried() {
        let c = given(
            &[("--stop-grace", "30s"), ("--force-poll", "")],
            &[
                ("KCAP_URL", "https://kcap.example"),
                ("KCAP_TOKEN", "sekrit"),
                ("KCAP_CLIENT_SECRET", "sekrit"),
                ("KCAP_PROFILE", ""),
                ("HTTPS_PROXY", "http://u:pw@proxy:3128"),
            ],
        );
        assert_eq!(c.args, ["--stop-grace", "30s", "--force-poll"]);
        assert_eq!(
            c.vars,
            [
                ("KCAP_URL".to_string(), "https://kcap.example".to_string()),
                (
                    "HTTPS_PROXY".to_string(),
                    "http://u:[REDACTED]@proxy:3128".to_string()
                )
            ]
        );
        for kind in [
            ServiceKind::Systemd,
            ServiceKind::Launchd,
            ServiceKind::Windows,
        ] {
            let text = render(kind, Path::new("/opt/kcap watch/kcap-watch"), &c);
            assert!(!text.contains("sekrit"), "{text}");
            assert!(text.contains("https://kcap.example"), "{text}");
            assert!(text.contains("/opt/kcap watch/kcap-watch"), "{text}");
            assert!(text.contains("30s"), "{text}");
            assert!(text.contains("KCAP_TOKEN, KCAP_CLIENT_SECRET"), "{text}");
            let store = Path::new("/home/u/.config/kcap")
                .join("tokens")
                .join("<active profile>.json");
            assert!(text.contains(&store.display().to_string()), "{text}");
        }
    }

    #[test]
    fn the_token_file_is_named_where_the_token_comes_from() {
        let mut settings = Settings::with_defaults("/c".into());
        settings.token_file = Some("/run/kcap token".into());
        let c = carried(&[], &settings, &|_| None).unwrap();
        assert_eq!(
            c.notes,
            [
                "The token is read from /run/kcap token (KCAP_TOKEN_FILE); no secret is written here."
            ]
        );
    }

    #[test]
    fn windows_words_survive_the_c_runtime_split() {
        assert_eq!(windows_quote("30s"), "30s");
        assert_eq!(windows_quote("C:\\a b\\"), "\"C:\\a b\\\\\"");
        assert_eq!(windows_quote("say \"hi\""), "\"say \\\"hi\\\"\"");
        assert_eq!(windows_quote(""), "\"\"");
    }

    /// A cargo target directory of any name is a build directory: named by CARGO_TARGET_DIR,
    /// or holding cargo's CACHEDIR.TAG or .rustc_info.json; an installed binary's directory
    /// is not, and neither is a directory merely named `target`.
    #[test]
    fn a_cargo_target_directory_is_recognised_by_what_it_is() {
        let tmp = tempfile::tempdir().unwrap();
        // As the binary's path is taken: canonical, without Windows' `\\?\` prefix.
        let root = crate::platform::plain_path::plain(std::fs::canonicalize(tmp.path()).unwrap());
        let tagged = root.join("target-daemon");
        std::fs::create_dir_all(tagged.join("debug")).unwrap();
        std::fs::write(
            tagged.join("CACHEDIR.TAG"),
            format!(
                "{CACHEDIR_SIGNATURE}\n# This file is a cache directory tag created by cargo.\n"
            ),
        )
        .unwrap();
        assert!(in_build_dir(&tagged.join("debug/kcap-watch"), None));
        let rustc = root.join("builds");
        std::fs::create_dir_all(&rustc).unwrap();
        std::fs::write(rustc.join(".rustc_info.json"), "{}").unwrap();
        assert!(in_build_dir(&rustc.join("debug/kcap-watch"), None));
        // Untagged (cargo has not finished its first build there): only CARGO_TARGET_DIR says.
        let out = root.join("out");
        std::fs::create_dir_all(out.join("release")).unwrap();
        let exe = out.join("release/kcap-watch");
        assert!(!in_build_dir(&exe, None));
        assert!(in_build_dir(&exe, Some(&out)));
        assert!(in_build_dir(&exe, Some(&tmp.path().join("out"))));
        assert!(!in_build_dir(&exe, Some(&tagged)));
        let named = root.join("target");
        std::fs::create_dir_all(named.join("debug")).unwrap();
        assert!(!in_build_dir(&named.join("debug/kcap-watch"), None));
        let bin = root.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        assert!(!in_build_dir(&bin.join("kcap-watch"), None));
        assert!(!in_build_dir(&bin.join("kcap-watch"), Some(Path::new(""))));
    }

    #[test]
    fn the_systemd_unit_never_restarts_after_exit_2_or_75() {
        let unit = render(
            ServiceKind::Systemd,
            Path::new("/usr/local/bin/kcap-watch"),
            &Carried::default(),
        );
        assert!(unit.contains("ExecStart=\"/usr/local/bin/kcap-watch\" \"daemon\"\n"));
        assert!(unit.contains("Restart=on-failure\n"));
        assert!(unit.contains("RestartPreventExitStatus=2 75\n"));
        assert!(unit.contains("KillMode=process\n"));
        assert_eq!(systemd_quote("a%b$c\"d"), "\"a%%b$$c\\\"d\"");
    }
}
