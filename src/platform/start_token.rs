//! The kcap CLI's process start token: the second line of a pid file, naming which
//! *incarnation* of a pid wrote it, so a reaper can tell a live watcher from an unrelated
//! process that was given the same pid later.
//!
//! The kcap CLI compares tokens byte for byte, so each scheme here is computed exactly as it
//! computes it (`ProcessStartToken.cs`):
//!
//! - Linux: `lx:<boot_id>:<starttime>`, `boot_id` from `/proc/sys/kernel/random/boot_id`
//!   (trimmed; `?` when unreadable) and `starttime` field 22 of `/proc/<pid>/stat`, clock
//!   ticks since boot that every reader sees identically.
//! - macOS: `mac:<kern.bootsessionuuid>:<p_uniqueid>`, the kernel's per-boot unique process
//!   counter read with `proc_pidinfo` flavour 17 (`PROC_PIDUNIQIDENTIFIERINFO`), scoped to the
//!   boot session. Any step that fails gives no token, never a weaker scheme.
//! - Windows: `tk:<ticks>`, the process creation time in .NET ticks (100 ns since
//!   0001-01-01 UTC), which is what .NET's `Process.StartTime.ToUniversalTime().Ticks` is.
//! - Anywhere else: no token. The pid file then holds just the pid, the kcap CLI's legacy
//!   layout, which its reaper handles with a weaker check.
//!
//! The comparison is three-valued ([`compare`]): same scheme and same text is the same
//! incarnation, same scheme and different text is conclusively another process (a recycled
//! pid), and anything else (no token now, a legacy bare token, another scheme) cannot be
//! compared, so the caller falls back to plain liveness rather than declare a live process
//! dead.

/// The token of the running process, or `None` where this platform cannot say.
pub fn for_current() -> Option<String> {
    for_pid(std::process::id())
}

/// The token for `pid`, or `None` when the process is gone, its token cannot be read, or this
/// platform has no scheme.
pub fn for_pid(pid: u32) -> Option<String> {
    os::for_pid(pid)
}

/// Whether the process now at `pid` is the incarnation `expected` names: `Some(true)` it is,
/// `Some(false)` it conclusively is not (a recycled pid), `None` when the two cannot be
/// compared (the process is gone, its token is unreadable, or `expected` has another or no
/// scheme). The kcap CLI's `Matches`.
pub fn matches(pid: u32, expected: &str) -> Option<bool> {
    compare(for_pid(pid).as_deref(), expected)
}

/// [`matches`] on a token already read: only two tokens of one scheme are compared.
pub fn compare(actual: Option<&str>, expected: &str) -> Option<bool> {
    let actual = actual?;
    if !same_scheme(actual, expected) {
        return None;
    }
    Some(actual == expected)
}

/// The scheme is the text before the first `:`, and it must not be empty: a bare number (the
/// kcap CLI's legacy token) has no scheme and matches nothing.
fn same_scheme(a: &str, b: &str) -> bool {
    match (a.find(':'), b.find(':')) {
        (Some(ia), Some(ib)) => ia > 0 && a[..ia] == b[..ib],
        _ => false,
    }
}

/// What the kcap CLI writes when the boot id cannot be read: still deterministic for every
/// reader within one boot.
const UNKNOWN_BOOT_ID: &str = "?";

/// `lx:<boot_id>:<starttime>` from the boot id file's text (`None` when unreadable) and the
/// bytes of `/proc/<pid>/stat`.
#[cfg_attr(not(any(target_os = "linux", test)), allow(dead_code))]
pub(crate) fn linux_token(boot_id: Option<&str>, stat: &[u8]) -> Option<String> {
    let start = stat_starttime(stat)?;
    let boot = boot_id.map_or(UNKNOWN_BOOT_ID, str::trim);
    Some(format!("lx:{boot}:{start}"))
}

