//! Golden JSON for every message of protocol v1. A change to the wire changes a snapshot in
//! `tests/snapshots/` and fails here with a diff; accept it only with a matching
//! `docs/PROTOCOL.md` change. Each example also round-trips, so the snapshot is decodable.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use outboard_shared::headless::{Reconnected, RunFinished, RunStarted, SCHEMA_VERSION};
use outboard_shared::*;
use pretty_assertions::assert_eq;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::json;

fn roundtrip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(
    value: &T,
) -> serde_json::Value {
    let text = serde_json::to_string(value).unwrap();
    let back: T = serde_json::from_str(&text).unwrap();
    assert_eq!(&back, value);
    serde_json::from_str(&text).unwrap()
}

fn sid() -> SessionId {
    SessionId("s_0123456789abcdef0123456789abcdef".into())
}

fn event(seq: u64, kind: EventKind) -> SessionEvent {
    SessionEvent {
        session_id: sid(),
        seq,
        ts: "2026-11-29T07:18:16.123Z".into(),
        kind,
        parent: None,
    }
}

fn info() -> SessionInfo {
    SessionInfo {
        id: sid(),
        title: "Fix the flaky test".into(),
        owner_id: UserId("u_1".into()),
        owner: "alice".into(),
        status: SessionStatus::Running,
        model: "anthropic/claude-sonnet-4-5".into(),
        model_name: Some("sonnet".into()),
        last_seq: 7,
        created_at: "2026-11-29T07:00:00.000Z".into(),
        updated_at: "2026-11-29T07:18:16.123Z".into(),
        failure: None,
        workspace: None,
        source: Some(SessionSource::Repo {
            url: "https://git.example/acme/app.git".into(),
            git_ref: "main".into(),
            commit: "0123456789abcdef0123456789abcdef01234567".into(),
        }),
        network: SessionNetwork::Org,
        attached: Vec::new(),
        usage: None,
        context_window: Some(128_000),
        context_window_source: Some(WindowSource::ProviderDefault),
        context_window_from: Some("a guess".into()),
        todos: Some(TodoProgress { done: 1, total: 3 }),
    }
}

fn request(id: u64, method: Method) -> ClientFrame {
    ClientFrame::Request(Request { id: RequestId(id), method })
}

