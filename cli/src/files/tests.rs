//! Unit tests of `outboard memory` and `outboard skills`: paths, rendering, the skills walker and
//! its batches without a server; the commands end to end against the scripted fake server.

use std::fs;

use outboard_shared::{ClientFrame, Method, Request, RequestId, SkillsImportParams};
use pretty_assertions::assert_eq;

use super::*;
use crate::args::ConnectArgs;
use crate::testing::{fake_server, file_version, Script, FAKE_CONTENT};

fn path_ok(arg: &str) -> String {
    memory_path(arg).unwrap()
}

fn path_err(arg: &str) -> String {
    match memory_path(arg) {
        Err(FilesError::Usage(message)) => message,
        other => panic!("{arg:?}: {other:?}"),
    }
}

#[test]
fn memory_paths_are_normalised_under_memory() {
    for arg in ["deploys.md", "./deploys.md", "memory/deploys.md", "/memory/deploys.md"] {
        assert_eq!(path_ok(arg), "/memory/deploys.md", "{arg}");
    }
    assert_eq!(path_ok("notes/2026/jan.md"), "/memory/notes/2026/jan.md");
    assert_eq!(path_ok("/memory//notes/./a.md"), "/memory/notes/a.md");
    assert_eq!(path_ok("/memory/notes/"), "/memory/notes");
    assert_eq!(path_ok("memory"), "/memory");
    assert_eq!(path_ok("/memory"), "/memory");
    assert_eq!(path_ok("/"), "/");
    // /skills is accepted as is; a relative `skills/…` is a memory file like any other.
    assert_eq!(path_ok("/skills/deploy/SKILL.md"), "/skills/deploy/SKILL.md");
    assert_eq!(path_ok("/skills"), "/skills");
    assert_eq!(path_ok("skills/x.md"), "/memory/skills/x.md");
}

#[test]
fn bad_memory_paths_are_usage_errors() {
    assert!(path_err("/etc/passwd").contains("under /memory, /skills or /agents"));
    assert!(path_err("/memoryx/a.md").contains("under /memory, /skills or /agents"));
    assert_eq!(path_ok("/agents/reviewer.md"), "/agents/reviewer.md");
    assert!(path_err("../a.md").contains(".."));
    assert!(path_err("/memory/../skills/x").contains(".."));
    assert!(path_err("").contains("empty"));
    assert!(path_err("a\0b").contains("NUL"));
    assert_eq!(memory_path("/etc").unwrap_err().exit_code(), exit::USAGE);
}

#[test]
fn skill_file_paths() {
    assert_eq!(skill_file_path("deploy", None).unwrap(), "/skills/deploy/SKILL.md");
    assert_eq!(
        skill_file_path("deploy", Some("scripts/run.sh")).unwrap(),
        "/skills/deploy/scripts/run.sh"
    );
    assert_eq!(skill_file_path("deploy", Some("/./run.sh")).unwrap(), "/skills/deploy/run.sh");
    for (name, file) in
        [("", None), ("..", None), ("a/b", None), ("deploy", Some("../x")), ("deploy", Some("/"))]
    {
        let err = skill_file_path(name, file).unwrap_err();
        assert_eq!(err.exit_code(), exit::USAGE, "{name:?} {file:?}");
    }
}

#[test]
fn sizes_and_times_are_short() {
    assert_eq!(human_size(0), "0 B");
    assert_eq!(human_size(1023), "1023 B");
    assert_eq!(human_size(4300), "4.2 KiB");
    assert_eq!(human_size(1024 * 1024), "1.0 MiB");
    assert_eq!(short_time("2026-11-29T07:18:16.123Z"), "2026-11-29T07:18:16Z");
    assert_eq!(short_time("2026-11-29T07:18:16.123456+01:00"), "2026-11-29T07:18:16+01:00");
    assert_eq!(short_time("2026-11-29T07:18:16Z"), "2026-11-29T07:18:16Z");
    assert_eq!(short_time("soon."), "soon.");
}

fn versions() -> Vec<FileVersion> {
    let path = "/memory/deploys.md";
    vec![
        FileVersion { size: 123, ..file_version(path, 1, FileOp::Write) },
        FileVersion {
            size: 4300,
            session: None,
            author: "bob".into(),
            at: "2026-01-02T10:00:00.5Z".into(),
            ..file_version(path, 2, FileOp::Edit)
        },
        FileVersion { size: 0, sha256: String::new(), ..file_version(path, 3, FileOp::Delete) },
        FileVersion {
            restored_from: Some(2),
            session: None,
            ..file_version(path, 4, FileOp::Restore)
        },
        file_version(path, 5, FileOp::Import),
    ]
}