/// Field 22 (`starttime`) of a `/proc/<pid>/stat` line. Field 2 is the command name in
/// parentheses and may itself contain spaces and `)` (a process can name itself anything), so
/// the fields after it are counted from the *last* `)`: field 3 is the first of them.
pub fn stat_starttime(stat: &[u8]) -> Option<u64> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    // Field 3 is index 0 of `rest`, so field 22 is index 19.
    rest.split_ascii_whitespace().nth(19)?.parse().ok()
}

/// How much of `proc_uniqidentifierinfo` is a stable layout across macOS versions:
/// `p_uuid[16]`, then `p_uniqueid` and `p_puniqueid` (8 bytes each). A shorter answer proves
/// nothing. The kcap CLI reads the same prefix.
#[cfg_attr(not(any(target_os = "macos", test)), allow(dead_code))]
const MAC_UNIQID_PREFIX: usize = 32;

/// Offset of `p_uniqueid` in `proc_uniqidentifierinfo`.
#[cfg_attr(not(any(target_os = "macos", test)), allow(dead_code))]
const MAC_UNIQUEID_AT: usize = 16;

/// `mac:<kern.bootsessionuuid>:<p_uniqueid>` from what the two calls returned: the bytes
/// `proc_pidinfo` wrote and the bytes `sysctlbyname` wrote (a C string with its NUL).
/// `None` for a short answer or a zero id, as the kcap CLI does: a wrong token would be worse
/// than none.
#[cfg_attr(not(any(target_os = "macos", test)), allow(dead_code))]
pub(crate) fn mac_token(uniqid_info: &[u8], boot_session: &[u8]) -> Option<String> {
    if uniqid_info.len() < MAC_UNIQID_PREFIX || boot_session.is_empty() {
        return None;
    }
    let id_bytes = uniqid_info[MAC_UNIQUEID_AT..MAC_UNIQUEID_AT + 8]
        .try_into()
        .ok()?;
    // The kernel writes the struct in native byte order, and the CLI reads it that way.
    let unique_id = u64::from_ne_bytes(id_bytes);
    if unique_id == 0 {
        return None;
    }
    // sysctl's length counts the terminating NUL, which is not part of the UUID.
    let uuid = String::from_utf8_lossy(&boot_session[..boot_session.len() - 1]);
    Some(format!("mac:{uuid}:{unique_id}"))
}

/// .NET ticks (100 ns since 0001-01-01) at the Windows epoch (1601-01-01), which is where a
/// `FILETIME` counts from.
#[cfg_attr(not(any(windows, test)), allow(dead_code))]
const TICKS_AT_FILETIME_EPOCH: u64 = 504_911_232_000_000_000;

/// `tk:<ticks>` from a process creation time as a `FILETIME` (100 ns since 1601-01-01 UTC).
#[cfg_attr(not(any(windows, test)), allow(dead_code))]
pub(crate) fn windows_token(creation_filetime: u64) -> Option<String> {
    let ticks = creation_filetime.checked_add(TICKS_AT_FILETIME_EPOCH)?;
    Some(format!("tk:{ticks}"))
}

#[cfg(target_os = "linux")]
mod os {
    pub(super) fn for_pid(pid: u32) -> Option<String> {
        let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok();
        super::linux_token(boot.as_deref(), &stat)
    }
}

#[cfg(target_os = "macos")]
mod os {
    /// `PROC_PIDUNIQIDENTIFIERINFO`: private in the SDK headers, stable in the kernel; the
    /// kcap CLI and its native shim use it too.
    const PROC_PIDUNIQIDENTIFIERINFO: libc::c_int = 17;
    /// Larger than any known size of the struct: the kernel refuses buffers that are too
    /// small, and has grown the struct's reserved tail before.
    const UNIQID_BUFFER: usize = 256;