#[test]
fn client_frames() {
    insta::assert_json_snapshot!(
        "hello",
        roundtrip(&ClientFrame::Hello(Hello {
            protocol_version: PROTOCOL_VERSION,
            token: "ob_token".into(),
            client: "outboard-cli/0.1.0".into(),
        }))
    );
    insta::assert_json_snapshot!(
        "session_create",
        roundtrip(&request(
            1,
            Method::SessionCreate(SessionCreateParams {
                title: Some("t".into()),
                workspace: Some("/home/alice/project".into()),
                source: None,
                network: SessionNetwork::Org,
                context_window: None,
                model: Some("sonnet".into()),
            })
        ))
    );
    insta::assert_json_snapshot!(
        "session_create_repo",
        roundtrip(&request(
            1,
            Method::SessionCreate(SessionCreateParams {
                title: None,
                workspace: None,
                source: Some(SourceSpec::Repo {
                    url: "https://git.example/acme/app.git".into(),
                    git_ref: Some("v1.2".into()),
                }),
                network: SessionNetwork::None,
                context_window: Some(16_000),
                model: None,
            })
        ))
    );
    insta::assert_json_snapshot!(
        "session_push",
        roundtrip(&request(
            3,
            Method::SessionPush(SessionPushParams {
                session_id: SessionId::from("s_1"),
                branch: Some("outboard/fix".into()),
                author: Some("Alice Liddell <alice@example.com>".into()),
            })
        ))
    );
    insta::assert_json_snapshot!(
        "session_list",
        roundtrip(&request(2, Method::SessionList(SessionListParams { limit: Some(20) })))
    );
    insta::assert_json_snapshot!(
        "session_attach",
        roundtrip(&request(
            3,
            Method::SessionAttach(SessionAttachParams {
                session_id: sid(),
                role: Role::Driver,
                after_seq: Some(4)
            })
        ))
    );
    insta::assert_json_snapshot!(
        "session_detach",
        roundtrip(&request(4, Method::SessionDetach(SessionRef { session_id: sid() })))
    );
    insta::assert_json_snapshot!(
        "turn_send",
        roundtrip(&request(
            5,
            Method::TurnSend(TurnSendParams {
                session_id: sid(),
                text: "hello".into(),
                images: Vec::new(),
            })
        ))
    );
    insta::assert_json_snapshot!(
        "turn_interrupt",
        roundtrip(&request(6, Method::TurnInterrupt(SessionRef { session_id: sid() })))
    );
    insta::assert_json_snapshot!("ping", roundtrip(&request(7, Method::Ping(Empty {}))));
    insta::assert_json_snapshot!(
        "usage_report",
        roundtrip(&request(
            8,
            Method::UsageReport(UsageReportParams {
                session_id: None,
                by: UsageGroup::Day,
                since: Some("2026-11-01".into()),
            })
        ))
    );
    insta::assert_json_snapshot!(
        "session_compact",
        roundtrip(&request(
            8,
            Method::SessionCompact(SessionCompactParams {
                session_id: sid(),
                focus: Some("the failing test".into()),
            })
        ))
    );
    insta::assert_json_snapshot!(
        "session_drive_request",
        roundtrip(&request(8, Method::SessionDriveRequest(SessionRef { session_id: sid() })))
    );
    insta::assert_json_snapshot!(
        "session_drive_grant",
        roundtrip(&request(
            9,
            Method::SessionDriveGrant(DriveGrantParams { session_id: sid(), user: "bob".into() })
        ))
    );
    insta::assert_json_snapshot!(
        "session_drive_take",
        roundtrip(&request(10, Method::SessionDriveTake(SessionRef { session_id: sid() })))
    );
}

#[test]
fn org_file_requests() {
    insta::assert_json_snapshot!(
        "files_list",
        roundtrip(&request(
            11,
            Method::FilesList(FilesListParams { path: "/memory".into(), include_deleted: true })
        ))
    );
    insta::assert_json_snapshot!(
        "files_read",
        roundtrip(&request(
            12,
            Method::FilesRead(FilesReadParams {
                path: "/memory/deploys.md".into(),
                version: Some(2)
            })
        ))
    );
    insta::assert_json_snapshot!(
        "files_history",
        roundtrip(&request(
            13,
            Method::FilesHistory(FilesHistoryParams { path: "/memory/deploys.md".into() })
        ))
    );
    insta::assert_json_snapshot!(
        "files_write",
        roundtrip(&request(
            14,
            Method::FilesWrite(FilesWriteParams {
                path: "/memory/MEMORY.md".into(),
                content: "# Memory\n- deploys: see deploys.md\n".into(),
                base_version: Some(0),
            })
        ))
    );
    insta::assert_json_snapshot!(
        "files_delete",
        roundtrip(&request(
            15,
            Method::FilesDelete(FilesDeleteParams {
                path: "/memory/deploys.md".into(),
                base_version: Some(3),
            })
        ))
    );
    insta::assert_json_snapshot!(
        "files_restore",
        roundtrip(&request(
            16,
            Method::FilesRestore(FilesRestoreParams {
                path: "/memory/deploys.md".into(),
                version: 2
            })
        ))
    );
    insta::assert_json_snapshot!(
        "skills_list",
        roundtrip(&request(17, Method::SkillsList(Empty {})))
    );
    insta::assert_json_snapshot!(
        "skills_import",
        roundtrip(&request(
            18,
            Method::SkillsImport(SkillsImportParams {
                files: vec![
                    ImportFile {
                        path: "deploy/SKILL.md".into(),
                        content: "---\nname: deploy\ndescription: Ship a release\n---\nSteps…\n"
                            .into(),
                    },
                    ImportFile {
                        path: "deploy/scripts/run.sh".into(),
                        content: "#!/bin/sh\nmake release\n".into(),
                    },
                ],
            })
        ))
    );
    insta::assert_json_snapshot!(
        "agents_list",
        roundtrip(&request(19, Method::AgentsList(Empty {})))
    );
    insta::assert_json_snapshot!(
        "agents_import",
        roundtrip(&request(
            20,
            Method::AgentsImport(AgentsImportParams {
                files: vec![ImportFile {
                    path: "reviewer.md".into(),
                    content: "---\nname: reviewer\ndescription: Reviews diffs\ntools: Read, Grep\n---\nYou review.\n"
                        .into(),
                }],
            })
        ))
    );
}

