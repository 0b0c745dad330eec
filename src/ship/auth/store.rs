//! The kcap CLI's token store, read and written exactly as the kcap CLI does
//! (docs/behaviour.md R1; the kcap CLI's `TokenStore`):
//!
//! - the profile is `--profile`/`KCAP_PROFILE`, else `<config>/config.json`'s
//!   `active_profile` (empty or missing: `default`);
//! - its file is `<config>/tokens/<profile>.json`; the legacy `<config>/tokens.json` is read
//!   only when that file is missing (not when it is unreadable) and the profile is the
//!   on-disk active one (the legacy file belonged to whichever profile was active then);
//! - a refresh holds an exclusive `flock` on `<config>/tokens/<profile>.lock` (what .NET's
//!   `FileShare.None` takes on Unix), waiting up to 15 s in 100 ms polls. The lock file is
//!   never deleted: unlinking it would let a waiter hold the old inode while a newcomer locks
//!   a new one, and two refreshes would run at once;
//! - a save writes `<profile>.json.<pid>.<random>.tmp` with mode 0600 from its first byte
//!   (the name the kcap CLI's logout sweeps), renames it over the file, and removes the
//!   legacy file when the profile saved is the legacy file's owner, the on-disk active profile
//!   at that moment (the newer kcap CLI's rule, docs/behaviour.md S4.4): a refresh of another
//!   profile must not erase the active profile's only login.
//!
//! The document is kept as a JSON object, so every field this watcher does not know (and the
//! kcap CLI's own, such as `github_username`) survives a refresh unchanged.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

use super::Token;
use crate::platform::private_file;
use crate::time::Ts;

/// A token this close to its expiry counts as expired: a request sent with it could arrive
/// after it lapsed (the kcap CLI's `IsExpired`).
pub(crate) const EXPIRY_MARGIN: Duration = Duration::from_secs(30);
/// How long a refresh waits for another process's lock before giving up.
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(15);
/// How often the lock is tried while waiting.
pub(crate) const LOCK_POLL: Duration = Duration::from_millis(100);

/// The profile the kcap CLI's default provider name means when `provider` is absent.
pub(crate) const PROVIDER_GITHUB_APP: &str = "GitHubApp";
pub(crate) const PROVIDER_WORKOS: &str = "workos";

/// `now >= expires_at - 30 s`. A token without a readable `expires_at` is not judged here:
/// the server is the judge, and a wrong guess costs one `401`.
pub(crate) fn is_expired(expires_at: Option<Ts>, now: Ts) -> bool {
    expires_at.is_some_and(|at| now >= at.minus(EXPIRY_MARGIN))
}

/// The profile whose store this process reads: the explicit one, else the on-disk active
/// one. Also returns the active one (the owner of the legacy file).
pub(crate) fn resolve_profile(config_dir: &Path, explicit: Option<&str>) -> (String, String) {
    let active = active_profile(config_dir);
    let profile = explicit
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map_or_else(|| active.clone(), str::to_owned);
    (profile, active)
}

/// `<config>/config.json`'s `active_profile`; `default` when the file, the field or its
/// value is missing or empty, or the file cannot be read (with a warning).
fn active_profile(config_dir: &Path) -> String {
    let path = config_dir.join("config.json");
    let text = match std::fs::read(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return "default".to_owned(),
        Err(e) => {
            tracing::warn!(event = "config_unreadable", path = %path.display(), "failed to read the kcap config {}: {e}; using the profile \"default\"", path.display());
            return "default".to_owned();
        }
    };
    match serde_json::from_slice::<Value>(&text) {
        Ok(doc) => match doc.get("active_profile").and_then(Value::as_str) {
            Some(p) if !p.trim().is_empty() => p.to_owned(),
            _ => "default".to_owned(),
        },
        Err(e) => {
            tracing::warn!(event = "config_unreadable", path = %path.display(), "failed to parse the kcap config {}: {e}; using the profile \"default\"", path.display());
            "default".to_owned()
        }
    }
}

/// A profile name the kcap CLI accepts as a file name: not empty, not `.` or `..`, and no
/// path separator or NUL, so no profile can make a path outside `<config>/tokens`.
pub(crate) fn valid_profile(profile: &str) -> bool {
    !profile.trim().is_empty()
        && profile != "."
        && profile != ".."
        && !profile.contains(['/', '\\', '\0'])
}

