//! The table of request methods: every name is unique, maps back to its method, and is the name
//! serde writes and reads for that method; each [`Call`] marker agrees with the table.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::collections::HashSet;

use outboard_shared::*;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

/// Valid params for each method. The match is exhaustive, so a new method does not compile here
/// until it has an example, and then it is checked like the others.
fn sample_params(kind: MethodKind) -> Value {
    let sid = "s_0123456789abcdef0123456789abcdef";
    match kind {
        MethodKind::SessionCreate => json!({
            "title": "t",
            "source": {"type": "repo", "url": "https://git.example/acme/app.git", "ref": "main"}
        }),
        MethodKind::SessionList => json!({"limit": 5}),
        MethodKind::SessionAttach => json!({"session_id": sid, "role": "watcher", "after_seq": 3}),
        MethodKind::SessionHistory => json!({"session_id": sid, "before": 501, "limit": 100}),
        MethodKind::SessionDetach
        | MethodKind::TurnInterrupt
        | MethodKind::SessionDriveRequest
        | MethodKind::SessionDriveTake
        | MethodKind::SessionDelete
        | MethodKind::SessionRestore => json!({"session_id": sid}),
        MethodKind::SessionPush => json!({"session_id": sid, "branch": "outboard/fix"}),
        MethodKind::TurnSend => json!({"session_id": sid, "text": "hi"}),
        MethodKind::Ping | MethodKind::SkillsList | MethodKind::AgentsList => json!({}),
        MethodKind::SessionDriveGrant => json!({"session_id": sid, "user": "bob"}),
        MethodKind::FilesList => json!({"path": "/memory", "include_deleted": true}),
        MethodKind::FilesRead => json!({"path": "/memory/a.md", "version": 2}),
        MethodKind::FilesHistory => json!({"path": "/memory/a.md"}),
        MethodKind::FilesWrite => {
            json!({"path": "/memory/a.md", "content": "x", "base_version": 1})
        }
        MethodKind::FilesDelete => json!({"path": "/memory/a.md", "base_version": 1}),
        MethodKind::FilesRestore => json!({"path": "/memory/a.md", "version": 1}),
        MethodKind::SkillsImport => {
            json!({"files": [{"path": "deploy/SKILL.md", "content": "---\nname: deploy\n---\n"}]})
        }
        MethodKind::AgentsImport => {
            json!({"files": [{"path": "reviewer.md", "content": "---\nname: reviewer\n---\n"}]})
        }
        MethodKind::UsageReport => json!({"session_id": sid, "by": "user", "since": "2026-01-01"}),
        MethodKind::SessionCompact => json!({"session_id": sid, "focus": "the failing test"}),
        MethodKind::SessionKillTask => json!({"session_id": sid, "shell_id": "bash_1f2e3d4c"}),
        MethodKind::ApprovalAnswer => json!({
            "session_id": sid, "call_id": "toolu_01", "decision": "deny", "scope": "once",
            "reason": "not on a Friday"
        }),
        MethodKind::ModelsList => json!({}),
        MethodKind::SessionSetModel => json!({"session_id": sid, "model": "haiku"}),
        MethodKind::SessionSetMode => json!({"session_id": sid, "mode": "plan"}),
        MethodKind::SessionCheckpoints => json!({"session_id": sid}),
        MethodKind::SessionRewind => {
            json!({"session_id": sid, "checkpoint": 2, "code": true, "conversation": false})
        }
        MethodKind::SessionFork => json!({"session_id": sid, "checkpoint": 3}),
    }
}

#[test]
fn names_are_unique_and_in_table_order() {
    let unique: HashSet<&str> = Method::NAMES.iter().copied().collect();
    assert_eq!(unique.len(), Method::NAMES.len(), "duplicate method name in {:?}", Method::NAMES);
    assert_eq!(Method::NAMES.len(), MethodKind::ALL.len());
    for (name, kind) in Method::NAMES.iter().zip(MethodKind::ALL) {
        assert_eq!(*name, kind.name());
    }
}

#[test]
fn names_round_trip_through_the_table() {
    for kind in MethodKind::ALL {
        assert_eq!(MethodKind::from_name(kind.name()), Some(*kind), "{kind:?}");
    }
    assert_eq!(MethodKind::from_name("session/teleport"), None);
    assert_eq!(MethodKind::from_name(""), None);
}

#[test]
fn every_name_is_what_serde_writes_and_reads() {
    for kind in MethodKind::ALL {
        let wire = json!({"method": kind.name(), "params": sample_params(*kind)});
        let method: Method = serde_json::from_value(wire.clone())
            .unwrap_or_else(|e| panic!("{} does not decode: {e}", kind.name()));
        assert_eq!(method.kind(), *kind);
        assert_eq!(method.name(), kind.name());
        assert_eq!(serde_json::to_value(&method).unwrap(), wire, "{} re-encodes", kind.name());
    }
}

fn marker_agrees<C: Call>(params: C::Params) {
    assert_eq!(C::NAME, C::KIND.name());
    let method = C::method(params);
    assert_eq!(method.kind(), C::KIND);
    assert_eq!(method.name(), C::NAME);
}

#[test]
fn call_markers_agree_with_the_table() {
    let sid = || SessionId("s_1".into());
    marker_agrees::<methods::SessionCreate>(SessionCreateParams::default());
    marker_agrees::<methods::SessionAttach>(SessionAttachParams {
        session_id: sid(),
        role: Role::Driver,
        after_seq: None,
    });
    marker_agrees::<methods::TurnSend>(TurnSendParams {
        session_id: sid(),
        text: "x".into(),
        images: Vec::new(),
    });
    marker_agrees::<methods::Ping>(Empty {});
    marker_agrees::<methods::SkillsList>(Empty {});
    marker_agrees::<methods::AgentsList>(Empty {});
    marker_agrees::<methods::FilesRestore>(FilesRestoreParams {
        path: "/memory/a".into(),
        version: 1,
    });
}