#[test]
fn server_frames() {
    insta::assert_json_snapshot!(
        "welcome",
        roundtrip(&ServerFrame::Welcome(Welcome {
            protocol_version: 1,
            server: "outboard-server/0.1.0".into(),
            user: UserInfo {
                id: UserId("u_1".into()),
                name: "alice".into(),
                org_id: OrgId("o_1".into()),
                org: "acme".into(),
            },
            connection_id: 12,
        }))
    );
    insta::assert_json_snapshot!(
        "response_ok",
        roundtrip(&ServerFrame::Response(Response::ok(
            RequestId(1),
            &SessionCreateResponse { session: info() }
        )))
    );
    insta::assert_json_snapshot!(
        "response_error",
        roundtrip(&ServerFrame::Response(Response::err(
            RequestId(5),
            ErrorBody::new(ErrorCode::Forbidden, "you are watching this session")
        )))
    );
    insta::assert_json_snapshot!(
        "connection_error",
        roundtrip(&ServerFrame::Error(ConnectionError {
            error: ErrorBody::new(ErrorCode::Unauthorized, "the token is not valid"),
            fatal: true,
        }))
    );
    insta::assert_json_snapshot!(
        "event_frame",
        roundtrip(&ServerFrame::Event(EventFrame {
            event: event(3, EventKind::AssistantDelta { text: "Hel".into() })
        }))
    );
    insta::assert_json_snapshot!(
        "progress_frame",
        roundtrip(&ServerFrame::Progress(ProgressFrame {
            request_id: RequestId(4),
            phase: "receiving".into(),
            done: 4500,
            total: Some(10000),
            message: "Receiving objects:  45% (4500/10000), 40.10 MiB".into(),
        }))
    );
}

#[test]
fn responses() {
    insta::assert_json_snapshot!(
        "session_push_response",
        roundtrip(&SessionPushResponse {
            branch: "outboard/s_1234ab".into(),
            commit: "0123456789abcdef0123456789abcdef01234567".into(),
            url: "https://git.example/acme/app.git".into(),
            created: true,
        })
    );
    insta::assert_json_snapshot!(
        "upload_response",
        roundtrip(&UploadResponse { upload_id: "up_1".into(), bytes: 1024 })
    );
    insta::assert_json_snapshot!(
        "session_list_response",
        roundtrip(&SessionListResponse {
            sessions: vec![SessionInfo {
                usage: Some(Usage {
                    input_tokens: 48_000,
                    output_tokens: 900,
                    cache_read_tokens: 41_000,
                    cache_write_tokens: 5_200,
                }),
                context_window: Some(200_000),
                ..info()
            }]
        })
    );
    insta::assert_json_snapshot!(
        "session_compact_response",
        roundtrip(&SessionCompactResponse {
            seq: 418,
            tokens_before: 161_204,
            tokens_after: 38_950
        })
    );
    insta::assert_json_snapshot!(
        "usage_report_response",
        roundtrip(&UsageReportResponse {
            rows: vec![UsageRow {
                key: "2026-11-29".into(),
                model: "anthropic/claude-sonnet-4-5".into(),
                calls: 12,
                usage: Usage {
                    input_tokens: 48_000,
                    output_tokens: 900,
                    cache_read_tokens: 41_000,
                    cache_write_tokens: 5_200,
                },
            }]
        })
    );
    insta::assert_json_snapshot!(
        "session_attach_response",
        roundtrip(&SessionAttachResponse {
            session: info(),
            role: Role::Watcher,
            events: vec![event(
                1,
                EventKind::UserMessage { text: "hi".into(), attachments: Vec::new() }
            )],
            in_flight: Some(InFlight {
                assistant_text: "Let me".into(),
                tool_output: vec![ToolOutputSoFar {
                    call_id: "c1".into(),
                    text: "building…\n".into()
                }],
            }),
            has_more: true,
            cursor: Some(1),
            standing: Vec::new(),
        })
    );
    insta::assert_json_snapshot!(
        "session_history_response",
        roundtrip(&SessionHistoryResponse {
            events: vec![event(
                1,
                EventKind::UserMessage { text: "hi".into(), attachments: Vec::new() }
            )],
            has_more: false,
            cursor: 1,
        })
    );
    insta::assert_json_snapshot!(
        "turn_send_response",
        roundtrip(&TurnSendResponse { turn_id: TurnId("t_1".into()), seq: 2 })
    );
    insta::assert_json_snapshot!(
        "turn_interrupt_response",
        roundtrip(&TurnInterruptResponse { interrupted: true })
    );
}