/// One token store document as read.
#[derive(Clone, Debug)]
pub struct Entry {
    pub doc: Map<String, Value>,
    /// Read from the legacy `tokens.json`.
    pub legacy: bool,
    /// The file's modification time: when whoever wrote it (a refresh, a login) obtained the
    /// token, as far as any process can tell. `None` when the file system does not say.
    pub modified: Option<Ts>,
}

impl Entry {
    fn str_field(&self, name: &str) -> Option<&str> {
        self.doc.get(name).and_then(Value::as_str)
    }

    pub(crate) fn access_token(&self) -> Option<Token> {
        self.str_field("access_token").and_then(Token::new)
    }

    /// The raw `access_token` text, for comparing two reads.
    pub(crate) fn access_token_text(&self) -> Option<&str> {
        self.str_field("access_token")
    }

    pub(crate) fn server_url(&self) -> Option<&str> {
        self.str_field("server_url")
    }

    pub(crate) fn expires_at(&self) -> Option<Ts> {
        self.doc.get("expires_at").and_then(parse_expires_at)
    }

    pub(crate) fn is_expired(&self, now: Ts) -> bool {
        is_expired(self.expires_at(), now)
    }

    /// `provider`, `GitHubApp` when absent (the kcap CLI's default).
    pub(crate) fn provider(&self) -> &str {
        self.str_field("provider").unwrap_or(PROVIDER_GITHUB_APP)
    }

    pub(crate) fn refresh_token(&self) -> Option<&str> {
        self.str_field("refresh_token")
    }

    pub(crate) fn client_id(&self) -> Option<&str> {
        self.str_field("client_id")
    }

    /// Whether the kcap CLI would refresh this token: `workos` with its refresh token and
    /// client id, or `GitHubApp`.
    pub(crate) fn refreshable(&self) -> bool {
        match self.provider() {
            PROVIDER_WORKOS => self.refresh_token().is_some() && self.client_id().is_some(),
            PROVIDER_GITHUB_APP => true,
            _ => false,
        }
    }
}

/// What reading one store file found.
#[derive(Clone, Debug)]
enum Read {
    Missing,
    /// Present but not a JSON object (the kcap CLI: "not authenticated", and never a reason
    /// to fall back to the legacy file).
    Unusable,
    Loaded(Entry),
}

/// Where one profile's tokens live.
#[derive(Debug)]
pub(crate) struct Store {
    config_dir: PathBuf,
    profile: String,
    /// The on-disk active profile: only it may read the legacy file.
    active: String,
    /// `<config>/tokens/<profile>.json` and `<config>/tokens.json`, built once: the store is
    /// read before every request.
    file: PathBuf,
    legacy_file: PathBuf,
    /// The last read of each file (the profile's, the legacy one) and the version of the file
    /// it read: a request reads the store again only when a `stat` shows another version.
    cache: std::sync::Mutex<[Option<(Version, Read)>; 2]>,
}

/// Tells one version of a file from another without reading it: its identity (a save by
/// rename, as the kcap CLI and this watcher save, makes a new file), its size and its times.
/// Unix: device and inode from the same `stat` as the size, and the modification and change
/// times to the nanosecond. Elsewhere the identity needs the file opened (volume serial and
/// file index), still far cheaper than reading and parsing it; creation and modification
/// times are kept too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Version {
    len: u64,
    modified: Option<std::time::SystemTime>,
    #[cfg(unix)]
    inode: (u64, u64, i64, i64),
    #[cfg(not(unix))]
    id: crate::platform::file_id::FileId,
    #[cfg(not(unix))]
    created: Option<std::time::SystemTime>,
}

impl Version {
    /// The version of the file at `path` now (following symlinks, as the read does).
    fn at(path: &Path) -> io::Result<Version> {
        let meta = std::fs::metadata(path)?;
        #[cfg(unix)]
        return Ok(Version::of(&meta));
        #[cfg(not(unix))]
        return Ok(Version::of(
            &meta,
            crate::platform::file_id::FileId::of_path(path)?,
        ));
    }

    /// The version of an open file.
    fn of_file(file: &File) -> Option<Version> {
        let meta = file.metadata().ok()?;
        #[cfg(unix)]
        return Some(Version::of(&meta));
        #[cfg(not(unix))]
        return Some(Version::of(
            &meta,
            crate::platform::file_id::FileId::of_file(file).ok()?,
        ));
    }

