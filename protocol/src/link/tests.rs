//! Every link message round-trips through its JSON, and what is not a
//! message of the link is refused.

use super::*;
use crate::testing::round_trip;

#[test]
fn client_messages_round_trip() {
    round_trip(
        ClientMessage::Hello {
            protocol_version: 1,
            features: vec!["resumable-sessions".into()],
            run_capacity: None,
            manifest: None,
        },
        r#"{"type":"hello","protocol_version":1,"features":["resumable-sessions"]}"#,
    );
    round_trip(
        ClientMessage::Hello {
            protocol_version: 1,
            features: vec![],
            run_capacity: Some(2),
            manifest: None,
        },
        r#"{"type":"hello","protocol_version":1,"features":[],"run_capacity":2}"#,
    );
    round_trip(
        ClientMessage::Hello {
            protocol_version: 1,
            features: vec![],
            run_capacity: None,
            manifest: Some(crate::sessions::Manifest { planning: true }),
        },
        r#"{"type":"hello","protocol_version":1,"features":[],"manifest":{"planning":true}}"#,
    );
    round_trip(
        ClientMessage::Run {
            session: "s".into(),
            run: "deploy".into(),
            name: "Deploy".into(),
            status: RunStatus::Running,
            attempt: Some(2),
        },
        r#"{"type":"run","session":"s","run":"deploy","name":"Deploy","status":"running","attempt":2}"#,
    );
    round_trip(
        ClientMessage::HeartbeatAck { seq: 3 },
        r#"{"type":"heartbeat-ack","seq":3}"#,
    );
    round_trip(ClientMessage::Detach {}, r#"{"type":"detach"}"#);
    round_trip(
        ClientMessage::ToolCall {
            session: "s".into(),
            turn: "t".into(),
            call_id: "c1".into(),
            name: "read_document".into(),
            arguments: serde_json::json!({}),
        },
        r#"{"type":"tool-call","session":"s","turn":"t","call_id":"c1","name":"read_document","arguments":{}}"#,
    );
    round_trip(
        ClientMessage::Reply {
            session: "s".into(),
            turn: "t".into(),
            text: "Done.".into(),
        },
        r#"{"type":"reply","session":"s","turn":"t","text":"Done."}"#,
    );
}

#[test]
fn server_messages_round_trip() {
    round_trip(
        ServerMessage::Invoke {
            session: "s1".into(),
            turn: "t2".into(),
            document: "d1".into(),
            messages: vec![],
            repair: vec![],
            plan: Some(Box::new(crate::sessions::PlanView {
                revision: 1,
                turn_id: "t1".into(),
                call_id: "c1".into(),
                explanation: None,
                steps: vec![],
            })),
        },
        r#"{"type":"invoke","session":"s1","turn":"t2","document":"d1","messages":[],"plan":{"revision":1,"turn_id":"t1","call_id":"c1","steps":[]}}"#,
    );
    round_trip(
        ServerMessage::Welcome {
            protocol_version: 1,
            machine: "laptop".into(),
            capabilities: Capabilities {
                durable_plans: false,
                features: vec![],
            },
        },
        r#"{"type":"welcome","protocol_version":1,"machine":"laptop","capabilities":{"durable_plans":false,"features":[]}}"#,
    );
    round_trip(
        ServerMessage::Heartbeat { seq: 9 },
        r#"{"type":"heartbeat","seq":9}"#,
    );
    round_trip(
        ServerMessage::Credential {
            credential: "mgm_abc".into(),
            expires_at: 1_764_400_900_000,
        },
        r#"{"type":"credential","credential":"mgm_abc","expires_at":1764400900000}"#,
    );
    round_trip(
        ServerMessage::Refusal {
            code: crate::RefusalCode::UnknownMessage,
            message: "m".into(),
            call_id: None,
            session: None,
            turn: None,
            run: None,
        },
        r#"{"type":"refusal","code":"unknown_message","message":"m"}"#,
    );
    round_trip(
        ServerMessage::Refusal {
            code: crate::RefusalCode::UnknownTurn,
            message: "m".into(),
            call_id: Some("c1".into()),
            session: None,
            turn: None,
            run: None,
        },
        r#"{"type":"refusal","code":"unknown_turn","message":"m","call_id":"c1"}"#,
    );
    round_trip(
        ServerMessage::Refusal {
            code: crate::RefusalCode::UnknownTurn,
            message: "m".into(),
            call_id: None,
            session: None,
            turn: None,
            run: None,
        }
        .answering_reply("s", "t1"),
        r#"{"type":"refusal","code":"unknown_turn","message":"m","session":"s","turn":"t1"}"#,
    );
    round_trip(
        ServerMessage::ReplyReceived {
            session: "s".into(),
            turn: "t1".into(),
        },
        r#"{"type":"reply-received","session":"s","turn":"t1"}"#,
    );
    round_trip(
        ServerMessage::RunReceived {
            session: "s".into(),
            run: "deploy".into(),
            attempt: 2,
            status: RunStatus::Completed,
        },
        r#"{"type":"run-received","session":"s","run":"deploy","attempt":2,"status":"completed"}"#,
    );
}

#[test]
fn resume_messages_round_trip() {
    round_trip(
        ClientMessage::Resume {
            sessions: vec![
                HeldSession {
                    session: "s".into(),
                    questions: vec!["q1".into()],
                    turn: None,
                    calls: vec![],
                },
                HeldSession {
                    session: "s2".into(),
                    questions: vec![],
                    turn: Some("t3".into()),
                    calls: vec!["c7".into()],
                },
            ],
        },
        r#"{"type":"resume","sessions":[{"session":"s","questions":["q1"]},{"session":"s2","questions":[],"turn":"t3","calls":["c7"]}]}"#,
    );
    round_trip(
        ClientMessage::InputReceived {
            session: "s".into(),
            request: "q1".into(),
        },
        r#"{"type":"input-received","session":"s","request":"q1"}"#,
    );
    round_trip(
        ServerMessage::StopWithdrawn {
            session: "s".into(),
        },
        r#"{"type":"stop-withdrawn","session":"s"}"#,
    );
    round_trip(
        ServerMessage::Resumed {
            sessions: vec![ResumedSession {
                session: "s".into(),
                document: "d".into(),
                withdrawn: vec!["q2".into()],
            }],
            ended: vec!["old".into()],
        },
        r#"{"type":"resumed","sessions":[{"session":"s","document":"d","withdrawn":["q2"]}],"ended":["old"]}"#,
    );
}

#[test]
fn machine_bodies_round_trip() {
    round_trip(
        PairMachine {
            name: "laptop".into(),
        },
        r#"{"name":"laptop"}"#,
    );
    round_trip(
        PairedMachine {
            machine: MachineInfo {
                id: "m1".into(),
                name: "laptop".into(),
                revoked: false,
            },
            credential: "mgm_x".into(),
            expires_at: 900_000,
        },
        r#"{"machine":{"id":"m1","name":"laptop","revoked":false},"credential":"mgm_x","expires_at":900000}"#,
    );
}

#[test]
fn planner_views_round_trip() {
    round_trip(
        PlannerView {
            state: PlannerState::Unlinked,
            connected: false,
            disconnected: false,
            machine: None,
            session: None,
            replying: false,
            stop_pending: false,
            questions: 0,
            runs: Vec::new(),
        },
        r#"{"state":"unlinked","connected":false,"disconnected":false,"replying":false,"stop_pending":false,"questions":0,"runs":[]}"#,
    );
    round_trip(
        PlannerView {
            state: PlannerState::Disconnected,
            connected: false,
            disconnected: true,
            machine: Some("laptop".into()),
            session: Some("s1".into()),
            replying: true,
            stop_pending: true,
            questions: 1,
            runs: vec![RunView {
                run: "r1".into(),
                name: "Build".into(),
                status: RunStatus::Running,
                age_ms: 60_000,
                started_at: 1_000,
                ended_at: None,
                disconnected: true,
            }],
        },
        r#"{"state":"disconnected","connected":false,"disconnected":true,"machine":"laptop","session":"s1","replying":true,"stop_pending":true,"questions":1,"runs":[{"run":"r1","name":"Build","status":"running","age_ms":60000,"started_at":1000,"disconnected":true}]}"#,
    );
}

#[test]
fn client_message_types_name_every_variant() {
    let one_of_each = [
        r#"{"type":"hello","protocol_version":1}"#,
        r#"{"type":"heartbeat-ack","seq":1}"#,
        r#"{"type":"detach"}"#,
        r#"{"type":"tool-call","session":"s","turn":"t","call_id":"c","name":"n"}"#,
        r#"{"type":"run","session":"s","run":"r","name":"n","status":"running"}"#,
        r#"{"type":"stopped","session":"s"}"#,
        r#"{"type":"resume","sessions":[]}"#,
        r#"{"type":"input-received","session":"s","request":"q"}"#,
        r#"{"type":"reply","session":"s","turn":"t","text":"x"}"#,
    ];
    for (json, kind) in one_of_each.iter().zip(CLIENT_MESSAGE_TYPES) {
        let message: ClientMessage = serde_json::from_str(json).unwrap();
        let back = serde_json::to_value(&message).unwrap();
        assert_eq!(back["type"], kind);
    }
    // A variant added without listing its type fails to match here.
    let count = |m: &ClientMessage| match m {
        ClientMessage::Hello { .. }
        | ClientMessage::HeartbeatAck { .. }
        | ClientMessage::Detach {}
        | ClientMessage::ToolCall { .. }
        | ClientMessage::Run { .. }
        | ClientMessage::Stopped { .. }
        | ClientMessage::Resume { .. }
        | ClientMessage::InputReceived { .. }
        | ClientMessage::Reply { .. } => CLIENT_MESSAGE_TYPES.len(),
    };
    assert_eq!(count(&ClientMessage::Detach {}), one_of_each.len());
}

#[test]
fn unknown_types_and_fields_are_refused() {
    assert!(serde_json::from_str::<ClientMessage>(r#"{"type":"shout"}"#).is_err());
    assert!(serde_json::from_str::<ClientMessage>(r#"{"type":"detach","now":true}"#).is_err());
    assert!(serde_json::from_str::<ClientMessage>(r#"{"protocol_version":1}"#).is_err());
}
