//! A canonical path in the form people and other programs write it.
//!
//! On Windows `std::fs::canonicalize` returns the verbatim form (`\\?\C:\...`,
//! `\\?\UNC\server\share\...`), which turns off the path rules every other program expects and
//! which `daemon --print-service` would otherwise write into the Task Scheduler task as the
//! command to run. A drive or UNC path needs no verbatim prefix (it holds no `.` or `..`
//! after canonicalizing), so it is given back without one; any other verbatim path (a
//! volume GUID, a device) is kept as it is. Unix paths have no such form.

use std::path::PathBuf;

/// `path` without a verbatim prefix, where it can do without one (see the module docs).
pub fn plain(path: PathBuf) -> PathBuf {
    if cfg!(windows) {
        match path.to_str().and_then(without_verbatim_prefix) {
            Some(plain) => PathBuf::from(plain),
            None => path,
        }
    } else {
        path
    }
}

/// The Windows rule as text, compiled everywhere so that it is tested everywhere: `\\?\C:\x`
/// is `C:\x`, `\\?\UNC\server\share\x` is `\\server\share\x`; anything else is `None`.
pub fn without_verbatim_prefix(path: &str) -> Option<String> {
    let rest = path.strip_prefix(r"\\?\")?;
    if let Some(unc) = rest.strip_prefix(r"UNC\") {
        return Some(format!(r"\\{unc}"));
    }
    let bytes = rest.as_bytes();
    let drive =
        bytes.len() >= 3 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':' && bytes[2] == b'\\';
    drive.then(|| rest.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drive_and_unc_paths_lose_the_verbatim_prefix_and_others_keep_it() {
        assert_eq!(
            without_verbatim_prefix(r"\\?\C:\Program Files\kcap\kcap-watch.exe").as_deref(),
            Some(r"C:\Program Files\kcap\kcap-watch.exe")
        );
        assert_eq!(
            without_verbatim_prefix(r"\\?\UNC\files\tools\kcap-watch.exe").as_deref(),
            Some(r"\\files\tools\kcap-watch.exe")
        );
        // A volume GUID path has no shorter form; a plain path has no prefix to drop.
        assert_eq!(
            without_verbatim_prefix(r"\\?\Volume{0b1c}\kcap-watch.exe"),
            None
        );
        assert_eq!(without_verbatim_prefix(r"C:\kcap-watch.exe"), None);
        assert_eq!(without_verbatim_prefix("/usr/local/bin/kcap-watch"), None);
    }

    /// What `daemon --print-service` names: this binary, canonicalized, in its plain form.
    #[test]
    fn a_canonical_path_of_this_binary_is_plain() {
        let exe = plain(std::fs::canonicalize(std::env::current_exe().unwrap()).unwrap());
        let text = exe.to_str().unwrap();
        assert!(!text.starts_with(r"\\?\"), "{text}");
        assert!(exe.is_absolute(), "{text}");
    }
}
