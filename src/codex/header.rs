//! The rollout's identity: who this file belongs to and which role its watcher plays.
//!
//! The **first** `session_meta` line is the file's identity; later ones (a fork copying its
//! parent's history, or a metadata update) never change it.

use super::SessionMetaInfo;

// kcap's key vocabulary lives in `crate::key`; the names stay reachable here for the callers
// that read a header and its identity together.
pub(crate) use crate::key::normalize_id;
pub use crate::key::{Identity, MissingKey, Role, missing_key};

fn non_empty(s: &Option<String>) -> Option<&str> {
    s.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

impl Identity {
    /// Identity of a file with no readable `session_meta`: a session with unknown ids.
    pub(crate) fn unknown() -> Identity {
        Identity {
            role: Role::Session,
            session_id: None,
            agent_id: None,
            parent_thread_id: None,
            agent_type: None,
            cwd: None,
            subagent_kind: None,
        }
    }

    /// Derives the identity from the first `session_meta` payload.
    pub(crate) fn from_meta(meta: &SessionMetaInfo) -> Identity {
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
                subagent_kind: None,
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
            subagent_kind: meta.subagent_kind.clone(),
        }
    }
}

/// `agent_type` as the kcap server expects it (docs/behaviour.md A3). Older and
/// grandchild headers name the child only under `source.subagent.thread_spawn`, so those
/// fields stand in for missing top-level ones.
pub(crate) fn agent_type(meta: &SessionMetaInfo) -> String {
    for path in [&meta.agent_path, &meta.spawn_agent_path] {
        if let Some(path) = non_empty(path)
            && let Some(last) = path.rsplit('/').find(|seg| !seg.is_empty())
        {
            return last.to_string();
        }
    }
    for nick in [&meta.agent_nickname, &meta.spawn_agent_nickname] {
        if let Some(nick) = non_empty(nick) {
            return nick.to_string();
        }
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
    fn a_review_child_without_a_parent_is_a_child_that_needs_a_session_id() {
        let m = SessionMetaInfo {
            id: Some("019fb0c1-0000-7000-8000-00000000r001".into()),
            has_subagent_source: true,
            subagent_kind: Some("review".into()),
            ..Default::default()
        };
        let id = Identity::from_meta(&m);
        assert_eq!(id.role, Role::Child);
        assert_eq!(id.session_id, None);
        let gap = missing_key(Some(&id), false, false).expect("no key without a parent");
        assert_eq!(
            gap,
            MissingKey::ChildWithoutParent {
                subagent: Some("review".into())
            }
        );
        assert!(!gap.may_resolve_itself(), "the first session_meta is final");
        let msg = gap.message(std::path::Path::new("/r.jsonl"));
        assert!(msg.contains("sub-agent (review)"), "{msg}");
        assert!(msg.contains("names no parent"), "{msg}");
        assert!(!msg.contains("no readable session_meta"), "{msg}");
        assert_eq!(missing_key(Some(&id), true, false), None);
    }

    #[test]
    fn a_missing_header_may_still_arrive() {
        assert_eq!(missing_key(None, false, false), Some(MissingKey::NoHeader));
        assert!(MissingKey::NoHeader.may_resolve_itself());
        assert_eq!(missing_key(None, true, false), None);
    }

    #[test]
    fn grandchild_headers_name_their_parent_and_type_under_thread_spawn() {
        let m = SessionMetaInfo {
            id: Some("g-1".into()),
            has_subagent_source: true,
            subagent_kind: Some("thread_spawn".into()),
            spawn_parent_thread_id: Some("c-1".into()),
            spawn_agent_path: Some("/root/worker/linter".into()),
            ..Default::default()
        };
        let id = Identity::from_meta(&m);
        assert_eq!(id.parent_thread_id.as_deref(), Some("c1"));
        assert_eq!(id.agent_type.as_deref(), Some("linter"));
        assert_eq!(missing_key(Some(&id), false, false), None);
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
