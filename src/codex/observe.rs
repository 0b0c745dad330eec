//! What a classified line means to the fold: Codex's envelope kinds and payload types made
//! into the few things the fold keeps track of (turns, tool calls, usage-limit pauses,
//! inter-agent mail; docs/behaviour.md L2). The fold applies an [`Observation`]; only this
//! file knows which Codex line says which.

use super::{Kind, LineInfo, PayloadType, RateWindow, SessionMetaInfo};

/// The `codex_error_info` of a turn that ended at its usage limit: the thread is parked until
/// the limit resets (docs/behaviour.md L5).
pub(crate) const USAGE_LIMIT: &str = "usage_limit_exceeded";

/// One well-formed, non-blank line, as the fold applies it.
#[derive(Clone, Debug, PartialEq)]
pub enum Observation<'a> {
    /// A `session_meta`: the thread's header when it is the file's first line.
    Header(&'a SessionMetaInfo),
    /// `inter_agent_communication_metadata` announces the inter-agent mail that follows;
    /// `queued` when it triggers no turn (`trigger_turn: false`, docs/behaviour.md R4.3).
    MailAnnounced { queued: bool },
    /// Model output (any `response_item`): the thread works. `mail` when it is inter-agent
    /// mail (an `agent_message`, multi-agent v2), which its announcement may have queued.
    ModelOutput {
        mail: bool,
        call: Option<CallEdge<'a>>,
    },
    /// `task_started` (or `turn_started`).
    TurnStarted { turn_id: Option<&'a str> },
    /// `task_complete` (or `turn_complete`).
    TurnCompleted {
        turn_id: Option<&'a str>,
        /// What the stop reports for the turn: the agent's last message, or Codex's own text
        /// for a usage-limit end (the "try again at ..." the user needs, R4.2) and for any
        /// failed turn where the agent said nothing.
        message: String,
        /// The turn ended at the usage limit: a pause opens.
        usage_limit: bool,
    },
    /// `turn_aborted`.
    TurnAborted { turn_id: Option<&'a str> },
    /// `token_count`: the rate-limit windows as they stand.
    RateLimits(&'a [RateWindow]),
    /// An `event_msg` `agent_message`: the agent's own text, when it is a string.
    AgentText(Option<&'a str>),
    /// Anything else: activity, and nothing more.
    Activity,
}

/// How a `response_item` moves a tool call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallEdge<'a> {
    /// A `function_call`, `custom_tool_call`, `local_shell_call` or `tool_search_call`.
    Started {
        call_id: &'a str,
        name: Option<&'a str>,
    },
    /// An output, whatever its type: a `local_shell_call` is answered by a
    /// `function_call_output`.
    Answered { call_id: &'a str },
}

/// What `info` (a well-formed line) means to the fold.
pub fn observe(info: &LineInfo) -> Observation<'_> {
    let turn_id = info.turn_id.as_deref();
    match info.kind {
        Kind::SessionMeta => info
            .meta
            .as_deref()
            .map_or(Observation::Activity, Observation::Header),
        Kind::InterAgentMetadata => Observation::MailAnnounced {
            queued: info.trigger_turn == Some(false),
        },
        Kind::ResponseItem => Observation::ModelOutput {
            mail: info.payload_type == PayloadType::AgentMessage,
            call: info.call_id.as_deref().and_then(|call_id| {
                if info.payload_type.is_call() {
                    Some(CallEdge::Started {
                        call_id,
                        name: info.name.as_deref(),
                    })
                } else if info.payload_type.is_output() {
                    Some(CallEdge::Answered { call_id })
                } else {
                    None
                }
            }),
        },
        Kind::EventMsg => match info.payload_type {
            PayloadType::TaskStarted => Observation::TurnStarted { turn_id },
            PayloadType::TaskComplete => {
                let usage_limit = info.codex_error_info.as_deref() == Some(USAGE_LIMIT);
                let agent = info.last_agent_message.clone().unwrap_or_default();
                let message = match info.error_message.as_ref().filter(|m| !m.is_empty()) {
                    Some(err) if usage_limit || agent.is_empty() => err.clone(),
                    _ => agent,
                };
                Observation::TurnCompleted {
                    turn_id,
                    message,
                    usage_limit,
                }
            }
            PayloadType::TurnAborted => Observation::TurnAborted { turn_id },
            PayloadType::TokenCount => Observation::RateLimits(&info.rate_limits),
            PayloadType::AgentMessage => Observation::AgentText(info.message.as_deref()),
            _ => Observation::Activity,
        },
        Kind::TurnContext | Kind::Compacted | Kind::Other => Observation::Activity,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codex::classify;

    fn completed(payload: &str) -> (String, bool) {
        let line =
            format!(r#"{{"type":"event_msg","payload":{{"type":"task_complete",{payload}}}}}"#);
        match observe(&classify(line.as_bytes())) {
            Observation::TurnCompleted {
                message,
                usage_limit,
                ..
            } => (message, usage_limit),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_turn_end_reports_the_agents_message_and_codexs_own_text_at_the_usage_limit() {
        let limit = r#""error":{"message":"try again at 10:45 PM","codex_error_info":"usage_limit_exceeded"}"#;
        assert_eq!(
            completed(&format!(r#""last_agent_message":"half done",{limit}"#)),
            ("try again at 10:45 PM".to_string(), true)
        );
        let failed = r#""error":{"message":"stream error","codex_error_info":"other"}"#;
        assert_eq!(
            completed(&format!(r#""last_agent_message":"done",{failed}"#)),
            ("done".to_string(), false)
        );
        assert_eq!(
            completed(&format!(r#""last_agent_message":null,{failed}"#)),
            ("stream error".to_string(), false)
        );
    }

    #[test]
    fn an_output_answers_a_call_whatever_its_type_and_mail_is_model_output() {
        let item = |payload: &str| {
            let line = format!(r#"{{"type":"response_item","payload":{payload}}}"#);
            classify(line.as_bytes())
        };
        let call = item(r#"{"type":"local_shell_call","call_id":"c1","name":"shell"}"#);
        assert_eq!(
            observe(&call),
            Observation::ModelOutput {
                mail: false,
                call: Some(CallEdge::Started {
                    call_id: "c1",
                    name: Some("shell")
                })
            }
        );
        let output = item(r#"{"type":"function_call_output","call_id":"c1"}"#);
        assert_eq!(
            observe(&output),
            Observation::ModelOutput {
                mail: false,
                call: Some(CallEdge::Answered { call_id: "c1" })
            }
        );
        let mail = item(r#"{"type":"agent_message","message":"hi"}"#);
        assert_eq!(
            observe(&mail),
            Observation::ModelOutput {
                mail: true,
                call: None
            }
        );
    }
}
