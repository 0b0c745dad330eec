//! Putting a file in place by rename when another process may be reading it.
//!
//! On unix a rename over a file that is open elsewhere just works: the reader keeps the old
//! inode. On Windows it fails while any reader has the file open without delete sharing, and
//! .NET's `File.ReadAllText` (how the kcap CLI reads heartbeats, pid files and spools) opens
//! with read sharing only, so a beat or a spool claim can hit a sharing violation for the
//! moment such a read lasts. Those failures are retried with short, growing waits, at most
//! [`RETRY_BUDGET`] in all; any other error, or one that outlasts the budget, is returned.

use std::io;
use std::path::Path;
use std::time::Duration;

use tempfile::NamedTempFile;

/// Waits between attempts. They add up to [`RETRY_BUDGET`]: well under the heartbeat's 2 s
/// period, far longer than a reader needs to read a small file.
const RETRY_WAITS: [Duration; 8] = [
    Duration::from_millis(5),
    Duration::from_millis(10),
    Duration::from_millis(20),
    Duration::from_millis(40),
    Duration::from_millis(80),
    Duration::from_millis(160),
    Duration::from_millis(250),
    Duration::from_millis(435),
];

/// The longest a replacement waits for readers to let go.
pub const RETRY_BUDGET: Duration = Duration::from_secs(1);

/// `ERROR_ACCESS_DENIED`, `ERROR_SHARING_VIOLATION`, `ERROR_LOCK_VIOLATION`: what a rename
/// over (or of) a file another process holds open fails with on Windows.
const WINDOWS_SHARING_ERRORS: [i32; 3] = [5, 32, 33];

/// Whether `e` is a Windows sharing failure that a reader letting go will end.
fn held_by_reader(e: &io::Error) -> bool {
    cfg!(windows)
        && e.raw_os_error()
            .is_some_and(|code| WINDOWS_SHARING_ERRORS.contains(&code))
}

/// Renames the temporary file over `dest`, retrying while a reader holds `dest` open.
pub fn persist(tmp: NamedTempFile, dest: &Path) -> io::Result<()> {
    let mut tmp = tmp;
    let mut waits = RETRY_WAITS.iter();
    loop {
        match tmp.persist(dest) {
            Ok(_) => return Ok(()),
            Err(e) => match waits.next() {
                Some(&wait) if held_by_reader(&e.error) => {
                    std::thread::sleep(wait);
                    tmp = e.file;
                }
                // Dropping `e.file` removes the temporary file.
                _ => return Err(e.error),
            },
        }
    }
}

/// `fs::rename(from, to)`, retrying while a reader holds either file open.
pub fn rename(from: &Path, to: &Path) -> io::Result<()> {
    with_retries(
        || std::fs::rename(from, to),
        held_by_reader,
        std::thread::sleep,
    )
}

/// Swaps what `a` and `b` name, in one step (both must exist): a reader of either path sees
/// one whole file or the other, never neither and never a file being written. Linux's
/// `renameat2` with `RENAME_EXCHANGE`; elsewhere an `Unsupported` error, and on Linux the
/// error of a file system without it (`EINVAL`) or a kernel before it (`ENOSYS`).
pub fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::ffi::OsStrExt;
        let c = |p: &Path| {
            std::ffi::CString::new(p.as_os_str().as_bytes())
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
        };
        let (a, b) = (c(a)?, c(b)?);
        // SAFETY: both are NUL-terminated strings that live across the call; AT_FDCWD makes
        // them relative to the working directory, as `fs::rename` is.
        let r = unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                a.as_ptr(),
                libc::AT_FDCWD,
                b.as_ptr(),
                libc::RENAME_EXCHANGE,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (a, b);
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }
}

