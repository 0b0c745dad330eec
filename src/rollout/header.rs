//! The rollout's identity: who this file belongs to and which role its watcher plays.
//!
//! The **first** `session_meta` line is the file's identity; later ones (a fork copying its
//! parent's history, or a metadata update) never change it.

use super::SessionMetaInfo;

/// Which kind of watcher a rollout needs (`spec/lifecycle.md` section 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A sub-agent: posts `subagent-stop`, never session-end.
    Child,
    /// Any other thread: posts session-end on idle or when its parent process exits.
    Session,
}

impl Role {
    pub fn as_str(self) -> &'static str {
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
}

/// Ids are accepted with or without dashes and always sent without.
pub fn normalize_id(id: &str) -> String {
    id.trim().chars().filter(|c| *c != '-').collect()
}

fn non_empty(s: &Option<String>) -> Option<&str> {
    s.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

impl Identity {
    /// Identity of a file with no readable `session_meta`: a session with unknown ids.
    pub fn unknown() -> Identity {
        Identity {
            role: Role::Session,
            session_id: None,
            agent_id: None,
            parent_thread_id: None,
            agent_type: None,
            cwd: None,
        }
    }

    /// Derives the identity from the first `session_meta` payload.
    pub fn from_meta(meta: &SessionMetaInfo) -> Identity {
        let is_child =
            meta.thread_source.as_deref() == Some("subagent") || meta.has_subagent_source;
        let id = non_empty(&meta.id).map(normalize_id);
        let cwd = meta.cwd.clone();
        if !is_child {
            return Identity {
                role: Role::Session,
                session_id: id,
                agent_id: None,
                parent_thread_id: None,
                agent_type: None,
                cwd,
            };
        }
        let parent = non_empty(&meta.parent_thread_id)
            .or_else(|| non_empty(&meta.spawn_parent_thread_id))
            .map(normalize_id);
        // `session_id` names the root tree only when it differs from the child's own id;
        // child files written before mid-2026 have none, and their parent stands in for it.
        let session_id = non_empty(&meta.session_id)
            .map(normalize_id)
            .filter(|s| Some(s) != id.as_ref())
            .or_else(|| parent.clone());
        let agent_type = agent_type(meta);
        Identity {
            role: Role::Child,
            session_id,
            agent_id: id,
            parent_thread_id: parent,
            agent_type: Some(agent_type),
            cwd,
        }
    }
}

/// `agent_type` as the kcap server expects it (`spec/server-api.md` section 3).
pub fn agent_type(meta: &SessionMetaInfo) -> String {
    if let Some(path) = non_empty(&meta.agent_path)
        && let Some(last) = path.rsplit('/').find(|seg| !seg.is_empty())
    {
        return last.to_string();
    }
    if let Some(nick) = non_empty(&meta.agent_nickname) {
        return nick.to_string();
    }
    "subagent".to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> SessionMetaInfo {
        SessionMetaInfo {
            id: Some("019fa981-6ea2-7000-a000-000000000002".into()),
            session_id: Some("019fa981-2dca-7000-a000-000000000001".into()),
            parent_thread_id: Some("019fa981-2dca-7000-a000-000000000001".into()),
            thread_source: Some("subagent".into()),
            agent_nickname: Some("Hypatia".into()),
            agent_role: Some("worker".into()),
            ..Default::default()
        }
    }

    #[test]
    fn child_takes_parent_session_and_own_id_without_dashes() {
        let id = Identity::from_meta(&meta());
        assert_eq!(id.role, Role::Child);
        assert_eq!(
            id.session_id.as_deref(),
            Some("019fa9812dca7000a000000000000001")
        );
        assert_eq!(
            id.agent_id.as_deref(),
            Some("019fa9816ea27000a000000000000002")
        );
        assert_eq!(id.agent_type.as_deref(), Some("Hypatia"));
    }

    #[test]
    fn old_child_files_name_the_parent_only_under_thread_spawn() {
        let m = SessionMetaInfo {
            id: Some("c-1".into()),
            has_subagent_source: true,
            spawn_parent_thread_id: Some("p-1".into()),
            ..Default::default()
        };
        let id = Identity::from_meta(&m);
        assert_eq!(id.role, Role::Child);
        assert_eq!(id.session_id.as_deref(), Some("p1"));
        assert_eq!(id.agent_id.as_deref(), Some("c1"));
        assert_eq!(id.agent_type.as_deref(), Some("subagent"));
    }

    #[test]
    fn session_id_equal_to_own_id_falls_back_to_parent() {
        let mut m = meta();
        m.session_id = m.id.clone();
        assert_eq!(
            Identity::from_meta(&m).session_id.as_deref(),
            Some("019fa9812dca7000a000000000000001")
        );
    }

    #[test]
    fn agent_type_prefers_last_path_segment_and_ignores_role() {
        let mut m = meta();
        m.agent_path = Some("/root/spec_quality".into());
        assert_eq!(agent_type(&m), "spec_quality");
        m.agent_path = None;
        m.agent_nickname = None;
        assert_eq!(agent_type(&m), "subagent");
    }

    #[test]
    fn a_plain_thread_is_a_session_keyed_by_its_own_id() {
        let m = SessionMetaInfo {
            id: Some("0199-aa".into()),
            ..Default::default()
        };
        let id = Identity::from_meta(&m);
        assert_eq!(id.role, Role::Session);
        assert_eq!(id.session_id.as_deref(), Some("0199aa"));
        assert_eq!(id.agent_id, None);
    }
}
