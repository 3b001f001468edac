use super::*;
use pretty_assertions::assert_eq;

struct Fixture {
    _dir: tempfile::TempDir,
    fs: OrgFs,
    acme: OrgId,
    other: OrgId,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = outboard_store::pgtest::open_test_store(&dir.path().join("outboard.db")).unwrap();
    let (alice, _) = store.add_user("acme", "alice").await.unwrap();
    let (eve, _) = store.add_user("evil", "eve").await.unwrap();
    let fs = OrgFs::new(store, dir.path().join("orgs"));
    Fixture { _dir: dir, fs, acme: alice.org_id, other: eve.org_id }
}

fn p(path: &str) -> OrgPath {
    OrgPath::parse(path).unwrap()
}

fn by(user: &str, session: Option<&str>) -> Author {
    Author { user: user.into(), session: session.map(|s| SessionId(s.into())) }
}

#[tokio::test]
async fn versions_history_delete_and_restore() {
    let f = fixture().await;
    let path = p("/memory/deploys.md");
    let w1 =
        f.fs.write(
            &f.acme,
            &path,
            "one\n".into(),
            &by("alice", Some("s_a")),
            FileOp::Write,
            Precondition::Version(0),
        )
        .await
        .unwrap();
    assert_eq!((w1.file.version, w1.changed), (1, true));
    let same = f
        .fs
        .write(&f.acme, &path, "one\n".into(), &by("alice", None), FileOp::Write, Precondition::Any)
        .await
        .unwrap();
    assert_eq!((same.file.version, same.changed), (1, false), "identical content makes no version");
    f.fs.write(
        &f.acme,
        &path,
        "two\n".into(),
        &by("bob", None),
        FileOp::Write,
        Precondition::Version(1),
    )
    .await
    .unwrap();
    let gone = f.fs.delete(&f.acme, &path, &by("bob", None), Precondition::Any).await.unwrap();
    assert!(gone.file.deleted);
    let err = f.fs.read(&f.acme, &path, None).await.unwrap_err();
    assert!(matches!(err, FsError::NotFound(_)));
    assert!(err.to_string().contains("deleted (v3, deleted by bob"), "{err}");
    let restored = f.fs.restore(&f.acme, &path, 1, &by("carol", None)).await.unwrap();
    assert_eq!((restored.file.version, restored.file.restored_from), (4, Some(1)));
    let (file, text) = f.fs.read(&f.acme, &path, None).await.unwrap();
    assert_eq!((file.version, text.as_str()), (4, "one\n"));
    let (_, old) = f.fs.read(&f.acme, &path, Some(2)).await.unwrap();
    assert_eq!(old, "two\n");
    let history = f.fs.history(&f.acme, &path).await.unwrap();
    let ops: Vec<_> = history.iter().map(|v| (v.version, v.op, v.author.as_str())).collect();
    assert_eq!(
        ops,
        vec![
            (1, FileOp::Write, "alice"),
            (2, FileOp::Write, "bob"),
            (3, FileOp::Delete, "bob"),
            (4, FileOp::Restore, "carol"),
        ]
    );
    assert_eq!(history[0].session, Some(SessionId("s_a".into())));
    assert!(matches!(f.fs.read(&f.acme, &path, Some(9)).await, Err(FsError::NotFound(_))));
}