    pub(super) fn for_pid(pid: u32) -> Option<String> {
        let raw = libc::pid_t::try_from(pid).ok().filter(|&p| p > 0)?;
        let mut info = [0u8; UNIQID_BUFFER];
        // SAFETY: the buffer is writable for the length given; the kernel writes at most that.
        let written = unsafe {
            libc::proc_pidinfo(
                raw,
                PROC_PIDUNIQIDENTIFIERINFO,
                0,
                info.as_mut_ptr().cast(),
                UNIQID_BUFFER as libc::c_int,
            )
        };
        let written = usize::try_from(written).ok()?.min(UNIQID_BUFFER);

        let mut uuid = [0u8; 64];
        let mut len: libc::size_t = uuid.len();
        let name = c"kern.bootsessionuuid";
        // SAFETY: `name` is NUL-terminated, `uuid` is writable for `len` bytes, no new value.
        let rc = unsafe {
            libc::sysctlbyname(
                name.as_ptr(),
                uuid.as_mut_ptr().cast(),
                &mut len,
                std::ptr::null_mut(),
                0,
            )
        };
        if rc != 0 {
            return None;
        }
        super::mac_token(&info[..written], &uuid[..len.min(uuid.len())])
    }
}

#[cfg(windows)]
mod os {
    use windows_sys::Win32::Foundation::FILETIME;
    use windows_sys::Win32::System::Threading::GetProcessTimes;

    pub(super) fn for_pid(pid: u32) -> Option<String> {
        let process = crate::platform::process_handle::OpenProcess::running(pid)?;
        let zero = FILETIME {
            dwLowDateTime: 0,
            dwHighDateTime: 0,
        };
        let (mut creation, mut exit, mut kernel, mut user) = (zero, zero, zero, zero);
        // SAFETY: the handle is open with PROCESS_QUERY_LIMITED_INFORMATION, which
        // GetProcessTimes needs; the four out-pointers are valid FILETIMEs.
        let ok = unsafe {
            GetProcessTimes(
                process.raw(),
                &mut creation,
                &mut exit,
                &mut kernel,
                &mut user,
            )
        };
        if ok == 0 {
            return None;
        }
        let filetime =
            (u64::from(creation.dwHighDateTime) << 32) | u64::from(creation.dwLowDateTime);
        super::windows_token(filetime)
    }
}

#[cfg(not(any(target_os = "linux", target_os = "macos", windows)))]
mod os {
    pub(super) fn for_pid(_pid: u32) -> Option<String> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &[u8] =
        b"4242 (a) b) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10\n";

    #[test]
    fn starttime_is_counted_from_the_last_paren() {
        // A comm of `a) b` (shown as `(a) b)`) would shift every field if split naively.
        assert_eq!(stat_starttime(STAT), Some(987654));
        let plain = b"7 (sh) R 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 55 0 0\n";
        assert_eq!(stat_starttime(plain), Some(55));
    }

    #[test]
    fn starttime_of_a_truncated_or_garbled_stat_is_none() {
        assert_eq!(stat_starttime(b"12 (x) S 1 2 3"), None);
        assert_eq!(stat_starttime(b"no parens at all"), None);
        let not_a_number = b"1 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 abc 0";
        assert_eq!(stat_starttime(not_a_number), None);
    }

    #[test]
    fn linux_token_is_boot_id_and_starttime() {
        let boot = "6f1c2a3b-0000-4000-8000-0123456789ab\n";
        assert_eq!(
            linux_token(Some(boot), STAT).as_deref(),
            Some("lx:6f1c2a3b-0000-4000-8000-0123456789ab:987654")
        );
    }

    #[test]
    fn linux_token_without_a_readable_boot_id_says_question_mark_as_the_cli_does() {
        assert_eq!(linux_token(None, STAT).as_deref(), Some("lx:?:987654"));
        assert_eq!(linux_token(Some("x"), b"1 (gone"), None);
    }

    /// A `proc_uniqidentifierinfo` answer of `len` bytes whose `p_uniqueid` is `id`.
    fn uniqid(id: u64, len: usize) -> Vec<u8> {
        let mut info = vec![0xAB; len];
        info[16..24].copy_from_slice(&id.to_ne_bytes());
        info
    }

    #[test]
    fn mac_token_is_boot_session_and_unique_id() {
        let boot = b"8C2F0D4E-1A2B-4C3D-9E8F-001122334455\0";
        assert_eq!(
            mac_token(&uniqid(123_456_789, 56), boot).as_deref(),
            Some("mac:8C2F0D4E-1A2B-4C3D-9E8F-001122334455:123456789")
        );
    }