fn version(path: &str, version: u64, op: FileOp) -> FileVersion {
    FileVersion {
        path: path.into(),
        version,
        op,
        size: 42,
        sha256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".into(),
        author: "alice".into(),
        session: Some(sid()),
        at: "2026-11-29T07:18:16.123Z".into(),
        deleted: false,
        restored_from: None,
    }
}

fn tombstone(path: &str, version: u64) -> FileVersion {
    FileVersion {
        path: path.into(),
        version,
        op: FileOp::Delete,
        size: 0,
        sha256: String::new(),
        author: "bob".into(),
        session: None,
        at: "2026-11-29T08:00:00.000Z".into(),
        deleted: true,
        restored_from: None,
    }
}

#[test]
fn org_file_responses() {
    insta::assert_json_snapshot!(
        "files_list_response",
        roundtrip(&FilesListResponse {
            files: vec![
                version("/memory/MEMORY.md", 1, FileOp::Write),
                version("/memory/deploys.md", 3, FileOp::Edit),
                tombstone("/memory/old.md", 2),
            ]
        })
    );
    insta::assert_json_snapshot!(
        "files_read_response",
        roundtrip(&FilesReadResponse {
            file: version("/memory/deploys.md", 2, FileOp::Write),
            content: "Deploys go through `make release`.\n".into(),
        })
    );
    insta::assert_json_snapshot!(
        "files_history_response",
        roundtrip(&FilesHistoryResponse {
            versions: vec![
                version("/memory/deploys.md", 1, FileOp::Write),
                version("/memory/deploys.md", 2, FileOp::Edit),
                tombstone("/memory/deploys.md", 3),
                FileVersion {
                    restored_from: Some(2),
                    session: None,
                    ..version("/memory/deploys.md", 4, FileOp::Restore)
                },
            ]
        })
    );
    insta::assert_json_snapshot!(
        "files_change_response",
        roundtrip(&FilesChangeResponse {
            file: FileVersion {
                restored_from: Some(2),
                session: None,
                ..version("/memory/deploys.md", 5, FileOp::Restore)
            },
            changed: true,
        })
    );
    insta::assert_json_snapshot!(
        "skills_list_response",
        roundtrip(&SkillsListResponse {
            skills: vec![
                SkillInfo {
                    name: "deploy".into(),
                    description: "Ship a release".into(),
                    files: 2,
                    version: 1,
                    problem: None,
                },
                SkillInfo {
                    name: "notes".into(),
                    description: String::new(),
                    files: 1,
                    version: 0,
                    problem: Some("no SKILL.md".into()),
                },
            ]
        })
    );
    insta::assert_json_snapshot!(
        "skills_import_response",
        roundtrip(&SkillsImportResponse {
            written: vec![FileVersion {
                session: None,
                ..version("/skills/deploy/SKILL.md", 1, FileOp::Import)
            }],
            unchanged: 4,
        })
    );
    insta::assert_json_snapshot!(
        "agents_list_response",
        roundtrip(&AgentsListResponse {
            agents: vec![
                AgentInfo {
                    name: "explorer".into(),
                    description: "Finds code".into(),
                    tools: None,
                    model: None,
                    path: "/agents/explorer.md".into(),
                    version: 1,
                    author: "alice".into(),
                    warnings: vec![],
                    problem: None,
                },
                AgentInfo {
                    name: "reviewer".into(),
                    description: "Reviews diffs".into(),
                    tools: Some(vec!["Read".into(), "Grep".into()]),
                    model: Some("sonnet".into()),
                    path: "/agents/reviewer.md".into(),
                    version: 3,
                    author: "bob".into(),
                    warnings: vec!["WebFetch is not a tool here; it is left out".into()],
                    problem: None,
                },
                AgentInfo {
                    name: "broken".into(),
                    description: String::new(),
                    tools: None,
                    model: None,
                    path: "/agents/broken.md".into(),
                    version: 1,
                    author: "bob".into(),
                    warnings: vec![],
                    problem: Some("the front matter has no `description`".into()),
                },
            ],
            omitted: 0,
        })
    );
    insta::assert_json_snapshot!(
        "agents_import_response",
        roundtrip(&AgentsImportResponse {
            written: vec![FileVersion {
                session: None,
                ..version("/agents/reviewer.md", 2, FileOp::Import)
            }],
            unchanged: 1,
        })
    );
}