    #[cfg(unix)]
    fn of(meta: &std::fs::Metadata) -> Version {
        use std::os::unix::fs::MetadataExt;
        Version {
            len: meta.len(),
            modified: meta.modified().ok(),
            inode: (meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec()),
        }
    }

    #[cfg(not(unix))]
    fn of(meta: &std::fs::Metadata, id: crate::platform::file_id::FileId) -> Version {
        Version {
            len: meta.len(),
            modified: meta.modified().ok(),
            id,
            created: meta.created().ok(),
        }
    }
}

impl Store {
    pub(crate) fn new(config_dir: PathBuf, profile: String, active: String) -> Store {
        let file = config_dir.join("tokens").join(format!("{profile}.json"));
        let legacy_file = config_dir.join("tokens.json");
        Store {
            config_dir,
            profile,
            active,
            file,
            legacy_file,
            cache: std::sync::Mutex::new([None, None]),
        }
    }

    pub(crate) fn profile(&self) -> &str {
        &self.profile
    }

    fn tokens_dir(&self) -> PathBuf {
        self.config_dir.join("tokens")
    }

    pub(crate) fn path(&self) -> PathBuf {
        self.file.clone()
    }

    fn legacy_path(&self) -> PathBuf {
        self.legacy_file.clone()
    }

    pub(crate) fn lock_path(&self) -> PathBuf {
        self.tokens_dir().join(format!("{}.lock", self.profile))
    }

    /// The profile's document, or the legacy one where the rules allow it. Read before every
    /// request, so a file is parsed again only when a `stat` finds it changed (a corrupt one is
    /// then also reported once, not once a request).
    pub(crate) fn load(&self) -> Option<Entry> {
        self.load_with(false)
    }

    /// [`Store::load`] reading the files whatever their `stat` says: after the server refused
    /// the token, when a change the `stat` cannot see (a same-length rewrite in place within
    /// one tick of the file system's clock) must not keep the refused token in use.
    pub(crate) fn load_fresh(&self) -> Option<Entry> {
        self.load_with(true)
    }

    fn load_with(&self, fresh: bool) -> Option<Entry> {
        match self.read_cached(false, fresh) {
            Read::Loaded(entry) => Some(entry),
            Read::Unusable => None,
            Read::Missing if self.profile == self.active => match self.read_cached(true, fresh) {
                Read::Loaded(entry) => Some(entry),
                _ => None,
            },
            Read::Missing => None,
        }
    }

    /// The profile's file (or the legacy one), from the last read while the file is the
    /// version that read found (unless `fresh`).
    fn read_cached(&self, legacy: bool, fresh: bool) -> Read {
        let (path, slot) = if legacy {
            (&self.legacy_file, 1)
        } else {
            (&self.file, 0)
        };
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let now = match Version::at(path) {
            Ok(version) => version,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                cache[slot] = None;
                return Read::Missing;
            }
            // The read says what is wrong (once per streak).
            Err(_) => return read(path, legacy).0,
        };
        if let Some((version, read)) = &cache[slot]
            && *version == now
            && !fresh
        {
            return read.clone();
        }
        let (read, version) = read(path, legacy);
        cache[slot] = version.map(|v| (v, read.clone()));
        read
    }

    /// The profile's own file only (inside the lock: the kcap CLI re-reads `LoadAsync(profile)`,
    /// falling back to what it read before when that is missing or unusable).
    pub(crate) fn load_profile_file(&self) -> Option<Entry> {
        match read(&self.file, false).0 {
            Read::Loaded(entry) => Some(entry),
            Read::Missing | Read::Unusable => None,
        }
    }

    /// Takes the cross-process lock, waiting up to [`LOCK_WAIT`]. `Ok(None)`: another process
    /// held it all that time. Dropping the returned file releases the lock.
    pub(crate) async fn lock(&self) -> io::Result<Option<File>> {
        let dir = self.tokens_dir();
        private_file::dir_builder().create(&dir)?;
        let path = self.lock_path();
        // A symlink planted here is refused, never followed (docs/behaviour.md R5).
        let file = private_file::open(
            private_file::options()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false),
            &path,
        )?;
        let deadline = tokio::time::Instant::now() + LOCK_WAIT;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(Some(file)),
                Err(std::fs::TryLockError::WouldBlock) => {
                    if tokio::time::Instant::now() >= deadline {
                        return Ok(None);
                    }
                    tokio::time::sleep(LOCK_POLL).await;
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(e),
            }
        }
    }

    /// Writes `doc` atomically as the profile's file (mode 0600), then removes the legacy
    /// file if this profile owns it (is the active one now). Call only while holding
    /// [`Store::lock`].
    pub(crate) fn save(&self, doc: &Map<String, Value>) -> io::Result<()> {
        let dir = self.tokens_dir();
        let text = serde_json::to_vec(doc).map_err(io::Error::other)?;
        let prefix = format!("{}.json.{}.", self.profile, std::process::id());
        let mut builder = tempfile::Builder::new();
        builder.prefix(&prefix).suffix(".tmp").rand_bytes(16);
        private_file::restrict_temp_files(&mut builder);
        let mut temp = builder.tempfile_in(&dir)?;
        temp.write_all(&text)?;
        temp.as_file().sync_all()?;
        let path = self.path();
        crate::platform::replace::persist(temp, &path)?;
        private_file::make_private(&path)?;
        // Read again now, not the active profile of when this process started: the owner is
        // whoever is active when the legacy file would be retired.
        if active_profile(&self.config_dir) != self.profile {
            return Ok(());
        }
        match std::fs::remove_file(self.legacy_path()) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => tracing::debug!("failed to remove the legacy token store: {e}"),
        }
        Ok(())
    }
}

