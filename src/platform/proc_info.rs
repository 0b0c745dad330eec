//! What another process of this user was started with: its command line and environment.
//!
//! The daemon reads the kcap CLI's session watcher this way (docs/behaviour.md S2.1): the
//! rollout path is on its command line (`watch <id> "<path>" ...`) and the server, config
//! directory and Codex home it runs with are in its environment. Linux reads
//! `/proc/<pid>/cmdline` and `/proc/<pid>/environ` (readable for one's own processes only);
//! macOS asks `sysctl` for `KERN_PROCARGS2` (the same rule). Windows keeps both in the
//! process's own memory, in the parameter block its process environment block (PEB) points
//! to: they are read from there with `ReadProcessMemory`, which Windows allows on one's own
//! processes (the kcap CLI starts its session watcher as the same user, with `KCAP_URL` and
//! `KCAP_CONFIG_DIR` set in its environment). A Windows command line is one string: it is
//! split into arguments by the rules the watcher's own runtime applies to it
//! ([`split_command_line`]).
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

/// Splits a Windows command line into arguments as the C runtime (and .NET, which follows
/// it) does for the program it starts: the program name runs to the next space or tab, or,
/// when it starts with `"`, to the next `"` (no escapes in it). Then arguments are separated by
/// spaces and tabs outside quotes; `"` opens or closes a quoted part; `2n` backslashes before
/// a `"` are `n` backslashes and the quote is a delimiter, `2n + 1` are `n` and a literal `"`;
/// backslashes before anything else are themselves; inside quotes `""` is a literal `"`.
pub fn split_command_line(line: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut chars = line.chars().peekable();
    // The program name.
    let mut program = String::new();
    if chars.peek() == Some(&'"') {
        chars.next();
        for c in chars.by_ref() {
            if c == '"' {
                break;
            }
            program.push(c);
        }
    }
    while let Some(&c) = chars.peek() {
        if c == ' ' || c == '\t' {
            break;
        }
        program.push(c);
        chars.next();
    }
    if program.is_empty() && line.is_empty() {
        return args;
    }
    args.push(program);
    loop {
        while chars.peek().is_some_and(|c| *c == ' ' || *c == '\t') {
            chars.next();
        }
        if chars.peek().is_none() {
            return args;
        }
        let mut arg = String::new();
        let mut quoted = false;
        while let Some(&c) = chars.peek() {
            match c {
                ' ' | '\t' if !quoted => break,
                '\\' => {
                    let mut backslashes = 0;
                    while chars.peek() == Some(&'\\') {
                        chars.next();
                        backslashes += 1;
                    }
                    if chars.peek() == Some(&'"') {
                        arg.extend(std::iter::repeat_n('\\', backslashes / 2));
                        if backslashes % 2 == 1 {
                            arg.push('"');
                            chars.next();
                        }
                    } else {
                        arg.extend(std::iter::repeat_n('\\', backslashes));
                    }
                }
                '"' => {
                    chars.next();
                    if quoted && chars.peek() == Some(&'"') {
                        arg.push('"');
                        chars.next();
                    } else {
                        quoted = !quoted;
                    }
                }
                _ => {
                    arg.push(c);
                    chars.next();
                }
            }
        }
        args.push(arg);
    }
}

/// A Windows environment block (UTF-16 `KEY=VALUE` strings, each ended by a NUL, the block
/// by an empty one) into pairs; what follows the block's end is ignored, and a block cut
/// short yields what is complete. `None` when no block end is in `units`.
pub fn parse_environment_block(units: &[u16]) -> Option<Vec<(String, String)>> {
    let end = environment_block_end(units)?;
    let strings = units[..end]
        .split(|u| *u == 0)
        .filter(|s| !s.is_empty())
        .map(String::from_utf16_lossy)
        .collect();
    Some(env_pairs(strings))
}