#[test]
fn history_lines_name_the_op_author_session_time_and_size() {
    assert_eq!(
        history_lines(&versions()),
        "v1  write              ada (session s_1)  2026-01-01T00:00:00Z  123 B\n\
         v2  edit               bob                2026-01-02T10:00:00Z  4.2 KiB\n\
         v3  delete             ada (session s_1)  2026-01-01T00:00:00Z  -\n\
         v4  restore (from v2)  ada                2026-01-01T00:00:00Z  27 B\n\
         v5  import             ada (session s_1)  2026-01-01T00:00:00Z  27 B\n"
    );
    assert_eq!(history_lines(&[]), "");
}

#[test]
fn list_lines_mark_deleted_files() {
    let files = vec![
        FileVersion { size: 2048, ..file_version("/memory/MEMORY.md", 3, FileOp::Edit) },
        file_version("/memory/old.md", 2, FileOp::Delete),
    ];
    assert_eq!(
        list_lines(&files),
        "/memory/MEMORY.md  v3  2.0 KiB  ada  2026-01-01T00:00:00Z\n\
         /memory/old.md     v2  -        ada  2026-01-01T00:00:00Z  deleted\n"
    );
}

#[test]
fn skills_lines_show_description_files_and_problem() {
    let skills = vec![
        SkillInfo {
            name: "deploy".into(),
            description: "Ship a release:\n  build, tag, push".into(),
            files: 3,
            version: 2,
            problem: None,
        },
        SkillInfo {
            name: "x".into(),
            description: String::new(),
            files: 1,
            version: 0,
            problem: Some("no SKILL.md".into()),
        },
    ];
    assert_eq!(
        skills_lines(&skills),
        "deploy  Ship a release: build, tag, push  3 files\n\
         x       -                                 1 file   problem: no SKILL.md\n"
    );
}

fn import_file(path: &str, content: &str) -> ImportFile {
    ImportFile { path: path.into(), content: content.into() }
}

#[test]
fn the_import_summary_counts_files_and_new_versions_per_skill() {
    let skills = vec![
        Skill {
            name: "deploy".into(),
            files: vec![import_file("deploy/SKILL.md", "a"), import_file("deploy/run.sh", "b")],
        },
        Skill { name: "review".into(), files: vec![import_file("review/SKILL.md", "c")] },
    ];
    let imported = Imported {
        written: vec![file_version("/skills/deploy/run.sh", 2, FileOp::Import)],
        unchanged: 2,
    };
    assert_eq!(
        import_summary(&skills, &imported),
        "imported 2 skills: deploy (2 files, 1 new version), review (1 file, 0 new versions); \
         2 files unchanged\n"
    );
}

// ---------------------------------------------------------------------------------------------
// The walker
// ---------------------------------------------------------------------------------------------

fn write(path: &Path, content: impl AsRef<[u8]>) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, content).unwrap();
}

fn paths(skill: &Skill) -> Vec<&str> {
    skill.files.iter().map(|f| f.path.as_str()).collect()
}

fn has_warning(walk: &Walk, needle: &str) -> bool {
    walk.warnings.iter().any(|w| w.contains(needle))
}

