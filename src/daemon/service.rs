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

/// The variables a service may carry: none of them is a secret. `KCAP_TOKEN`,
/// `KCAP_TOKEN_FILE`'s contents, `KCAP_CLIENT_SECRET` and the like are never written; the
/// daemon finds its login in the kcap CLI's token store as the kcap CLI does.
pub(crate) const SERVICE_VARIABLES: &[&str] = &[
    "KCAP_URL",
    "KCAP_CONFIG_DIR",
    "KCAP_WATCHER_DIR",
    "CODEX_HOME",
    "KCAP_PROFILE",
    "KCAP_LOG",
    "KCAP_LOG_FORMAT",
    "KCAP_WATCH_EXCLUDE",
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

/// The definition for `kind`, running `exe daemon` with `vars` (name, value) set.
pub fn render(kind: ServiceKind, exe: &Path, vars: &[(String, String)]) -> String {
    match kind {
        ServiceKind::Systemd => systemd(exe, vars),
        ServiceKind::Launchd => launchd(exe, vars),
        ServiceKind::Windows => windows(exe, vars),
    }
}

/// The service variables set in `env`, in [`SERVICE_VARIABLES`] order, non-empty only. A URL
/// among them (`KCAP_URL`, a proxy) is written as every URL is shown: its userinfo password
/// and secret-named query values as `[REDACTED]` (a service file is read by more than its
/// owner's eyes: backups, dotfile repositories).
pub fn variables(env: &dyn Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    SERVICE_VARIABLES
        .iter()
        .filter_map(|name| {
            let v = env(name)?;
            let shown = if name.eq_ignore_ascii_case("KCAP_URL")
                || name.to_ascii_uppercase().ends_with("_PROXY")
            {
                crate::url_display::redacted(&v)
            } else {
                v
            };
            (!shown.is_empty()).then(|| ((*name).to_owned(), shown))
        })
        .collect()
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

fn systemd(exe: &Path, vars: &[(String, String)]) -> String {
    let mut s = String::new();
    s.push_str("[Unit]\n");
    s.push_str("Description=kcap-watch daemon: ships every Codex sub-agent the kcap CLI watches\n");
    s.push_str("After=network-online.target\n\n");
    s.push_str("[Service]\n");
    s.push_str("Type=simple\n");
    let _ = writeln!(
        s,
        "ExecStart={} daemon",
        systemd_quote(&exe.display().to_string())
    );
    for (k, v) in vars {
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

fn launchd(exe: &Path, vars: &[(String, String)]) -> String {
    let mut s = String::new();
    s.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    s.push_str("<!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" \"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n");
    s.push_str("<plist version=\"1.0\">\n<dict>\n");
    let _ = writeln!(s, "  <key>Label</key>\n  <string>{LABEL}</string>");
    s.push_str("  <key>ProgramArguments</key>\n  <array>\n");
    let _ = writeln!(
        s,
        "    <string>{}</string>\n    <string>daemon</string>",
        xml_escape(&exe.display().to_string())
    );
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
fn windows(exe: &Path, vars: &[(String, String)]) -> String {
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
    if !vars.is_empty() {
        // Task Scheduler has no per-task environment: set these for the user (`setx`).
        s.push_str("  <!-- Set for your user before the first logon run (setx NAME VALUE):\n");
        for (k, v) in vars {
            let _ = writeln!(
                s,
                "       {}={}",
                xml_escape(k),
                xml_escape(v).replace("--", "- -")
            );
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
    let _ = writeln!(
        s,
        "      <Command>{}</Command>\n      <Arguments>daemon</Arguments>",
        xml_escape(&exe.display().to_string())
    );
    s.push_str("    </Exec>\n  </Actions>\n</Task>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_non_secret_variables_are_carried() {
        let env = |name: &str| match name {
            "KCAP_URL" => Some("https://kcap.example".to_string()),
            "KCAP_TOKEN" | "KCAP_CLIENT_SECRET" => Some("sekrit".to_string()),
            "KCAP_PROFILE" => Some(String::new()),
            _ => None,
        };
        let vars = variables(&env);
        assert_eq!(
            vars,
            [("KCAP_URL".to_string(), "https://kcap.example".to_string())]
        );
        for kind in [
            ServiceKind::Systemd,
            ServiceKind::Launchd,
            ServiceKind::Windows,
        ] {
            let text = render(kind, Path::new("/opt/kcap watch/kcap-watch"), &vars);
            assert!(!text.contains("sekrit"), "{text}");
            assert!(text.contains("https://kcap.example"), "{text}");
            assert!(text.contains("/opt/kcap watch/kcap-watch"), "{text}");
        }
    }

    #[test]
    fn the_systemd_unit_never_restarts_after_exit_2_or_75() {
        let unit = render(
            ServiceKind::Systemd,
            Path::new("/usr/local/bin/kcap-watch"),
            &[],
        );
        assert!(unit.contains("ExecStart=\"/usr/local/bin/kcap-watch\" daemon\n"));
        assert!(unit.contains("Restart=on-failure\n"));
        assert!(unit.contains("RestartPreventExitStatus=2 75\n"));
        assert!(unit.contains("KillMode=process\n"));
        assert_eq!(systemd_quote("a%b$c\"d"), "\"a%%b$$c\\\"d\"");
    }
}