/// Where the block in `units` ends: the index of the empty string's NUL (two NULs in a row,
/// or a NUL at the very start: an empty block).
fn environment_block_end(units: &[u16]) -> Option<usize> {
    if units.first() == Some(&0) {
        return Some(0);
    }
    units.windows(2).position(|w| w == [0, 0]).map(|i| i + 1)
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

#[cfg(windows)]
mod os {
    use std::ffi::c_void;
    use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle, RawHandle};

    use windows_sys::Wdk::System::Threading::{NtQueryInformationProcess, ProcessBasicInformation};
    use windows_sys::Win32::Foundation::HANDLE;
    use windows_sys::Win32::System::Diagnostics::Debug::ReadProcessMemory;
    use windows_sys::Win32::System::Threading::{
        OpenProcess, PROCESS_QUERY_LIMITED_INFORMATION, PROCESS_VM_READ,
    };

    use super::{ProcessLaunch, parse_environment_block, split_command_line};

    /// `PROCESS_BASIC_INFORMATION`: only the PEB's address is used.
    #[repr(C)]
    #[allow(dead_code)] // the fields not read give the layout
    struct BasicInformation {
        exit_status: i32,
        peb: usize,
        affinity_mask: usize,
        base_priority: i32,
        unique_process_id: usize,
        inherited_from_unique_process_id: usize,
    }

    /// The start of a 64-bit PEB, up to `ProcessParameters` (offset 0x20).
    #[repr(C)]
    #[allow(dead_code)] // the fields not read give the layout
    struct PebHead {
        flags: [u8; 4],
        padding: [u8; 4],
        mutant: usize,
        image_base_address: usize,
        loader_data: usize,
        process_parameters: usize,
    }

    /// `UNICODE_STRING`: a length in bytes and where its UTF-16 text is.
    #[repr(C)]
    #[derive(Clone, Copy)]
    #[allow(dead_code)] // the fields not read give the layout
    struct UnicodeString {
        length: u16,
        maximum_length: u16,
        buffer: usize,
    }

    /// The start of a 64-bit `RTL_USER_PROCESS_PARAMETERS`, up to `Environment` (offset
    /// 0x80); the layout every Windows since XP x64 (and Wine) has.
    #[repr(C)]
    #[allow(dead_code)] // the fields not read give the layout
    struct ParametersHead {
        maximum_length: u32,
        length: u32,
        flags: u32,
        debug_flags: u32,
        console_handle: usize,
        console_flags: u32,
        standard_input: usize,
        standard_output: usize,
        standard_error: usize,
        current_directory: UnicodeString,
        current_directory_handle: usize,
        dll_path: UnicodeString,
        image_path_name: UnicodeString,
        command_line: UnicodeString,
        environment: usize,
    }

    // The offsets the structures above stand for (64-bit targets only: the crate is built
    // for x86_64 and aarch64 Windows).
    const _: () = assert!(std::mem::offset_of!(PebHead, process_parameters) == 0x20);
    const _: () = assert!(std::mem::offset_of!(ParametersHead, command_line) == 0x70);
    const _: () = assert!(std::mem::offset_of!(ParametersHead, environment) == 0x80);

    /// At most this much environment is read (Windows caps a block at 32,767 characters
    /// per variable, and no session watcher's environment comes near this).
    const ENVIRONMENT_CAP: usize = 1 << 20;
    const PAGE: usize = 4096;

    pub(super) fn read(pid: u32) -> Option<ProcessLaunch> {
        if pid == 0 {
            return None;
        }
        // SAFETY: plain FFI call; a null result is an error.
        let raw =
            unsafe { OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION | PROCESS_VM_READ, 0, pid) };
        if raw.is_null() {
            return None;
        }
        // SAFETY: a fresh, valid handle that nothing else owns.
        let process = unsafe { OwnedHandle::from_raw_handle(raw as RawHandle) };
        let handle = process.as_raw_handle() as HANDLE;
        let basic: BasicInformation = query_basic(handle)?;
        let peb: PebHead = read_struct(handle, basic.peb)?;
        let params: ParametersHead = read_struct(handle, peb.process_parameters)?;
        let line = read_utf16(handle, params.command_line)?;
        let args = split_command_line(&line);
        if args.is_empty() {
            return None;
        }
        let env = read_environment(handle, params.environment).unwrap_or_default();
        Some(ProcessLaunch { args, env })
    }

    fn query_basic(handle: HANDLE) -> Option<BasicInformation> {
        let mut info = std::mem::MaybeUninit::<BasicInformation>::zeroed();
        let mut len = 0u32;
        // SAFETY: `info` has room for the structure this class writes, and its size is given.
        let status = unsafe {
            NtQueryInformationProcess(
                handle,
                ProcessBasicInformation,
                info.as_mut_ptr().cast(),
                std::mem::size_of::<BasicInformation>() as u32,
                &mut len,
            )
        };
        // SAFETY: zero-initialised, and filled in by the call when it succeeds; every bit
        // pattern is a valid value of this plain-integer structure.
        (status >= 0).then(|| unsafe { info.assume_init() })
    }

    /// Reads `buf.len()` bytes at `address` of the process; false if any of them cannot be.
    fn read_into(handle: HANDLE, address: usize, buf: &mut [u8]) -> bool {
        if address == 0 {
            return false;
        }
        let mut done = 0usize;
        // SAFETY: `buf` is writable for its length; the call reads the other process only.
        let ok = unsafe {
            ReadProcessMemory(
                handle,
                address as *const c_void,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut done,
            )
        };
        ok != 0 && done == buf.len()
    }

    /// A structure of plain integers read from `address` of the process.
    fn read_struct<T>(handle: HANDLE, address: usize) -> Option<T> {
        let mut value = std::mem::MaybeUninit::<T>::zeroed();
        // SAFETY: the slice covers exactly the zero-initialised `value`.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(
                value.as_mut_ptr().cast::<u8>(),
                std::mem::size_of::<T>(),
            )
        };
        // SAFETY: only used with structures of plain integers, for which any bytes are valid.
        read_into(handle, address, bytes).then(|| unsafe { value.assume_init() })
    }

    fn read_utf16(handle: HANDLE, s: UnicodeString) -> Option<String> {
        let mut bytes = vec![0u8; usize::from(s.length & !1)];
        if !bytes.is_empty() && !read_into(handle, s.buffer, &mut bytes) {
            return None;
        }
        Some(String::from_utf16_lossy(&to_units(&bytes)))
    }

    /// The environment block at `address`, read a page at a time until its end (its size is
    /// not recorded where every Windows version keeps it), at most [`ENVIRONMENT_CAP`].
    fn read_environment(handle: HANDLE, address: usize) -> Option<Vec<(String, String)>> {
        let mut bytes = Vec::new();
        let mut at = address;
        while bytes.len() < ENVIRONMENT_CAP {
            // Up to the next page boundary: a read never spans into a page that may not exist.
            let len = PAGE - at % PAGE;
            let mut chunk = vec![0u8; len];
            if !read_into(handle, at, &mut chunk) {
                break;
            }
            bytes.extend_from_slice(&chunk);
            at += len;
            let units = to_units(&bytes[..bytes.len() & !1]);
            if let Some(env) = parse_environment_block(&units) {
                return Some(env);
            }
        }
        None
    }

    fn to_units(bytes: &[u8]) -> Vec<u16> {
        bytes
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect()
    }
}

