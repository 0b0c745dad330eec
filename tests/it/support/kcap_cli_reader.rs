//! Reading kcap-watch's files the way the kcap CLI reads them. On Windows that is .NET's
//! `File.ReadAllText`: read access, sharing read only, so the open fails with a sharing
//! violation while any other handle may write, rename or delete the file (and a reader so
//! refused takes the watcher for dead). Elsewhere sharing modes do not exist and this is a
//! plain read.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::path::Path;

/// Opens `path` as `File.ReadAllText` does.
pub fn open(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(windows)]
    {
        use std::os::windows::fs::OpenOptionsExt;
        // FILE_SHARE_READ, and neither FILE_SHARE_WRITE nor FILE_SHARE_DELETE.
        options.share_mode(0x1);
    }
    options.open(path)
}

/// Reads `path` whole as `File.ReadAllText` does.
pub fn read_all_text(path: &Path) -> io::Result<String> {
    let mut text = String::new();
    open(path)?.read_to_string(&mut text)?;
    Ok(text)
}