/// A failure to read the token store was logged and no read has worked since.
static UNREADABLE_SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Reads and parses one store file; also the version of the file read (`None` when it could
/// not be opened).
fn read(path: &Path, legacy: bool) -> (Read, Option<Version>) {
    let (bytes, version) = match std::fs::File::open(path).and_then(|mut f| {
        use std::io::Read as _;
        let version = Version::of_file(&f);
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes)?;
        Ok((bytes, version))
    }) {
        Ok(read) => {
            UNREADABLE_SAID.store(false, std::sync::atomic::Ordering::Relaxed);
            read
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return (Read::Missing, None),
        Err(e) => {
            // Once per streak: the store is read before every request, and a process out of
            // descriptors fails each read the same way until some are back.
            if !UNREADABLE_SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
                tracing::warn!(event = "token_store_unreadable", path = %path.display(), "failed to read the kcap token store {}: {e}", path.display());
            }
            return (Read::Unusable, None);
        }
    };
    let read = match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(doc)) => Read::Loaded(Entry {
            doc,
            legacy,
            modified: version.and_then(|v| v.modified).map(Ts::from_system),
        }),
        // serde_json's message names a position and an expected type, never the text it
        // read, so the token cannot leak through it.
        Ok(_) => {
            tracing::warn!(event = "token_store_unreadable", path = %path.display(), "failed to parse the kcap token store {}: not a JSON object", path.display());
            Read::Unusable
        }
        Err(e) => {
            tracing::warn!(event = "token_store_unreadable", path = %path.display(), "failed to parse the kcap token store {}: {e}", path.display());
            Read::Unusable
        }
    };
    (read, version)
}

/// Unix times below this are seconds, above it milliseconds (10^11 s is the year 5138;
/// 10^11 ms is 1973, before any token store existed).
const SECONDS_OR_MILLIS: f64 = 1.0e11;

/// `expires_at` as a time: what the kcap CLI writes (a .NET `DateTimeOffset`, ISO 8601 with
/// an offset and up to 7 fraction digits), RFC 3339 without an offset (read as UTC), or a
/// Unix time number or numeric string (seconds, or milliseconds above 10^11). `None` when
/// absent or unreadable.
pub(crate) fn parse_expires_at(value: &Value) -> Option<Ts> {
    match value {
        Value::Number(n) => unix_time(n.as_f64()?),
        Value::String(s) => {
            let s = s.trim();
            if let Ok(n) = s.parse::<f64>() {
                return unix_time(n);
            }
            Ts::parse_rfc3339(s).or_else(|| {
                let civil: jiff::civil::DateTime = s.parse().ok()?;
                let ts = civil.to_zoned(jiff::tz::TimeZone::UTC).ok()?.timestamp();
                Some(Ts(ts.as_millisecond()))
            })
        }
        _ => None,
    }
}

fn unix_time(n: f64) -> Option<Ts> {
    if !n.is_finite() {
        return None;
    }
    if n.abs() < SECONDS_OR_MILLIS {
        Some(Ts((n * 1000.0).round() as i64))
    } else {
        // Saturating float-to-int cast: absurd values become far-future or far-past times.
        Some(Ts(n.round() as i64))
    }
}