#[test]
fn session_events() {
    let call = ToolCall {
        call_id: "toolu_1".into(),
        name: "Bash".into(),
        input: json!({"command": "cat notes.txt"}),
    };
    let events = vec![
        EventKind::TurnStarted { turn_id: TurnId("t_1".into()), by: "alice".into() },
        EventKind::UserMessage { text: "Read notes.txt".into(), attachments: Vec::new() },
        EventKind::AssistantDelta { text: "I'll".into() },
        EventKind::AssistantMessage {
            text: "I'll read it.".into(),
            tool_calls: vec![call.clone()],
            usage: Some(Usage {
                input_tokens: 5200,
                output_tokens: 40,
                cache_read_tokens: 4800,
                cache_write_tokens: 390,
            }),
            reasoning: Vec::new(),
            model: None,
            searches: Vec::new(),
        },
        EventKind::ToolCall { call, target_before: None },
        EventKind::ToolOutputDelta {
            call_id: "toolu_1".into(),
            stream: OutputStream::Stdout,
            text: "hello\n".into(),
        },
        EventKind::ToolResult {
            call_id: "toolu_1".into(),
            name: "Bash".into(),
            output: "hello\n".into(),
            is_error: false,
            duration_ms: 12,
            attachments: Vec::new(),
        },
        EventKind::ModelRetry { attempt: 1, delay_ms: 1000, reason: "429: rate limited".into() },
        EventKind::TurnCompleted {
            turn_id: TurnId("t_1".into()),
            stop_reason: StopReason::EndTurn,
            usage: Usage { input_tokens: 1200, output_tokens: 80, ..Usage::default() },
        },
        EventKind::TurnFailed {
            turn_id: TurnId("t_2".into()),
            error:
                "ANTHROPIC_API_KEY is rejected by https://api.anthropic.com (401): check the key"
                    .into(),
            class: Some(FailureClass::ProviderAuth),
        },
        EventKind::Sandbox { state: SandboxState::Running, ms: 6.5, queue: None },
        EventKind::Presence {
            attached: vec![
                PresenceEntry {
                    user: "alice".into(),
                    role: Role::Driver,
                    client: "outboard-cli/0.1.0".into(),
                    connection_id: 12,
                },
                PresenceEntry {
                    user: "bob".into(),
                    role: Role::Watcher,
                    client: "outboard-cli/0.1.0".into(),
                    connection_id: 15,
                },
            ],
        },
        EventKind::DriveRequested { user: "bob".into() },
        EventKind::CompactionStarted { trigger: CompactionTrigger::Auto },
        EventKind::Compaction {
            summary: "The user asked to fix the flaky test; src/retry.rs now backs off.".into(),
            from_seq: 1,
            kept_from_seq: 212,
            tokens_before: 161_204,
            tokens_after: 38_950,
            trigger: CompactionTrigger::Auto,
            focus: None,
            usage: Some(Usage {
                input_tokens: 150_000,
                output_tokens: 900,
                cache_read_tokens: 149_000,
                cache_write_tokens: 0,
            }),
        },
        EventKind::MemoryChanged {
            path: "/memory/deploys.md".into(),
            version: 4,
            op: FileOp::Edit,
            author: "alice".into(),
            session: Some(sid()),
        },
        EventKind::Todos {
            todos: vec![TodoItem {
                content: "Run the tests".into(),
                status: TodoStatus::InProgress,
                active_form: "Running the tests".into(),
            }],
        },
        EventKind::BackgroundTask {
            shell_id: "bash_1f2e3d4c".into(),
            command: "npm run dev".into(),
            status: TaskStatus::Completed,
            exit_code: Some(0),
        },
        EventKind::SystemReminder {
            text: "<system-reminder>\nBackground shell bash_1f2e3d4c (npm run dev) completed \
                   with exit code 0.\n</system-reminder>"
                .into(),
        },
        EventKind::ApprovalRequested {
            call_id: "toolu_01".into(),
            name: "mcp__github__create_issue".into(),
            input: json!({"title": "Flaky test", "repo": "acme/app"}),
            rule: "mcp__github__*".into(),
            covers: Some(vec!["mcp__github__*".into()]),
            unjudged: None,
            kind: ApprovalKind::Tool,
            path: None,
            plan: None,
            questions: None,
        },
        EventKind::ApprovalResolved {
            call_id: "toolu_01".into(),
            name: "mcp__github__create_issue".into(),
            decision: ApprovalDecision::Deny,
            scope: ApprovalScope::Once,
            by: "alice".into(),
            reason: Some("file it in the backlog project instead".into()),
            covers: None,
            answers: None,
        },
        EventKind::SessionTitled { title: "Fix the flaky test".into() },
    ];
    for (i, kind) in events.into_iter().enumerate() {
        let name = format!("event_{}", kind.type_name());
        insta::assert_json_snapshot!(name, roundtrip(&event(i as u64 + 1, kind)));
    }
    let waiting = EventKind::Sandbox {
        state: SandboxState::Waiting,
        ms: 0.0,
        queue: Some(SandboxQueue { position: 3, limit: 8 }),
    };
    insta::assert_json_snapshot!("event_sandbox_waiting", roundtrip(&event(40, waiting)));
}

