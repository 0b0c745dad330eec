//! A Windows process handle with query rights, shared by process liveness (`process.rs`) and
//! start tokens (`start_token.rs`), so neither of them imports the other. Nothing on other
//! platforms.

#[cfg(windows)]
mod os {
    use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle, RawHandle};

    use windows_sys::Win32::Foundation::{GetLastError, HANDLE, STILL_ACTIVE};
    use windows_sys::Win32::System::Threading::{
        GetExitCodeProcess, OpenProcess as open_process, PROCESS_QUERY_LIMITED_INFORMATION,
    };

    /// A process handle with query rights, closed on drop.
    pub(crate) struct OpenProcess(OwnedHandle);

    impl OpenProcess {
        /// Opens `pid` if it names a process that has not exited (a handle someone else still
        /// holds keeps an exited process's object, and its pid, around).
        pub(crate) fn running(pid: u32) -> Option<OpenProcess> {
            OpenProcess::query(pid)
                .ok()
                .filter(OpenProcess::still_active)
        }

        pub(crate) fn query(pid: u32) -> Result<OpenProcess, u32> {
            // pid 0 is the idle process: never a watcher's parent or a replay.
            if pid == 0 {
                return Err(0);
            }
            // SAFETY: plain FFI call; a null result is an error, read at once below.
            let handle = unsafe { open_process(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid) };
            if handle.is_null() {
                // SAFETY: reads this thread's last error, set by the failed call above.
                return Err(unsafe { GetLastError() });
            }
            // SAFETY: a fresh, valid handle that nothing else owns.
            Ok(OpenProcess(unsafe {
                OwnedHandle::from_raw_handle(handle as RawHandle)
            }))
        }

        pub(crate) fn raw(&self) -> HANDLE {
            self.0.as_raw_handle() as HANDLE
        }

        pub(crate) fn still_active(&self) -> bool {
            let mut code = 0u32;
            // SAFETY: the handle has PROCESS_QUERY_LIMITED_INFORMATION, which this needs.
            let ok = unsafe { GetExitCodeProcess(self.raw(), &mut code) };
            ok != 0 && code == STILL_ACTIVE as u32
        }
    }
}

#[cfg(windows)]
pub(crate) use os::OpenProcess;