/// `expires_at` as the kcap CLI's serializer writes a UTC `DateTimeOffset`:
/// `2026-07-28T16:19:11.25+00:00` (fraction without trailing zeros, none when whole).
pub(crate) fn format_expires_at(at: Ts) -> String {
    let secs = at.0.div_euclid(1000);
    let millis = at.0.rem_euclid(1000);
    let whole = jiff::Timestamp::from_second(secs)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%S").to_string())
        .unwrap_or_else(|_| "9999-12-31T23:59:59".to_owned());
    let fraction = if millis == 0 {
        String::new()
    } else {
        format!(".{millis:03}").trim_end_matches('0').to_owned()
    };
    format!("{whole}{fraction}+00:00")
}

#[cfg(test)]
mod tests {
    /// The paths built once are the profile's file and the legacy file, as the kcap CLI names
    /// them.
    #[test]
    fn the_store_paths_are_built_once_as_named() {
        let store = Store::new("/c".into(), "work".into(), "default".into());
        let c = Path::new("/c");
        assert_eq!(store.path(), c.join("tokens").join("work.json"));
        assert_eq!(store.legacy_path(), c.join("tokens.json"));
        assert_eq!(store.lock_path(), c.join("tokens").join("work.lock"));
    }

    use super::*;
    use serde_json::json;

    const NOW: Ts = Ts(1_785_000_000_000);

    #[test]
    fn expiry_is_thirty_seconds_early() {
        let at = NOW.plus(Duration::from_secs(30));
        assert!(is_expired(Some(at), NOW), "exactly 30 s left: expired");
        assert!(!is_expired(Some(at), NOW.minus(Duration::from_millis(1))));
        assert!(is_expired(Some(NOW.minus(Duration::from_secs(5))), NOW));
        assert!(!is_expired(Some(NOW.plus(Duration::from_secs(31))), NOW));
        assert!(!is_expired(None, NOW), "no expiry: the server judges");
    }

    #[test]
    fn expires_at_formats() {
        let secs = NOW.0 / 1000;
        assert_eq!(parse_expires_at(&json!(secs)), Some(NOW));
        assert_eq!(parse_expires_at(&json!(NOW.0)), Some(NOW));
        assert_eq!(parse_expires_at(&json!(secs.to_string())), Some(NOW));
        assert_eq!(parse_expires_at(&json!(NOW.rfc3339())), Some(NOW));
        // .NET: seven fraction digits and an offset.
        assert_eq!(
            parse_expires_at(&json!("2026-07-28T16:19:11.2500000+00:00")),
            Ts::parse_rfc3339("2026-07-28T16:19:11.250Z")
        );
        assert_eq!(
            parse_expires_at(&json!("2026-07-28T16:19:11.250+02:00")),
            Ts::parse_rfc3339("2026-07-28T14:19:11.250Z")
        );
        assert_eq!(
            parse_expires_at(&json!("2026-07-28T16:19:11.250")),
            Ts::parse_rfc3339("2026-07-28T16:19:11.250Z")
        );
        assert_eq!(parse_expires_at(&json!("soon")), None);
        assert_eq!(parse_expires_at(&json!(null)), None);
    }

    #[test]
    fn expires_at_is_written_as_dotnet_writes_it_and_reads_back() {
        let at = Ts::parse_rfc3339("2026-07-28T16:19:11.250Z").unwrap();
        assert_eq!(format_expires_at(at), "2026-07-28T16:19:11.25+00:00");
        let whole = Ts::parse_rfc3339("2026-07-28T16:19:11Z").unwrap();
        assert_eq!(format_expires_at(whole), "2026-07-28T16:19:11+00:00");
        for t in [at, whole, NOW, Ts(NOW.0 + 7)] {
            assert_eq!(parse_expires_at(&json!(format_expires_at(t))), Some(t));
        }
    }

