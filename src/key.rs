//! kcap's key vocabulary: who a watcher watches (`Role`, `Identity`), the watcher key that
//! names its files (`<session>` or `<session>-<agent>`, the kcap CLI's rule), and why a key
//! may not be known yet (`MissingKey`).
//!
//! This is kcap's language, not Codex's: the rollout parser (`crate::codex::header`) fills
//! an [`Identity`] from a Codex header, and the pipeline, the host, the files and the
//! requests all speak of it without knowing the Codex format.

/// Which kind of watcher a rollout needs (docs/behaviour.md L1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A sub-agent: posts `subagent-stop`, never session-end.
    Child,
    /// Any other thread: posts session-end on idle or when its parent process exits.
    Session,
}

impl Role {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Role::Child => "child",
            Role::Session => "session",
        }
    }
}

/// Identity derived from a rollout's first `session_meta`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub role: Role,
    /// The session the transcript belongs to (for a child: its parent tree's session), without
    /// dashes.
    pub session_id: Option<String>,
    /// The child's own thread id (children only), without dashes.
    pub agent_id: Option<String>,
    /// The parent thread, without dashes (children only).
    pub parent_thread_id: Option<String>,
    /// `agent_type` for lifecycle requests: the last segment of `agent_path`, else
    /// `agent_nickname`, else `subagent` (never `agent_role`). `None` for a session.
    pub agent_type: Option<String>,
    /// `session_meta.cwd`, when present.
    pub cwd: Option<String>,
    /// For a child: what `source.subagent` says it is (`thread_spawn`, `review`,
    /// `memory_consolidation`, `other`, ...), for diagnostics.
    pub subagent_kind: Option<String>,
}

/// Ids are accepted with or without dashes and always sent without.
pub(crate) fn normalize_id(id: &str) -> String {
    id.trim().chars().filter(|c| *c != '-').collect()
}

/// Why a watcher cannot know its key yet (docs/behaviour.md R4.6). The shell turns it into the
/// exit-2 message when no id on the command line fills the gap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MissingKey {
    /// The first line is not a readable `session_meta` (yet): the file may still be written.
    NoHeader,
    /// The header is a sub-agent's (review, memory consolidation, a delegate `other` thread)
    /// but names neither a parent thread nor a root session. It never will: the first
    /// `session_meta` is final, so waiting cannot help.
    ChildWithoutParent {
        /// `source.subagent`'s kind, when known.
        subagent: Option<String>,
    },
    /// A child header without its own `id` (and no `--agent-id`).
    ChildWithoutId,
}

impl MissingKey {
    /// The one-line message for a user (the rollout's path is named by the caller's context).
    pub fn message(&self, rollout: &std::path::Path) -> String {
        let path = rollout.display();
        match self {
            MissingKey::NoHeader => format!(
                "rollout {path} has no readable session_meta yet; pass SESSION_ID (and --agent-id for a child)"
            ),
            MissingKey::ChildWithoutParent { subagent } => {
                let kind = subagent
                    .as_deref()
                    .map_or_else(String::new, |k| format!(" ({k})"));
                format!(
                    "rollout {path} is a sub-agent{kind} whose session_meta names no parent thread or session; pass SESSION_ID (the parent session's id) to watch it"
                )
            }
            MissingKey::ChildWithoutId => format!(
                "rollout {path} is a sub-agent whose session_meta has no id; pass --agent-id"
            ),
        }
    }

    /// Whether waiting for more of the file can fill the gap (only a missing header can).
    pub(crate) fn may_resolve_itself(&self) -> bool {
        matches!(self, MissingKey::NoHeader)
    }
}

/// What keeps a watcher from its key, given the header's identity (if read) and which ids the
/// command line gave. `None`: the key is known. `--role` is left to the caller (it overrides
/// the header's role before this check).
pub fn missing_key(
    header: Option<&Identity>,
    session_id_given: bool,
    agent_id_given: bool,
) -> Option<MissingKey> {
    let Some(id) = header else {
        return (!session_id_given).then_some(MissingKey::NoHeader);
    };
    match id.role {
        Role::Session => {
            (id.session_id.is_none() && !session_id_given).then_some(MissingKey::NoHeader)
        }
        Role::Child => {
            if id.session_id.is_none() && !session_id_given {
                Some(MissingKey::ChildWithoutParent {
                    subagent: id.subagent_kind.clone(),
                })
            } else if id.agent_id.is_none() && !agent_id_given {
                Some(MissingKey::ChildWithoutId)
            } else {
                None
            }
        }
    }
}

/// `<session>` for a session watcher, `<session>-<agent>` for a child watcher.
pub fn watcher_key(session_id: &str, agent_id: Option<&str>) -> String {
    match agent_id {
        Some(agent) => format!("{session_id}-{agent}"),
        None => session_id.to_owned(),
    }
}