/// Plan mode's events: the mode, a plan to approve, questions and their answers.
#[test]
fn plan_mode_events() {
    let plan = "1. Add the flag.\n2. Test it.\n";
    let events = [
        (
            "event_mode_changed",
            EventKind::ModeChanged { mode: SessionMode::Plan, by: "alice".into() },
        ),
        (
            "event_approval_requested_plan",
            EventKind::ApprovalRequested {
                call_id: "toolu_02".into(),
                name: "ExitPlanMode".into(),
                input: json!({"plan": plan}),
                rule: "ExitPlanMode".into(),
                covers: None,
                unjudged: None,
                kind: ApprovalKind::Plan,
                path: Some("/plans/2026-12-04-add-the-flag.md".into()),
                plan: Some(plan.into()),
                questions: None,
            },
        ),
        (
            "event_approval_requested_question",
            EventKind::ApprovalRequested {
                call_id: "toolu_03".into(),
                name: "AskUserQuestion".into(),
                input: json!({}),
                rule: "AskUserQuestion".into(),
                covers: None,
                unjudged: None,
                kind: ApprovalKind::Question,
                path: None,
                plan: None,
                questions: Some(vec![Question {
                    question: "Which database?".into(),
                    header: "Database".into(),
                    options: vec![
                        QuestionOption { label: "SQLite".into(), description: "one file".into() },
                        QuestionOption { label: "PostgreSQL".into(), description: String::new() },
                    ],
                    multi_select: false,
                }]),
            },
        ),
        (
            "event_approval_resolved_question",
            EventKind::ApprovalResolved {
                call_id: "toolu_03".into(),
                name: "AskUserQuestion".into(),
                decision: ApprovalDecision::Allow,
                scope: ApprovalScope::Once,
                by: "alice".into(),
                reason: None,
                covers: None,
                answers: Some(vec!["SQLite".into()]),
            },
        ),
    ];
    for (i, (name, kind)) in events.into_iter().enumerate() {
        insta::assert_json_snapshot!(name, roundtrip(&event(i as u64 + 1, kind)));
    }
    let line = outboard_shared::headless::PlanProposed {
        kind: Default::default(),
        session_id: SessionId("s_1".into()),
        call_id: "toolu_02".into(),
        path: "/plans/2026-12-04-add-the-flag.md".into(),
        plan: plan.into(),
    };
    insta::assert_json_snapshot!("headless_plan", roundtrip(&line));
}