#[tokio::test]
async fn a_stale_write_is_refused_naming_the_author() {
    let f = fixture().await;
    let path = p("/memory/a.md");
    f.fs.write(&f.acme, &path, "x".into(), &by("alice", None), FileOp::Write, Precondition::Any)
        .await
        .unwrap();
    f.fs.write(
        &f.acme,
        &path,
        "y".into(),
        &by("bob", Some("s_b")),
        FileOp::Write,
        Precondition::Version(1),
    )
    .await
    .unwrap();
    let err =
        f.fs.write(
            &f.acme,
            &path,
            "z".into(),
            &by("alice", None),
            FileOp::Write,
            Precondition::Version(1),
        )
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, FsError::Conflict(_)));
    assert!(
        msg.contains("changed since v1") && msg.contains("v2, written by bob in session s_b"),
        "{msg}"
    );
    let new =
        f.fs.write(
            &f.acme,
            &p("/memory/a.md"),
            "n".into(),
            &by("carol", None),
            FileOp::Write,
            Precondition::Version(0),
        )
        .await
        .unwrap_err();
    assert!(new.to_string().contains("already exists"), "{new}");
    let (_, text) = f.fs.read(&f.acme, &path, None).await.unwrap();
    assert_eq!(text, "y");
}

#[tokio::test]
async fn concurrent_edits_of_different_lines_both_land() {
    let f = fixture().await;
    let path = p("/memory/shared.md");
    f.fs.write(
        &f.acme,
        &path,
        "alpha\nbeta\ngamma\n".into(),
        &by("alice", None),
        FileOp::Write,
        Precondition::Any,
    )
    .await
    .unwrap();
    let edits = (0..20).map(|i| {
        let fs = f.fs.clone();
        let (org, path) = (f.acme.clone(), path.clone());
        async move {
            let line = if i % 2 == 0 { "alpha" } else { "gamma" };
            let who = by(&format!("u{i}"), None);
            fs.edit(&org, &path, &who, move |text| {
                Ok((text.replacen(line, &format!("{line} {i}"), 1), ()))
            })
            .await
        }
    });
    let results = futures_util::future::join_all(edits).await;
    assert!(results.iter().all(|r| r.is_ok()));
    let (file, text) = f.fs.read(&f.acme, &path, None).await.unwrap();
    assert_eq!(file.version, 21);
    for i in 0..20 {
        assert!(text.contains(&format!(" {i}")), "edit {i} lost: {text}");
    }
    let refused =
        f.fs.edit(&f.acme, &path, &by("x", None), |_| {
            Err::<(String, ()), _>("String to replace not found".into())
        })
        .await
        .unwrap_err();
    match refused {
        FsError::Rejected { current, .. } => assert_eq!(current.version, 21),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn files_and_directories_never_collide() {
    let f = fixture().await;
    let a = by("alice", None);
    f.fs.write(&f.acme, &p("/memory/a"), "file".into(), &a, FileOp::Write, Precondition::Any)
        .await
        .unwrap();
    let under =
        f.fs.write(&f.acme, &p("/memory/a/b"), "x".into(), &a, FileOp::Write, Precondition::Any)
            .await;
    assert!(under.unwrap_err().to_string().contains("/memory/a is a file"));
    f.fs.write(&f.acme, &p("/memory/d/e"), "x".into(), &a, FileOp::Write, Precondition::Any)
        .await
        .unwrap();
    let over =
        f.fs.write(&f.acme, &p("/memory/d"), "x".into(), &a, FileOp::Write, Precondition::Any)
            .await;
    assert!(over.unwrap_err().to_string().contains("/memory/d is a directory"));
    let root =
        f.fs.write(&f.acme, &p("/skills"), "x".into(), &a, FileOp::Write, Precondition::Any).await;
    assert!(root.unwrap_err().to_string().contains("is a directory"));
    let big = "x".repeat(MAX_ORG_FILE_BYTES + 1);
    let too_big =
        f.fs.write(&f.acme, &p("/memory/big"), big, &a, FileOp::Write, Precondition::Any).await;
    assert!(matches!(too_big, Err(FsError::Invalid(_))));
    // After deleting the file, the path can become a directory.
    f.fs.delete(&f.acme, &p("/memory/a"), &a, Precondition::Any).await.unwrap();
    f.fs.write(&f.acme, &p("/memory/a/b"), "x".into(), &a, FileOp::Write, Precondition::Any)
        .await
        .unwrap();
}

#[tokio::test]
async fn orgs_are_isolated_and_listing_is_scoped() {
    let f = fixture().await;
    let a = by("alice", None);
    for path in ["/memory/MEMORY.md", "/memory/notes/x.md", "/memoryx.md", "/skills/s/SKILL.md"] {
        if let Ok(path) = OrgPath::parse(path) {
            f.fs.write(&f.acme, &path, "secret".into(), &a, FileOp::Write, Precondition::Any)
                .await
                .unwrap();
        }
    }
    let all: Vec<String> =
        f.fs.list(&f.acme, None, false).await.unwrap().into_iter().map(|v| v.path).collect();
    assert_eq!(all, vec!["/memory/MEMORY.md", "/memory/notes/x.md", "/skills/s/SKILL.md"]);
    let notes = f.fs.list(&f.acme, Some(&p("/memory/notes")), false).await.unwrap();
    assert_eq!(notes.len(), 1);
    assert!(f.fs.list(&f.other, None, true).await.unwrap().is_empty());
    assert!(matches!(
        f.fs.read(&f.other, &p("/memory/MEMORY.md"), None).await,
        Err(FsError::NotFound(_))
    ));
    assert!(f.fs.memory_md(&f.other).await.unwrap().is_none());
    let memory = f.fs.memory_md(&f.acme).await.unwrap().map(|(_, text)| text);
    assert_eq!(memory.as_deref(), Some("secret"));
    let (dirs, _) = f.fs.project(&f.other).await.unwrap();
    assert!(std::fs::read_dir(&dirs.memory).unwrap().next().is_none());
}

#[tokio::test]
async fn skills_are_indexed_from_front_matter() {
    let f = fixture().await;
    let files = vec![
        (
            p("/skills/deploy/SKILL.md"),
            "---\nname: deploy\ndescription: Ship the service to prod\n---\n# Deploy\n".to_owned(),
        ),
        (p("/skills/deploy/run.sh"), "echo deploy\n".to_owned()),
        (
            p("/skills/folded/SKILL.md"),
            "---\nname: folded\ndescription: >\n  Long text\n  on two lines\n---\n".to_owned(),
        ),
        (p("/skills/bare/notes.md"), "no skill file".to_owned()),
        (p("/skills/wrong/SKILL.md"), "---\nname: other\ndescription: \"x\"\n---\n".to_owned()),
    ];
    let (written, unchanged) =
        f.fs.import(&f.acme, files.clone(), &by("alice", None)).await.unwrap();
    assert_eq!((written.len(), unchanged), (5, 0));
    let (again, unchanged) = f.fs.import(&f.acme, files, &by("alice", None)).await.unwrap();
    assert_eq!((again.len(), unchanged), (0, 5), "re-importing the same files makes no version");
    let skills = f.fs.skills(&f.acme).await.unwrap();
    let view: Vec<_> = skills
        .iter()
        .map(|s| (s.name.as_str(), s.description.as_str(), s.files, s.problem.is_some()))
        .collect();
    assert_eq!(
        view,
        vec![
            ("bare", "", 1, true),
            ("deploy", "Ship the service to prod", 2, false),
            ("folded", "Long text on two lines", 1, false),
            ("wrong", "x", 1, true),
        ]
    );
}

#[tokio::test]
async fn the_projection_follows_the_store_incrementally() {
    let f = fixture().await;
    let a = by("alice", None);
    for i in 0..5 {
        let path = p(&format!("/memory/n{i}.md"));
        f.fs.write(&f.acme, &path, format!("note {i}\n"), &a, FileOp::Write, Precondition::Any)
            .await
            .unwrap();
    }
    let (dirs, applied) = f.fs.project(&f.acme).await.unwrap();
    assert_eq!(applied, 5);
    assert_eq!(std::fs::read_to_string(dirs.memory.join("n3.md")).unwrap(), "note 3\n");
    let (_, applied) = f.fs.project(&f.acme).await.unwrap();
    assert_eq!(applied, 0, "nothing changed");
    f.fs.write(
        &f.acme,
        &p("/memory/n1.md"),
        "changed\n".into(),
        &a,
        FileOp::Write,
        Precondition::Any,
    )
    .await
    .unwrap();
    f.fs.delete(&f.acme, &p("/memory/n2.md"), &a, Precondition::Any).await.unwrap();
    f.fs.write(
        &f.acme,
        &p("/skills/s/deep/f.txt"),
        "deep".into(),
        &a,
        FileOp::Write,
        Precondition::Any,
    )
    .await
    .unwrap();
    let (_, applied) = f.fs.project(&f.acme).await.unwrap();
    assert_eq!(applied, 3, "only what changed");
    assert_eq!(std::fs::read_to_string(dirs.memory.join("n1.md")).unwrap(), "changed\n");
    assert!(!dirs.memory.join("n2.md").exists());
    assert_eq!(std::fs::read_to_string(dirs.skills.join("s/deep/f.txt")).unwrap(), "deep");
    // A file replaced by a directory of the same name, and the reverse.
    f.fs.delete(&f.acme, &p("/skills/s/deep/f.txt"), &a, Precondition::Any).await.unwrap();
    f.fs.write(
        &f.acme,
        &p("/skills/s/deep"),
        "now a file".into(),
        &a,
        FileOp::Write,
        Precondition::Any,
    )
    .await
    .unwrap();
    f.fs.project(&f.acme).await.unwrap();
    assert_eq!(std::fs::read_to_string(dirs.skills.join("s/deep")).unwrap(), "now a file");
    // A new process (a fresh OrgFs) does a full pass that also removes strays.
    std::fs::write(dirs.memory.join("stray.txt"), "left by a crash").unwrap();
    let fresh = OrgFs::new(f.fs.store.clone(), f.fs.projection.dir.clone());
    fresh.project(&f.acme).await.unwrap();
    assert!(!dirs.memory.join("stray.txt").exists());
    assert_eq!(std::fs::read_to_string(dirs.memory.join("n4.md")).unwrap(), "note 4\n");
}

#[tokio::test]
async fn changes_are_broadcast_with_their_org() {
    let f = fixture().await;
    let mut rx = f.fs.subscribe();
    f.fs.write(
        &f.acme,
        &p("/memory/a"),
        "x".into(),
        &by("alice", Some("s_1")),
        FileOp::Write,
        Precondition::Any,
    )
    .await
    .unwrap();
    let change = rx.recv().await.unwrap();
    assert_eq!(change.org_id, f.acme);
    assert_eq!((change.file.path.as_str(), change.file.version), ("/memory/a", 1));
    // An unchanged write announces nothing.
    f.fs.write(
        &f.acme,
        &p("/memory/a"),
        "x".into(),
        &by("alice", None),
        FileOp::Write,
        Precondition::Any,
    )
    .await
    .unwrap();
    assert!(rx.try_recv().is_err());
}

#[test]
fn front_matter_edge_cases() {
    let (m, problem) = front_matter("no front matter");
    assert!(m.is_empty() && problem.is_some());
    let (m, problem) = front_matter("---\nname: 'q'\ndescription: \"a: b\"\n");
    assert!(m.is_empty() && problem.unwrap().contains("closing"));
    let (m, problem) = front_matter("---\nname: 'q'\ndescription: \"a: b\"\nn: 3\nl: [x]\n---\n");
    assert_eq!(m.get("name").map(String::as_str), Some("q"));
    assert_eq!(m.get("description").map(String::as_str), Some("a: b"));
    assert_eq!(m.get("n").map(String::as_str), Some("3"));
    assert!(!m.contains_key("l") && problem.is_none());
    // Not YAML: the problem names the file's line.
    let (_, problem) = front_matter("---\nname: q\ndescription: a: b\n---\n");
    assert!(problem.unwrap().contains("line 3: "));
}