#[cfg(not(any(target_os = "linux", target_os = "macos", windows)))]
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

    #[test]
    fn a_windows_command_line_splits_as_the_c_runtime_splits_it() {
        let split = |line: &str| split_command_line(line);
        // As the kcap CLI starts its session watcher: the program, then `watch <id> "<path>"`.
        assert_eq!(
            split(
                r#""C:\Program Files\kcap\kcap.exe" watch 019f "C:\Users\a b\.codex\sessions\rollout-x.jsonl" --cwd "C:\src\" --vendor "codex""#
            ),
            [
                r"C:\Program Files\kcap\kcap.exe",
                "watch",
                "019f",
                r"C:\Users\a b\.codex\sessions\rollout-x.jsonl",
                "--cwd",
                // `\"` is a literal quote: the quoted part goes on to the end.
                r#"C:\src" --vendor codex"#,
            ]
        );
        // The program name takes no escapes; an unquoted one ends at a space or tab.
        assert_eq!(split("C:\\kcap\\kcap.exe\ta"), [r"C:\kcap\kcap.exe", "a"]);
        assert_eq!(split(r#""C:\a b\kcap.exe" x"#), [r"C:\a b\kcap.exe", "x"]);
        // Microsoft's examples for the arguments after it.
        assert_eq!(split(r#"p "abc" d e"#), ["p", "abc", "d", "e"]);
        assert_eq!(split(r#"p a\\b d"e f"g h"#), ["p", r"a\\b", "de fg", "h"]);
        assert_eq!(split(r#"p a\\\"b c d"#), ["p", r#"a\"b"#, "c", "d"]);
        assert_eq!(split(r#"p a\\\\"b c" d e"#), ["p", r"a\\b c", "d", "e"]);
        assert_eq!(split(r#"p a"b"" c d"#), ["p", r#"ab" c d"#]);
        // An empty quoted argument is an argument; trailing blanks are not.
        assert_eq!(split(r#"p "" x  "#), ["p", "", "x"]);
        assert!(split("").is_empty());
    }

    #[test]
    fn a_windows_environment_block_ends_at_its_empty_string() {
        let block = |text: &str| text.encode_utf16().collect::<Vec<u16>>();
        let env = parse_environment_block(&block(
            "=C:=C:\\src\0KCAP_URL=https://kcap.example/?a=b\0CODEX_HOME=C:\\h\0\0junk=1\0",
        ))
        .unwrap();
        // A drive's current directory (`=C:`) is no variable.
        assert_eq!(
            env,
            [
                ("KCAP_URL".into(), "https://kcap.example/?a=b".into()),
                ("CODEX_HOME".into(), "C:\\h".into())
            ]
        );
        assert_eq!(parse_environment_block(&block("\0\0")), Some(Vec::new()));
        // Cut short before its end: not a block yet (the reader reads on).
        assert_eq!(parse_environment_block(&block("A=1\0B=")), None);
    }

    /// Another process of this user, started with a path argument holding a space and a
    /// quote and with `KCAP_URL` set, is read back as it was started: what the daemon learns
    /// of the kcap CLI's session watcher.
    #[cfg(any(target_os = "linux", target_os = "macos", windows))]
    #[test]
    fn another_process_of_this_user_is_read_as_it_was_started() {
        let path = std::env::temp_dir()
            .join("a dir")
            .join("rollout \"x\".jsonl");
        let mut cmd = crate::platform::test_child::command();
        cmd.arg("watch")
            .arg(&path)
            .env("KCAP_URL", "https://kcap.example/?t=1");
        let mut child = cmd.spawn().unwrap();
        // Linux lets the starter run on before the new program's arguments are in place (a
        // read then finds none), and Wine fills in the environment block after the command
        // line: looked at until both are, as the daemon's next poll would.
        let begin = std::time::Instant::now();
        let launch = loop {
            let launch = read(child.id())
                .filter(|l| l.args.iter().any(|a| a == "watch") && l.var("KCAP_URL").is_some());
            if launch.is_some() || begin.elapsed() > std::time::Duration::from_secs(10) {
                break launch;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        drop(child.stdin.take());
        child.wait().unwrap();
        let launch = launch.expect("the child's launch");
        let at = launch.args.iter().position(|a| a == "watch").unwrap();
        assert_eq!(launch.args[at + 1], path.to_string_lossy(), "{launch:?}");
        assert_eq!(launch.var("KCAP_URL"), Some("https://kcap.example/?t=1"));
        // A process that has ended (and was waited for) is read as nothing.
        assert_eq!(
            read(child.id()).filter(|l| l.args.contains(&"watch".into())),
            None
        );
    }
}