    #[test]
    fn profiles() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            resolve_profile(dir.path(), None),
            ("default".into(), "default".into())
        );
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"version":2,"active_profile":"work","profiles":{"work":{}}}"#,
        )
        .unwrap();
        assert_eq!(
            resolve_profile(dir.path(), None),
            ("work".into(), "work".into())
        );
        assert_eq!(
            resolve_profile(dir.path(), Some("home")),
            ("home".into(), "work".into())
        );
        std::fs::write(dir.path().join("config.json"), r#"{"active_profile":""}"#).unwrap();
        assert_eq!(resolve_profile(dir.path(), None).0, "default");
        for bad in ["", " ", ".", "..", "a/b", "../x", "a\\b"] {
            assert!(!valid_profile(bad), "{bad:?}");
        }
        assert!(valid_profile("work-2"));
    }

    #[test]
    fn legacy_file_only_when_missing_and_active() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path();
        std::fs::write(config.join("tokens.json"), r#"{"access_token":"legacy"}"#).unwrap();
        let active = Store::new(config.into(), "default".into(), "default".into());
        let other = Store::new(config.into(), "other".into(), "default".into());
        let got = active.load().unwrap();
        assert!(got.legacy);
        assert_eq!(got.access_token_text(), Some("legacy"));
        assert!(other.load().is_none(), "not the legacy file's owner");
        std::fs::create_dir(config.join("tokens")).unwrap();
        std::fs::write(config.join("tokens/default.json"), "{corrupt").unwrap();
        assert!(
            active.load().is_none(),
            "an unusable profile file never falls back to the legacy one"
        );
        std::fs::write(
            config.join("tokens/default.json"),
            r#"{"access_token":"mine"}"#,
        )
        .unwrap();
        assert_eq!(active.load().unwrap().access_token_text(), Some("mine"));
    }

    #[test]
    fn save_keeps_fields_is_private_and_retires_the_legacy_file() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path();
        std::fs::write(config.join("tokens.json"), r#"{"access_token":"legacy"}"#).unwrap();
        let store = Store::new(config.into(), "default".into(), "default".into());
        let mut entry = store.load().unwrap();
        entry.doc.insert("github_username".into(), json!("alice"));
        entry.doc.insert("access_token".into(), json!("new"));
        std::fs::create_dir(config.join("tokens")).unwrap();
        store.save(&entry.doc).unwrap();
        let saved: Value =
            serde_json::from_slice(&std::fs::read(config.join("tokens/default.json")).unwrap())
                .unwrap();
        assert_eq!(
            saved,
            json!({"access_token": "new", "github_username": "alice"})
        );
        if let Some(mode) = crate::platform::test_support::mode(&config.join("tokens/default.json"))
        {
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(!config.join("tokens.json").exists());
        let leftovers: Vec<_> = std::fs::read_dir(config.join("tokens"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers.len(), 1, "no temp file left: {leftovers:?}");
    }

    #[test]
    fn only_the_active_profiles_save_retires_the_legacy_file() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path();
        std::fs::create_dir(config.join("tokens")).unwrap();
        std::fs::write(config.join("tokens.json"), r#"{"access_token":"legacy"}"#).unwrap();
        std::fs::write(config.join("config.json"), r#"{"active_profile":"work"}"#).unwrap();
        let doc = json!({"access_token": "x"}).as_object().unwrap().clone();
        for profile in ["default", "home"] {
            let (p, active) = resolve_profile(config, Some(profile));
            Store::new(config.into(), p, active).save(&doc).unwrap();
            assert!(config.join("tokens.json").exists(), "{profile}'s save");
        }
        // Whoever is active at the save owns it, not whoever was when the store was made.
        let stale = Store::new(config.into(), "home".into(), "home".into());
        stale.save(&doc).unwrap();
        assert!(config.join("tokens.json").exists());
        std::fs::write(config.join("config.json"), r#"{"active_profile":"home"}"#).unwrap();
        stale.save(&doc).unwrap();
        assert!(!config.join("tokens.json").exists());
    }

    #[tokio::test(start_paused = true)]
    async fn the_lock_waits_fifteen_seconds_for_another_holder() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().into(), "default".into(), "default".into());
        let held = store.lock().await.unwrap().expect("free lock");
        let started = tokio::time::Instant::now();
        assert!(
            store.lock().await.unwrap().is_none(),
            "flock excludes a second open"
        );
        assert!(started.elapsed() >= LOCK_WAIT);
        drop(held);
        assert!(store.lock().await.unwrap().is_some());
        assert!(store.lock_path().exists(), "the lock file is never removed");
    }

    /// What `f` logs, as text.
    fn logged(f: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Buf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let writer = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            // A warning first reached on another test's thread, while no subscriber of this
            // thread existed yet, is remembered as wanted by nobody; asked again now, it goes
            // to this one (the test read nothing once under Wine).
            tracing::callsite::rebuild_interest_cache();
            f()
        });
        let text = buf.0.lock().unwrap().clone();
        String::from_utf8(text).unwrap()
    }

    /// Replaces `path` as the kcap CLI saves it: a new file renamed over the old.
    fn save_as_the_kcap_cli(path: &Path, text: &str) {
        let tmp = path.with_extension("json.1.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }

    /// A store that is not JSON is reported when it is read, not again at every request: the
    /// store is read before each one, and a warning a line would flood the log.
    #[test]
    fn a_corrupt_token_store_is_reported_once_per_version_not_per_request() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().into(), "default".into(), "default".into());
        std::fs::create_dir(dir.path().join("tokens")).unwrap();
        save_as_the_kcap_cli(&store.path(), "{\"access_token\": ");
        let log = logged(|| {
            for _ in 0..5 {
                assert!(store.load().is_none());
            }
        });
        assert_eq!(
            log.matches("failed to parse the kcap token store").count(),
            1,
            "{log}"
        );
        // Another broken version is another report.
        save_as_the_kcap_cli(&store.path(), "[1, 2]");
        let log = logged(|| {
            for _ in 0..5 {
                assert!(store.load().is_none());
            }
        });
        assert_eq!(log.matches("not a JSON object").count(), 1, "{log}");
    }

    /// After a refusal the store is read whatever its `stat` says: a change the version cannot
    /// see (here the cache made to hold an older read of the same version) is not kept.
    #[test]
    fn a_fresh_load_reads_the_file_whatever_its_version() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().into(), "default".into(), "default".into());
        std::fs::create_dir(dir.path().join("tokens")).unwrap();
        save_as_the_kcap_cli(&store.path(), r#"{"access_token":"old"}"#);
        let stale = store.load().unwrap();
        save_as_the_kcap_cli(&store.path(), r#"{"access_token":"new"}"#);
        let version = Version::at(&store.path()).unwrap();
        store.cache.lock().unwrap()[0] = Some((version, Read::Loaded(stale)));
        let text = |e: Option<Entry>| e.and_then(|e| e.access_token_text().map(str::to_owned));
        assert_eq!(
            text(store.load()).as_deref(),
            Some("old"),
            "the cache answers"
        );
        assert_eq!(text(store.load_fresh()).as_deref(), Some("new"));
        assert_eq!(
            text(store.load()).as_deref(),
            Some("new"),
            "and the cache is the new read"
        );
    }

    /// Whatever changes the store between two requests is read by the second: a save by
    /// rename, a rewrite in place of the same length, a removal (then the legacy file).
    #[test]
    fn a_changed_token_store_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().into(), "default".into(), "default".into());
        std::fs::create_dir(dir.path().join("tokens")).unwrap();
        let token = |store: &Store| {
            store
                .load()
                .and_then(|e| e.access_token_text().map(str::to_owned))
        };
        assert_eq!(token(&store), None);
        save_as_the_kcap_cli(&store.path(), r#"{"access_token":"aaaa"}"#);
        assert_eq!(token(&store).as_deref(), Some("aaaa"));
        assert_eq!(token(&store).as_deref(), Some("aaaa"));
        save_as_the_kcap_cli(&store.path(), r#"{"access_token":"bbbb"}"#);
        assert_eq!(token(&store).as_deref(), Some("bbbb"));
        // In place, same length: only the times tell (set a second on, as a later write's
        // would be on a file system with coarse timestamps).
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(store.path())
            .unwrap();
        let later = f.metadata().unwrap().modified().unwrap() + Duration::from_secs(1);
        (&f).write_all(br#"{"access_token":"cccc"}"#).unwrap();
        f.set_modified(later).unwrap();
        drop(f);
        assert_eq!(token(&store).as_deref(), Some("cccc"));
        std::fs::remove_file(store.path()).unwrap();
        assert_eq!(token(&store), None);
        std::fs::write(
            dir.path().join("tokens.json"),
            r#"{"access_token":"legacy"}"#,
        )
        .unwrap();
        assert_eq!(token(&store).as_deref(), Some("legacy"));
        save_as_the_kcap_cli(&store.path(), r#"{"access_token":"dddd"}"#);
        assert_eq!(
            token(&store).as_deref(),
            Some("dddd"),
            "the profile's file first"
        );
    }
}