#[test]
fn a_directory_of_skills_is_walked_and_junk_is_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    write(&outside.path().join("secret.txt"), "do not import");
    let root = tmp.path().join("skills");
    write(&root.join("README.md"), "about these skills");
    write(&root.join(".git/config"), "[core]");
    write(&root.join(".hidden/SKILL.md"), "---\nname: hidden\n---\n");
    write(&root.join("deploy/SKILL.md"), "---\nname: deploy\n---\nShip it.\n");
    write(&root.join("deploy/scripts/run.sh"), "#!/bin/sh\nmake release\n");
    write(&root.join("deploy/.env"), "TOKEN=x");
    write(&root.join("deploy/.cache/x.txt"), "cached");
    write(&root.join("deploy/logo.png"), [0x89, b'P', b'N', b'G', 0, 0xff]);
    write(&root.join("deploy/latin1.txt"), b"caf\xe9");
    write(&root.join("deploy/nul.txt"), "a\0b");
    write(&root.join("deploy/big.txt"), "a".repeat(MAX_FILE_BYTES as usize + 1));
    write(&root.join("deploy/limit.txt"), "a".repeat(MAX_FILE_BYTES as usize));
    write(&root.join("review/SKILL.md"), "---\nname: review\n---\n");
    write(&root.join("notes/todo.md"), "no skill here");
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), root.join("deploy/leak"))
        .unwrap();
    std::os::unix::fs::symlink(root.join("review/SKILL.md"), root.join("deploy/review.md"))
        .unwrap();
    std::os::unix::fs::symlink(root.join("deploy"), root.join("deploy/scripts/loop")).unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join("elsewhere")).unwrap();

    let walk = walk_skills(&root).unwrap();
    let names: Vec<&str> = walk.skills.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["deploy", "review"]);
    assert_eq!(
        paths(&walk.skills[0]),
        ["deploy/SKILL.md", "deploy/limit.txt", "deploy/review.md", "deploy/scripts/run.sh"]
    );
    assert_eq!(walk.skills[0].files[3].content, "#!/bin/sh\nmake release\n");
    assert_eq!(walk.skills[0].files[2].content, "---\nname: review\n---\n");
    assert_eq!(paths(&walk.skills[1]), ["review/SKILL.md"]);

    assert!(has_warning(&walk, "notes/: no SKILL.md"), "{:#?}", walk.warnings);
    assert!(has_warning(&walk, "outside any skill directory: README.md"), "{:#?}", walk.warnings);
    assert!(
        has_warning(
            &walk,
            "3 files (binary or not UTF-8): deploy/latin1.txt, deploy/logo.png, deploy/nul.txt"
        ),
        "{:#?}",
        walk.warnings
    );
    assert!(has_warning(&walk, "deploy/big.txt: 1.0 MiB is over the 1 MiB limit"));
    assert!(has_warning(&walk, "deploy/leak: a symlink to"));
    assert!(has_warning(&walk, "elsewhere: a symlink to"));
    // Hidden files and the symlink loop are skipped without a word.
    assert_eq!(walk.warnings.len(), 6, "{:#?}", walk.warnings);
}

#[test]
fn a_single_skill_directory_is_one_skill_named_after_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("my-skill");
    write(&dir.join("SKILL.md"), "---\nname: my-skill\n---\n");
    write(&dir.join("ref/notes.md"), "notes");
    // Not skills of their own: subdirectories of a skill are just its files.
    write(&dir.join("sub/SKILL.md"), "nested");
    let walk = walk_skills(&dir.join(".")).unwrap();
    assert_eq!(walk.warnings, Vec::<String>::new());
    assert_eq!(walk.skills.len(), 1);
    assert_eq!(walk.skills[0].name, "my-skill");
    assert_eq!(
        paths(&walk.skills[0]),
        ["my-skill/SKILL.md", "my-skill/ref/notes.md", "my-skill/sub/SKILL.md"]
    );
}

#[test]
fn an_unusable_directory_is_an_error_and_an_empty_one_has_no_skills() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(walk_skills(&tmp.path().join("nope")).unwrap_err().contains("cannot read"));
    write(&tmp.path().join("f.md"), "x");
    assert!(walk_skills(&tmp.path().join("f.md")).unwrap_err().contains("not a directory"));
    let empty = tmp.path().join("empty");
    fs::create_dir(&empty).unwrap();
    assert_eq!(walk_skills(&empty).unwrap(), Walk::default());
}

#[test]
fn a_skill_whose_skill_md_is_unreadable_is_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("skills");
    write(&root.join("bin/SKILL.md"), [0xff, 0xfe]);
    write(&root.join("bin/run.sh"), "echo");
    let walk = walk_skills(&root).unwrap();
    assert_eq!(walk.skills, vec![]);
    assert!(has_warning(&walk, "bin/: its SKILL.md could not be imported"), "{:#?}", walk.warnings);
}

/// The size of the request frame that carries `files`.
fn frame_len(files: &[ImportFile]) -> usize {
    let frame = ClientFrame::Request(Request {
        id: RequestId(u64::MAX),
        method: Method::SkillsImport(SkillsImportParams { files: files.to_vec() }),
    });
    serde_json::to_string(&frame).unwrap().len()
}