/// A request and an answer written before `covers` and `unjudged` existed still read.
#[test]
fn approval_events_without_covers_still_parse() {
    let asked: EventKind = serde_json::from_value(json!({"type": "approval_requested",
        "call_id": "c", "name": "Bash", "input": {"command": "ls"}, "rule": "Bash"}))
    .unwrap();
    assert!(matches!(asked, EventKind::ApprovalRequested { covers: None, unjudged: None, .. }));
    let answered: EventKind = serde_json::from_value(json!({"type": "approval_resolved",
        "call_id": "c", "name": "Bash", "decision": "allow", "scope": "session", "by": "a"}))
    .unwrap();
    assert!(matches!(answered, EventKind::ApprovalResolved { covers: None, .. }));
}

#[test]
fn memory_changed_is_transient() {
    let kind = EventKind::MemoryChanged {
        path: "/memory/MEMORY.md".into(),
        version: 1,
        op: FileOp::Write,
        author: "bob".into(),
        session: None,
    };
    assert!(!kind.is_durable());
    assert_eq!(kind.type_name(), "memory_changed");
    // A person's change names no session, and the field is left out.
    assert_eq!(roundtrip(&event(3, kind)).get("session"), None);
}

#[test]
fn unknown_event_kinds_and_codes_are_tolerated() {
    let e: SessionEvent = serde_json::from_value(json!({
        "session_id": "s_1", "seq": 9, "ts": "2026-11-29T07:18:16.123Z",
        "type": "reaction_added", "emoji": "+1", "by": "bob"
    }))
    .unwrap();
    assert_eq!(e.kind, EventKind::Unknown);
    assert_eq!(e.seq, 9);
    let b: ErrorBody =
        serde_json::from_value(json!({"code": "payment_required", "message": "m"})).unwrap();
    assert_eq!(b.code, ErrorCode::Unknown);
    let s: SessionStatus = serde_json::from_value(json!("archived")).unwrap();
    assert_eq!(s, SessionStatus::Unknown);
    let op: FileOp = serde_json::from_value(json!("rename")).unwrap();
    assert_eq!(op, FileOp::Unknown);
    // A version from a newer server with fields this client does not know still decodes.
    let v: FileVersion = serde_json::from_value(json!({
        "path": "/memory/a.md", "version": 1, "op": "write", "size": 1, "sha256": "ab",
        "author": "bob", "at": "2026-11-29T07:18:16.123Z", "mode": "0644"
    }))
    .unwrap();
    assert!(!v.deleted);
    assert_eq!(v.session, None);
}