/// Runs `attempt` until it succeeds, fails with an error `transient` does not accept, or the
/// waits are used up; `wait` is how time passes (a sleep, or a recorder in tests).
fn with_retries<T>(
    mut attempt: impl FnMut() -> io::Result<T>,
    transient: impl Fn(&io::Error) -> bool,
    mut wait: impl FnMut(Duration),
) -> io::Result<T> {
    let mut waits = RETRY_WAITS.iter();
    loop {
        match attempt() {
            Err(e) if transient(&e) => match waits.next() {
                Some(&d) => wait(d),
                None => return Err(e),
            },
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn sharing_violation() -> io::Error {
        io::Error::from_raw_os_error(32)
    }

    #[test]
    fn the_waits_add_up_to_the_budget() {
        assert_eq!(RETRY_WAITS.iter().sum::<Duration>(), RETRY_BUDGET);
    }

    #[test]
    fn a_reader_that_lets_go_is_waited_for() {
        let mut failures = 3;
        let mut waited = Vec::new();
        let result = with_retries(
            || {
                if failures > 0 {
                    failures -= 1;
                    Err(sharing_violation())
                } else {
                    Ok("replaced")
                }
            },
            |_| true,
            |d| waited.push(d),
        );
        assert_eq!(result.unwrap(), "replaced");
        assert_eq!(waited, RETRY_WAITS[..3]);
    }

    #[test]
    fn a_reader_that_never_lets_go_fails_after_the_budget() {
        let mut attempts = 0;
        let mut waited = Duration::ZERO;
        let result: io::Result<()> = with_retries(
            || {
                attempts += 1;
                Err(sharing_violation())
            },
            |_| true,
            |d| waited += d,
        );
        assert_eq!(result.unwrap_err().raw_os_error(), Some(32));
        assert_eq!(attempts, RETRY_WAITS.len() + 1);
        assert_eq!(waited, RETRY_BUDGET);
    }

    #[test]
    fn other_errors_are_not_retried() {
        let mut attempts = 0;
        let result: io::Result<()> = with_retries(
            || {
                attempts += 1;
                Err(io::Error::from(io::ErrorKind::NotFound))
            },
            held_by_reader,
            |_| panic!("no wait for an error no reader causes"),
        );
        assert_eq!(result.unwrap_err().kind(), io::ErrorKind::NotFound);
        assert_eq!(attempts, 1);
    }

    #[test]
    fn sharing_codes_count_only_on_windows() {
        // The same numbers are EIO, EPIPE and EDOM on unix, never to be retried there.
        assert_eq!(held_by_reader(&sharing_violation()), cfg!(windows));
        assert!(!held_by_reader(&io::Error::from_raw_os_error(2)));
    }

    #[test]
    fn an_exchange_swaps_two_names_where_the_platform_can() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        fs::write(&a, "one").unwrap();
        fs::write(&b, "two").unwrap();
        match exchange(&a, &b) {
            Ok(()) => {
                assert_eq!(fs::read_to_string(&a).unwrap(), "two");
                assert_eq!(fs::read_to_string(&b).unwrap(), "one");
                // Both names must exist: nothing is created.
                let gone = dir.path().join("gone");
                let e = exchange(&a, &gone).unwrap_err();
                assert_eq!(e.kind(), io::ErrorKind::NotFound);
                assert!(!gone.exists() && a.exists());
            }
            // A file system without it.
            #[cfg(target_os = "linux")]
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}"),
            #[cfg(not(target_os = "linux"))]
            Err(e) => assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{e}"),
        }
    }

    /// Opens `path` for reading the way .NET's `File.ReadAllText` does: read sharing only, so
    /// on Windows nobody may rename or delete it while it is open.
    fn open_like_dotnet(path: &Path) -> fs::File {
        let mut options = fs::OpenOptions::new();
        options.read(true);
        #[cfg(windows)]
        {
            use std::os::windows::fs::OpenOptionsExt;
            // FILE_SHARE_READ
            options.share_mode(0x1);
        }
        options.open(path).unwrap()
    }

    #[test]
    fn a_file_a_reader_holds_open_is_replaced_once_it_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("x.heartbeat");
        fs::write(&dest, "old").unwrap();
        let reader = open_like_dotnet(&dest);
        let (tx, rx) = std::sync::mpsc::channel();
        let holder = std::thread::spawn(move || {
            // Hold the file across the first attempts, then let go, as a reader does.
            rx.recv().unwrap();
            std::thread::sleep(Duration::from_millis(50));
            drop(reader);
        });
        let mut tmp = NamedTempFile::new_in(dir.path()).unwrap();
        io::Write::write_all(&mut tmp, b"new").unwrap();
        tx.send(()).unwrap();
        persist(tmp, &dest).unwrap();
        holder.join().unwrap();
        assert_eq!(fs::read_to_string(&dest).unwrap(), "new");

        let held = open_like_dotnet(&dest);
        let (tx, rx) = std::sync::mpsc::channel();
        let holder = std::thread::spawn(move || {
            rx.recv().unwrap();
            std::thread::sleep(Duration::from_millis(50));
            drop(held);
        });
        tx.send(()).unwrap();
        let claimed = dir.path().join("x.heartbeat.1-0.draining");
        rename(&dest, &claimed).unwrap();
        holder.join().unwrap();
        assert_eq!(fs::read_to_string(&claimed).unwrap(), "new");
        assert!(!dest.exists());
    }
}