#[test]
fn batches_stay_under_the_frame_budget_and_keep_order() {
    let chunk = "x".repeat(900 * 1024);
    let big = Skill {
        name: "big".into(),
        files: (0..5).map(|i| import_file(&format!("big/f{i}.md"), &chunk)).collect(),
    };
    let small = Skill { name: "small".into(), files: vec![import_file("small/SKILL.md", "hi")] };
    let skills = vec![big.clone(), small.clone()];
    let batches = batches(&skills, IMPORT_BATCH_BYTES);
    // 5 × 900 KiB does not fit in 3 MiB: the big skill is split; the small one joins the last.
    assert_eq!(batches.iter().map(Vec::len).collect::<Vec<_>>(), [3, 3]);
    for batch in &batches {
        assert!(frame_len(batch) <= IMPORT_BATCH_BYTES, "{}", frame_len(batch));
    }
    let sent: Vec<ImportFile> = batches.into_iter().flatten().collect();
    assert_eq!(sent, [big.files, small.files].concat());
}

#[test]
fn a_skill_that_fits_in_a_batch_is_never_split() {
    let skill = |name: &str| Skill {
        name: name.into(),
        files: (0..2).map(|i| import_file(&format!("{name}/f{i}"), &"y".repeat(60))).collect(),
    };
    let (a, b, c) = (skill("a"), skill("b"), skill("c"));
    let one_file = encoded_len(&a.files[0]) + 1;
    // Room for three files: `b` does not fit beside `a`, so it starts a batch of its own.
    let budget = BATCH_ENVELOPE_BYTES + 3 * one_file;
    let batches = batches(&[a.clone(), b.clone(), c.clone()], budget);
    assert_eq!(batches, vec![a.files, b.files, c.files]);
    assert_eq!(super::batches(&[], budget), Vec::<Vec<ImportFile>>::new());
}

#[test]
fn content_comes_from_a_file_or_stdin_as_utf8_text() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("MEMORY.md");
    write(&file, "# Memory\n");
    assert_eq!(read_content(Some(&file), &b"ignored"[..]).unwrap(), "# Memory\n");
    assert_eq!(read_content(None, &b"from stdin"[..]).unwrap(), "from stdin");
    assert_eq!(read_content(Some(Path::new("-")), &b""[..]).unwrap(), "");
    let err = |r: Result<String, FilesError>| match r {
        Err(FilesError::Usage(m)) => m,
        other => panic!("{other:?}"),
    };
    assert!(err(read_content(None, &b"caf\xe9"[..])).contains("not UTF-8"));
    let huge = vec![b'a'; MAX_FILE_BYTES as usize + 1];
    assert!(err(read_content(None, &huge[..])).contains("over the 1 MiB limit"));
    assert!(err(read_content(Some(&tmp.path().join("nope")), &b""[..])).contains("cannot read"));
}

// ---------------------------------------------------------------------------------------------
// Commands against the fake server
// ---------------------------------------------------------------------------------------------

fn connect(url: &str) -> ConnectArgs {
    ConnectArgs {
        server: Some(url.to_owned()),
        token: Some("tok".into()),
        ..ConnectArgs::default()
    }
}

struct Ran {
    code: i32,
    out: String,
    err: String,
    sent: Vec<Method>,
}

async fn run_memory(make: impl FnOnce(ConnectArgs) -> MemoryCommand, stdin: &str) -> Ran {
    let (url, mut seen) = fake_server(Script::default()).await;
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = memory(&make(connect(&url)), stdin.as_bytes(), &mut out, &mut err).await;
    let mut sent = Vec::new();
    while let Ok(method) = seen.try_recv() {
        sent.push(method);
    }
    Ran { code, out: String::from_utf8(out).unwrap(), err: String::from_utf8(err).unwrap(), sent }
}

#[tokio::test]
async fn cat_prints_the_content_exactly() {
    let ran = run_memory(
        |connect| {
            MemoryCommand::Cat(MemoryCatArgs {
                connect,
                path: "deploys.md".into(),
                version: Some(2),
            })
        },
        "",
    )
    .await;
    assert_eq!((ran.code, ran.out.as_str(), ran.err.as_str()), (0, FAKE_CONTENT, ""));
    assert_eq!(
        ran.sent,
        [Method::FilesRead(outboard_shared::FilesReadParams {
            path: "/memory/deploys.md".into(),
            version: Some(2)
        })]
    );
}

