//! What another process of this user was started with: its command line and environment.
//!
//! The daemon reads the kcap CLI's session watcher this way (docs/behaviour.md S2.1): the
//! rollout path is on its command line (`watch <id> "<path>" ...`) and the server, config
//! directory and Codex home it runs with are in its environment. Linux reads
//! `/proc/<pid>/cmdline` and `/proc/<pid>/environ` (readable for one's own processes only);
//! macOS asks `sysctl` for `KERN_PROCARGS2` (the same rule); Windows offers neither without
//! reading another process's memory, so the caller falls back to the files on disk.
//!
//! The parsers are plain functions of bytes, compiled everywhere and unit-tested here.

/// A process's arguments (`argv[0]` first) and environment, as far as they could be read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessLaunch {
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

impl ProcessLaunch {
    /// The value of variable `name`, if it was set (empty counts as unset, as for the kcap CLI).
    pub fn var(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }
}

/// Reads `pid`'s command line and environment; `None` where the platform does not allow it
/// or the process is gone (or another user's).
pub fn read(pid: u32) -> Option<ProcessLaunch> {
    os::read(pid)
}

/// Splits NUL-separated strings (`/proc/<pid>/cmdline`, `environ`); the trailing NUL ends
/// the last one, it does not start an empty one.
pub fn split_nul(bytes: &[u8]) -> Vec<String> {
    let body = bytes.strip_suffix(&[0]).unwrap_or(bytes);
    if body.is_empty() {
        return Vec::new();
    }
    body.split(|b| *b == 0)
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

/// `KEY=VALUE` strings into pairs; a string without `=` is skipped.
pub fn env_pairs(strings: Vec<String>) -> Vec<(String, String)> {
    strings
        .into_iter()
        .filter_map(|s| {
            let (k, v) = s.split_once('=')?;
            (!k.is_empty()).then(|| (k.to_owned(), v.to_owned()))
        })
        .collect()
}

/// Parses macOS's `KERN_PROCARGS2` buffer: a native-endian `i32` argc, the executable path,
/// NUL padding, then `argc` NUL-terminated arguments and the environment strings until an
/// empty string or the end.
pub fn parse_procargs2(buf: &[u8]) -> Option<ProcessLaunch> {
    let argc = i32::from_ne_bytes(buf.get(..4)?.try_into().ok()?);
    let argc = usize::try_from(argc).ok()?;
    let mut rest = &buf[4..];
    // The executable path, then any number of NULs.
    let end = rest.iter().position(|b| *b == 0)?;
    rest = &rest[end..];
    let start = rest.iter().position(|b| *b != 0).unwrap_or(rest.len());
    rest = &rest[start..];
    let mut strings = rest.split(|b| *b == 0);
    let mut args = Vec::with_capacity(argc);
    for _ in 0..argc {
        args.push(String::from_utf8_lossy(strings.next()?).into_owned());
    }
    let env = strings
        .take_while(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();
    Some(ProcessLaunch {
        args,
        env: env_pairs(env),
    })
}

#[cfg(target_os = "linux")]
mod os {
    use super::{ProcessLaunch, env_pairs, split_nul};

    pub(super) fn read(pid: u32) -> Option<ProcessLaunch> {
        let args = split_nul(&std::fs::read(format!("/proc/{pid}/cmdline")).ok()?);
        if args.is_empty() {
            // A zombie or a kernel thread: nothing to learn.
            return None;
        }
        let env = std::fs::read(format!("/proc/{pid}/environ"))
            .map(|b| env_pairs(split_nul(&b)))
            .unwrap_or_default();
        Some(ProcessLaunch { args, env })
    }
}

#[cfg(target_os = "macos")]
mod os {
    use super::{ProcessLaunch, parse_procargs2};

    pub(super) fn read(pid: u32) -> Option<ProcessLaunch> {
        let mut argmax: libc::c_int = 0;
        let mut argmax_len = std::mem::size_of::<libc::c_int>();
        let mut mib_max = [libc::CTL_KERN, libc::KERN_ARGMAX];
        // SAFETY: the mib names a c_int and `argmax`/`argmax_len` describe one.
        let rc = unsafe {
            libc::sysctl(
                mib_max.as_mut_ptr(),
                2,
                (&mut argmax as *mut libc::c_int).cast(),
                &mut argmax_len,
                std::ptr::null_mut(),
                0,
            )
        };
        if rc != 0 || argmax <= 0 {
            return None;
        }
        let mut buf = vec![0u8; argmax as usize];
        let mut size: libc::size_t = buf.len();
        let mut mib = [libc::CTL_KERN, libc::KERN_PROCARGS2, pid as libc::c_int];
        // SAFETY: `buf` has `size` writable bytes; the kernel writes at most that many.
        let rc = unsafe {
            libc::sysctl(
                mib.as_mut_ptr(),
                3,
                buf.as_mut_ptr().cast(),
                &mut size,
                std::ptr::null_mut(),
                0,
            )
        };
        if rc != 0 {
            return None;
        }
        buf.truncate(size);
        parse_procargs2(&buf)
    }
}

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
mod os {
    use super::ProcessLaunch;

    pub(super) fn read(_pid: u32) -> Option<ProcessLaunch> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_separated_strings_split_without_an_empty_last_one() {
        assert_eq!(
            split_nul(b"kcap\0watch\0abc\0/tmp/a b.jsonl\0"),
            ["kcap", "watch", "abc", "/tmp/a b.jsonl"]
        );
        assert!(split_nul(b"").is_empty());
        assert_eq!(
            env_pairs(split_nul(b"A=1\0NOEQ\0B=x=y\0")),
            [("A".into(), "1".into()), ("B".into(), "x=y".into())]
        );
    }

    #[test]
    fn procargs2_gives_arguments_then_environment() {
        let mut buf = 3i32.to_ne_bytes().to_vec();
        buf.extend_from_slice(b"/usr/local/bin/kcap\0\0\0\0kcap\0watch\0abc\0KCAP_URL=http://x\0CODEX_HOME=/h\0\0junk");
        let p = parse_procargs2(&buf).unwrap();
        assert_eq!(p.args, ["kcap", "watch", "abc"]);
        assert_eq!(p.var("KCAP_URL"), Some("http://x"));
        assert_eq!(p.var("CODEX_HOME"), Some("/h"));
        assert_eq!(p.var("MISSING"), None);
        // Truncated before all arguments: not a launch.
        assert_eq!(parse_procargs2(&3i32.to_ne_bytes()), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_reads_its_own_launch() {
        let me = read(std::process::id()).unwrap();
        assert!(!me.args.is_empty());
        assert!(me.env.iter().any(|(k, _)| k == "PATH") || std::env::var_os("PATH").is_none());
    }
}