    #[test]
    fn mac_token_from_a_short_answer_or_a_zero_id_is_none_never_a_guess() {
        let boot = b"8C2F0D4E-1A2B-4C3D-9E8F-001122334455\0";
        assert_eq!(mac_token(&uniqid(7, 31), boot), None);
        assert_eq!(mac_token(&uniqid(0, 56), boot), None);
        assert_eq!(mac_token(&uniqid(7, 56), b""), None);
        assert_eq!(
            mac_token(&uniqid(7, 32), b"u\0").as_deref(),
            Some("mac:u:7")
        );
    }

    #[test]
    fn windows_token_is_creation_time_in_dotnet_ticks() {
        // 2024-01-01T00:00:00Z is FILETIME 133_485_408_000_000_000 and .NET ticks
        // 638_396_640_000_000_000 (`new DateTime(2024, 1, 1).Ticks`).
        assert_eq!(
            windows_token(133_485_408_000_000_000).as_deref(),
            Some("tk:638396640000000000")
        );
        assert_eq!(windows_token(u64::MAX), None);
    }

    #[test]
    fn the_same_incarnation_matches() {
        let token = "lx:b00t:987654";
        assert_eq!(compare(Some(token), token), Some(true));
        let mac = "mac:8C2F:42";
        assert_eq!(compare(Some(mac), mac), Some(true));
    }

    #[test]
    fn a_recycled_pid_is_conclusively_another_process() {
        // Same pid, same scheme, a later start: the pid was given to someone else.
        assert_eq!(
            compare(Some("lx:b00t:987999"), "lx:b00t:987654"),
            Some(false)
        );
        assert_eq!(
            compare(Some("lx:b00t2:987654"), "lx:b00t:987654"),
            Some(false)
        );
        assert_eq!(compare(Some("mac:8C2F:43"), "mac:8C2F:42"), Some(false));
        assert_eq!(compare(Some("tk:2"), "tk:1"), Some(false));
    }

    #[test]
    fn tokens_of_another_or_no_scheme_cannot_be_compared() {
        // A pid file written on another scheme (a `tk:` file read where `mac:` is computed),
        // a legacy bare number, or a process whose token cannot be read: undecided, so the
        // caller falls back to plain liveness instead of calling a live process dead.
        assert_eq!(compare(Some("mac:8C2F:42"), "tk:638396640000000000"), None);
        assert_eq!(compare(Some("lx:b00t:1"), "638396640000000000"), None);
        assert_eq!(compare(Some(":x"), ":x"), None);
        assert_eq!(compare(None, "lx:b00t:1"), None);
    }

    #[cfg(any(target_os = "linux", target_os = "macos", windows))]
    #[test]
    fn this_process_has_a_token_of_its_platform_scheme_that_matches_itself() {
        let token = for_current().expect("a token for this process");
        let scheme = if cfg!(target_os = "linux") {
            "lx:"
        } else if cfg!(target_os = "macos") {
            "mac:"
        } else {
            "tk:"
        };
        assert!(token.starts_with(scheme), "{token}");
        assert_eq!(matches(std::process::id(), &token), Some(true));
        // Stable across reads: another reader must compute the same text.
        assert_eq!(for_current().as_deref(), Some(token.as_str()));
    }

    #[cfg(any(target_os = "linux", target_os = "macos", windows))]
    #[test]
    fn a_child_process_has_another_token_than_its_parent_and_none_once_reaped() {
        let mut child = crate::platform::test_child::spawn();
        let pid = child.id();
        let theirs = for_pid(pid).expect("a token for a running child");
        let mine = for_current().unwrap();
        assert_eq!(compare(Some(&theirs), &mine), Some(false));
        assert_eq!(matches(pid, &theirs), Some(true));
        drop(child.stdin.take());
        child.wait().unwrap();
        assert_eq!(for_pid(pid), None);
        assert_eq!(matches(pid, &theirs), None);
    }
}
