//! Where `<config>` is: `KCAP_CONFIG_DIR` when set, else `<home>/.config/kcap` on every
//! platform, with `<home>` found exactly as the kcap CLI finds it (`PathHelpers.cs`), so the
//! watcher and its spawner agree on every file they share.
//!
//! The kcap CLI takes `HOME` first on every platform, also on Windows, where most programs
//! ignore it (Git for Windows and MSYS shells set it). It uses `HOME` when it is not blank
//! and is a rooted path, and otherwise asks .NET for the user profile directory. On unix that
//! fallback reads `HOME` again and uses it whenever it is non-empty, so there any non-empty
//! `HOME` wins; only on Windows does a blank or relative `HOME` fall through to the profile
//! directory (`FOLDERID_Profile`, what the `directories` crate returns).

use std::path::{Path, PathBuf};

/// The operating system whose rule applies. A value rather than a `cfg`, so every rule is
/// tested on whatever machine runs the tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HomeRule {
    Unix,
    Windows,
}

impl HomeRule {
    /// The rule of the platform this binary was built for.
    pub fn current() -> HomeRule {
        if cfg!(windows) {
            HomeRule::Windows
        } else {
            HomeRule::Unix
        }
    }
}

/// The home directory from the value of `HOME` (`None` when unset) and the system's user
/// profile directory, asked for only when `HOME` does not decide.
pub fn home(
    rule: HomeRule,
    home_var: Option<&str>,
    user_profile: impl FnOnce() -> Option<PathBuf>,
) -> Option<PathBuf> {
    let decides = match rule {
        HomeRule::Unix => home_var.is_some_and(|h| !h.is_empty()),
        HomeRule::Windows => {
            home_var.is_some_and(|h| !h.trim().is_empty() && is_rooted(h, HomeRule::Windows))
        }
    };
    match home_var {
        Some(h) if decides => Some(PathBuf::from(h)),
        _ => user_profile(),
    }
}

/// `<home>/.config/kcap`.
pub fn default_root(home: &Path) -> PathBuf {
    home.join(".config").join("kcap")
}

/// .NET's `Path.IsPathRooted`: on Windows a leading `\` or `/`, or a drive letter and `:`
/// (even `C:relative`, which .NET counts as rooted); on unix a leading `/`.
pub fn is_rooted(path: &str, rule: HomeRule) -> bool {
    let bytes = path.as_bytes();
    match rule {
        HomeRule::Unix => bytes.first() == Some(&b'/'),
        HomeRule::Windows => {
            matches!(bytes.first(), Some(b'\\' | b'/'))
                || (bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':')
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile() -> Option<PathBuf> {
        Some(PathBuf::from("PROFILE"))
    }

    fn never() -> Option<PathBuf> {
        panic!("HOME decides; the profile directory must not be asked for")
    }

    #[test]
    fn unix_takes_any_non_empty_home() {
        let unix = HomeRule::Unix;
        assert_eq!(
            home(unix, Some("/home/ada"), never),
            Some("/home/ada".into())
        );
        // .NET's fallback reads HOME again, so even a relative or blank one wins.
        assert_eq!(home(unix, Some("rel"), never), Some("rel".into()));
        assert_eq!(home(unix, Some(" "), never), Some(" ".into()));
        assert_eq!(home(unix, Some(""), profile), profile());
        assert_eq!(home(unix, None, profile), profile());
    }

    #[test]
    fn windows_takes_home_first_when_it_is_rooted_and_not_blank() {
        let win = HomeRule::Windows;
        assert_eq!(
            home(win, Some(r"C:\Users\ada"), never),
            Some(r"C:\Users\ada".into())
        );
        assert_eq!(
            home(win, Some("/c/Users/ada"), never),
            Some("/c/Users/ada".into())
        );
        assert_eq!(
            home(win, Some(r"\\server\home"), never),
            Some(r"\\server\home".into())
        );
        assert_eq!(home(win, Some("D:home"), never), Some("D:home".into()));
    }

    #[test]
    fn windows_falls_back_to_the_profile_for_a_blank_or_relative_home() {
        let win = HomeRule::Windows;
        for bad in [
            None,
            Some(""),
            Some("  \t"),
            Some("home"),
            Some("~/x"),
            Some("1:x"),
        ] {
            assert_eq!(home(win, bad, profile), profile(), "{bad:?}");
        }
    }

    #[test]
    fn the_root_is_dot_config_kcap_under_home() {
        assert_eq!(
            default_root(Path::new("/home/ada")),
            Path::new("/home/ada/.config/kcap")
        );
    }

    #[test]
    fn rooted_follows_dotnet_on_each_platform() {
        assert!(is_rooted("/x", HomeRule::Unix));
        assert!(!is_rooted(r"C:\x", HomeRule::Unix));
        assert!(!is_rooted("", HomeRule::Unix));
        assert!(is_rooted(r"C:\x", HomeRule::Windows));
        assert!(is_rooted("c:", HomeRule::Windows));
        assert!(!is_rooted("", HomeRule::Windows));
        assert!(!is_rooted("é:", HomeRule::Windows));
    }
}