#[test]
fn headless_lines() {
    insta::assert_json_snapshot!(
        "headless_run_started",
        roundtrip(&RunStarted {
            kind: Default::default(),
            schema_version: SCHEMA_VERSION,
            session_id: sid(),
            server: "ws://127.0.0.1:7700".into(),
            embedded: true,
            context_window: Some(200_000),
            context_window_source: Some(WindowSource::ProviderDefault),
            context_window_from: Some("a guess".into()),
        })
    );
    insta::assert_json_snapshot!(
        "headless_reconnected",
        roundtrip(&Reconnected {
            kind: Default::default(),
            session_id: sid(),
            attempts: 3,
            after_seq: 41,
            role: Role::Driver,
            reason: "the server closed the connection".into(),
        })
    );
    insta::assert_json_snapshot!(
        "headless_run_finished",
        roundtrip(&RunFinished {
            kind: Default::default(),
            session_id: sid(),
            exit_code: 1,
            error: Some("the model provider answered 401".into()),
        })
    );
}

#[test]
fn connection_ids_are_additive() {
    // A welcome and a presence entry from a server that predates connection ids still decode.
    let w: Welcome = serde_json::from_value(json!({
        "protocol_version": 1, "server": "outboard-server/0.0.9",
        "user": {"id": "u_1", "name": "alice", "org_id": "o_1", "org": "acme"}
    }))
    .unwrap();
    assert_eq!(w.connection_id, 0);
    let p: PresenceEntry =
        serde_json::from_value(json!({"user": "alice", "role": "driver"})).unwrap();
    assert_eq!(p.connection_id, 0);
}

#[test]
fn hello_debug_redacts_the_token() {
    let h = Hello { protocol_version: 1, token: "ob_secret".into(), client: String::new() };
    assert!(!format!("{h:?}").contains("ob_secret"));
}

#[test]
fn quota_exceeded_is_its_own_code() {
    let body = ErrorBody::new(ErrorCode::QuotaExceeded, "quota");
    let wire = serde_json::to_value(&body).unwrap();
    assert_eq!(wire, json!({"code": "quota_exceeded", "message": "quota"}));
    assert_eq!(serde_json::from_value::<ErrorBody>(wire).unwrap(), body);
    assert_eq!(ErrorCode::QuotaExceeded.as_str(), "quota_exceeded");
}

/// Checkpoints, rewind and fork: their events, requests and answers.
#[test]
fn rewind_messages() {
    let tree = "9f2c1e0d8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e";
    let checkpoint = EventKind::Checkpoint { tree: Some(tree.into()), at_seq: 41 };
    insta::assert_json_snapshot!("event_checkpoint", roundtrip(&event(42, checkpoint)));
    let rewound = EventKind::Rewound {
        checkpoint: 2,
        to_seq: 41,
        code: true,
        conversation: true,
        from_tree: Some("4b825dc642cb6eb9a060e54bf8d69288fbee4904".into()),
        by: "alice".into(),
    };
    insta::assert_json_snapshot!("event_rewound", roundtrip(&event(97, rewound)));
    let params =
        SessionRewindParams { session_id: sid(), checkpoint: 2, code: true, conversation: true };
    insta::assert_json_snapshot!("rewind", roundtrip(&request(30, Method::SessionRewind(params))));
    let params = SessionForkParams { session_id: sid(), checkpoint: Some(2) };
    insta::assert_json_snapshot!("fork", roundtrip(&request(31, Method::SessionFork(params))));
    let listed = SessionCheckpointsResponse {
        checkpoints: vec![CheckpointInfo {
            n: 2,
            prompt: "now add the tests".into(),
            by: "alice".into(),
            ts: "2026-11-29T07:18:16.123Z".into(),
            seq: 44,
            code: true,
            current: true,
            dropped: false,
        }],
    };
    insta::assert_json_snapshot!("checkpoints_response", roundtrip(&listed));
    let rewound = SessionRewindResponse { seq: 97, prompt: "now add the tests".into() };
    insta::assert_json_snapshot!("rewind_response", roundtrip(&rewound));
    let forked = SessionForkResponse { session: info(), prompt: Some("now add the tests".into()) };
    insta::assert_json_snapshot!("fork_response", roundtrip(&forked));
}