#[tokio::test]
async fn a_missing_file_exits_1_with_the_servers_message() {
    let ran = run_memory(
        |connect| {
            MemoryCommand::Cat(MemoryCatArgs { connect, path: "missing.md".into(), version: None })
        },
        "",
    )
    .await;
    assert_eq!(ran.code, exit::FAILED);
    assert_eq!(ran.out, "");
    assert_eq!(ran.err, "outboard: files/read failed: no file here (not_found)\n");
}

#[tokio::test]
async fn write_sends_stdin_and_prints_the_new_version() {
    let ran = run_memory(
        |connect| {
            MemoryCommand::Write(MemoryWriteArgs {
                connect,
                path: "MEMORY.md".into(),
                file: None,
                base_version: None,
            })
        },
        "# Memory\n",
    )
    .await;
    assert_eq!((ran.code, ran.out.as_str()), (0, "wrote /memory/MEMORY.md v4 (9 B)\n"));
    assert_eq!(
        ran.sent,
        [Method::FilesWrite(outboard_shared::FilesWriteParams {
            path: "/memory/MEMORY.md".into(),
            content: "# Memory\n".into(),
            base_version: None,
        })]
    );
}

#[tokio::test]
async fn a_conflict_exits_1() {
    let ran = run_memory(
        |connect| {
            MemoryCommand::Write(MemoryWriteArgs {
                connect,
                path: "stale.md".into(),
                file: None,
                base_version: Some(1),
            })
        },
        "x",
    )
    .await;
    assert_eq!(ran.code, exit::FAILED);
    assert!(ran.err.contains("/memory/stale.md is at v7 (by bob) (conflict)"), "{}", ran.err);
}

#[tokio::test]
async fn rm_restore_history_and_ls_print_one_line_each() {
    let rm = run_memory(
        |connect| MemoryCommand::Rm(MemoryPathArgs { connect, path: "/memory/a.md".into() }),
        "",
    )
    .await;
    assert_eq!(
        rm.out,
        "deleted /memory/a.md (v5); bring it back with: outboard memory restore /memory/a.md v4\n"
    );

    let restore = run_memory(
        |connect| {
            MemoryCommand::Restore(MemoryRestoreArgs { connect, path: "a.md".into(), version: 2 })
        },
        "",
    )
    .await;
    assert_eq!((restore.code, restore.out.as_str()), (0, "restored /memory/a.md to v2 as v6\n"));

    let history = run_memory(
        |connect| {
            MemoryCommand::History(MemoryHistoryArgs { connect, json: false, path: "a.md".into() })
        },
        "",
    )
    .await;
    assert_eq!(
        history.out,
        "v1  write   ada (session s_1)  2026-01-01T00:00:00Z  27 B\n\
         v2  delete  ada (session s_1)  2026-01-01T00:00:00Z  -\n"
    );

    let ls = run_memory(
        |connect| MemoryCommand::Ls(MemoryLsArgs { connect, all: true, json: true, path: None }),
        "",
    )
    .await;
    let listed: Vec<FileVersion> = serde_json::from_str(&ls.out).unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(
        ls.sent,
        [Method::FilesList(outboard_shared::FilesListParams {
            path: "/memory".into(),
            include_deleted: true
        })]
    );
}

#[tokio::test]
async fn usage_and_connection_errors_map_to_2_and_3() {
    // A bad path is refused before connecting: the server is never asked.
    let ran = run_memory(
        |connect| MemoryCommand::Rm(MemoryPathArgs { connect, path: "/etc/passwd".into() }),
        "",
    )
    .await;
    assert_eq!((ran.code, ran.sent.len()), (exit::USAGE, 0));
    assert!(ran.err.starts_with("outboard: \"/etc/passwd\" is not an org file path"));

    let (url, _) = fake_server(Script::default()).await;
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let no_token = ConnectArgs { server: Some(url.clone()), ..ConnectArgs::default() };
    let command = SkillsCommand::Ls(SkillsLsArgs { connect: no_token, json: false });
    assert_eq!(skills(&command, &mut out, &mut err).await, exit::USAGE);

    let wrong = ConnectArgs { token: Some("wrong".into()), ..connect(&url) };
    let command = SkillsCommand::Ls(SkillsLsArgs { connect: wrong, json: false });
    assert_eq!(skills(&command, &mut out, &mut err).await, exit::CONNECT);
}

