//! The open-file limit (`RLIMIT_NOFILE`). A supervisor holds one descriptor per child key (its
//! lock) and a few per child being shipped, so the usual soft limit of 1,024 (systemd's default
//! for services, most shells') runs out at a few hundred children while the hard limit allows
//! far more. Every command that may hold keys raises its soft limit to the hard one at start
//! (docs/behaviour.md T4, and docs/guide.md, "Daemon"); the daemon's supervisors inherit it.
//!
//! Windows has no such per-process limit on handles worth raising: nothing is done there.

/// The OS error codes that say a resource ran out (descriptors, the disk, a quota), as an
/// `io::Error` carries them. Empty on Windows, whose errors say so by their kind alone.
pub fn exhausted_codes() -> &'static [i32] {
    #[cfg(unix)]
    {
        &[libc::EMFILE, libc::ENFILE, libc::ENOSPC, libc::EDQUOT]
    }
    #[cfg(not(unix))]
    {
        &[]
    }
}

/// The code of "too many open files" (`EMFILE`), for an error made up when descriptors are
/// kept in reserve; the POSIX number where the platform has none.
pub fn too_many_open_files() -> i32 {
    #[cfg(unix)]
    {
        libc::EMFILE
    }
    #[cfg(not(unix))]
    {
        24
    }
}

/// Below this hard limit a long-lived supervisor may run short: said at start.
pub const LOW: u64 = 4096;

/// The limit before and after raising it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Raised {
    pub soft_before: u64,
    pub soft: u64,
    pub hard: u64,
}

/// Raises the soft open-file limit as far as the hard limit allows. `None` where the platform
/// has no such limit or it cannot be read.
#[cfg(unix)]
pub fn raise() -> Option<Raised> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit through a valid pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return None;
    }
    let soft_before = as_u64(lim.rlim_cur);
    let hard = as_u64(lim.rlim_max);
    let mut soft = soft_before;
    // macOS refuses a soft limit above its own per-process ceiling even when the hard limit is
    // "unlimited": the targets are tried from the highest down.
    for target in targets(hard) {
        if target <= soft {
            break;
        }
        let want = libc::rlimit {
            rlim_cur: target as libc::rlim_t,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit reads one rlimit through a valid pointer.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } == 0 {
            soft = target;
            break;
        }
    }
    Some(Raised {
        soft_before,
        soft,
        hard,
    })
}

#[cfg(not(unix))]
pub fn raise() -> Option<Raised> {
    None
}

/// Descriptors this process may still open (the soft limit less those open now), and the soft
/// limit. `None` where either cannot be told (then nothing is held back for want of
/// descriptors).
pub fn spare() -> Option<(u64, u64)> {
    let soft = soft_limit()?;
    let open = in_use()?;
    Some((soft.saturating_sub(open), soft))
}

#[cfg(unix)]
fn soft_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit through a valid pointer.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0).then(|| as_u64(lim.rlim_cur))
}

#[cfg(not(unix))]
fn soft_limit() -> Option<u64> {
    None
}

/// Descriptors open now (one more while counting them).
fn in_use() -> Option<u64> {
    let dir = if cfg!(target_os = "linux") {
        "/proc/self/fd"
    } else if cfg!(target_os = "macos") {
        "/dev/fd"
    } else {
        return None;
    };
    std::fs::read_dir(dir).ok().map(|d| d.count() as u64)
}

#[cfg(unix)]
fn as_u64(v: libc::rlim_t) -> u64 {
    if v == libc::RLIM_INFINITY {
        u64::MAX
    } else {
        v
    }
}

/// The soft limits to try, highest first: the hard limit itself, then (for an unlimited or
/// huge hard limit) common ceilings.
#[cfg(any(unix, test))]
fn targets(hard: u64) -> Vec<u64> {
    let mut out = vec![hard];
    out.extend([1 << 20, 1 << 16, 10_240].into_iter().filter(|t| *t < hard));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unlimited_hard_limit_is_approached_from_common_ceilings() {
        assert_eq!(targets(4096), vec![4096]);
        assert_eq!(targets(u64::MAX), vec![u64::MAX, 1 << 20, 1 << 16, 10_240]);
        assert_eq!(targets(524_288), vec![524_288, 1 << 16, 10_240]);
    }
}

#[cfg(all(test, target_os = "linux"))]
mod linux_tests {
    /// What `spare` says follows the descriptors this process opens and closes. Other tests
    /// open and close files on other threads meanwhile, so one measurement may be off: a few
    /// are taken, and one must see exactly the 50 opened here (give or take 5).
    #[test]
    fn spare_counts_the_descriptors_open_now() {
        let mut seen = Vec::new();
        for _ in 0..20 {
            let (before, limit) = super::spare().unwrap();
            let files: Vec<std::fs::File> = (0..50)
                .map(|_| std::fs::File::open("/proc/self/stat").unwrap())
                .collect();
            let (during, _) = super::spare().unwrap();
            drop(files);
            if before >= during + 45 && before <= during + 55 {
                return;
            }
            seen.push(format!("{before} {during} of {limit}"));
        }
        panic!("spare never followed the 50 files opened: {seen:?}");
    }
}