#[tokio::test]
async fn skills_import_walks_sends_and_summarises() {
    let tmp = tempfile::tempdir().unwrap();
    write(&tmp.path().join("deploy/SKILL.md"), "---\nname: deploy\n---\n");
    write(&tmp.path().join("deploy/run.sh"), "same\n");
    write(&tmp.path().join("deploy/logo.png"), [0u8, 1, 2]);
    write(&tmp.path().join("review/SKILL.md"), "same\n");
    let (url, mut seen) = fake_server(Script::default()).await;
    let command = SkillsCommand::Import(SkillsImportArgs {
        connect: connect(&url),
        dir: tmp.path().to_owned(),
    });
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = skills(&command, &mut out, &mut err).await;
    let (out, err) = (String::from_utf8(out).unwrap(), String::from_utf8(err).unwrap());
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "imported 2 skills: deploy (2 files, 1 new version), review (1 file, 0 new versions); \
         2 files unchanged\n"
    );
    assert_eq!(
        err,
        "outboard: warning: skipped 1 file (binary or not UTF-8): deploy/logo.png\n\
         outboard: warning: skill deploy: no front matter — it is not offered to the model\n"
    );
    let Some(Method::SkillsImport(params)) = seen.recv().await else { panic!() };
    let sent: Vec<&str> = params.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(sent, ["deploy/SKILL.md", "deploy/run.sh", "review/SKILL.md"]);
    assert_eq!(seen.recv().await, Some(Method::SkillsList(outboard_shared::Empty {})));
}

#[tokio::test]
async fn skills_import_of_nothing_is_a_usage_error() {
    let tmp = tempfile::tempdir().unwrap();
    write(&tmp.path().join("notes/a.md"), "x");
    let command = SkillsCommand::Import(SkillsImportArgs {
        connect: connect("ws://127.0.0.1:1"),
        dir: tmp.path().to_owned(),
    });
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(skills(&command, &mut out, &mut err).await, exit::USAGE);
    let err = String::from_utf8(err).unwrap();
    assert!(err.contains("warning: skipped notes/: no SKILL.md"), "{err}");
    assert!(err.contains("no skills to import from"), "{err}");
}

#[tokio::test]
async fn skills_cat_and_ls() {
    let (url, mut seen) = fake_server(Script::default()).await;
    let command = SkillsCommand::Cat(SkillsCatArgs {
        connect: connect(&url),
        name: "deploy".into(),
        file: None,
    });
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(skills(&command, &mut out, &mut err).await, 0);
    assert_eq!(out, FAKE_CONTENT.as_bytes());
    let Some(Method::FilesRead(read)) = seen.recv().await else { panic!() };
    assert_eq!(read.path, "/skills/deploy/SKILL.md");

    let (url, _) = fake_server(Script::default()).await;
    let command = SkillsCommand::Ls(SkillsLsArgs { connect: connect(&url), json: false });
    let mut out = Vec::new();
    assert_eq!(skills(&command, &mut out, &mut err).await, 0);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "deploy  Ship it  2 files  problem: no front matter\n"
    );
}

#[test]
fn server_refusals_exit_1_and_connection_trouble_3() {
    let server = |code| ClientError::Server {
        method: "files/read",
        error: outboard_shared::ErrorBody::new(code, "m"),
    };
    for code in [ErrorCode::NotFound, ErrorCode::Conflict, ErrorCode::BadRequest] {
        assert_eq!(FilesError::Client(server(code)).exit_code(), exit::FAILED, "{code:?}");
    }
    assert_eq!(FilesError::Client(server(ErrorCode::Unauthorized)).exit_code(), exit::CONNECT);
    assert_eq!(FilesError::Client(ClientError::Closed { reason: None }).exit_code(), exit::CONNECT);
    let deleted = FilesReadResponse {
        file: file_version("/memory/a.md", 2, FileOp::Delete),
        content: String::new(),
    };
    let err = print_content(&deleted, &mut Vec::new()).unwrap_err();
    assert_eq!(err.exit_code(), exit::FAILED);
    assert!(err.to_string().starts_with("/memory/a.md is deleted (v2 by ada)"));
}
