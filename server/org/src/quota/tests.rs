use super::*;
use crate::orgfs::{Author, FsError, OrgFs, Precondition};
use outboard_shared::FileOp;
use outboard_store::Durability;
use outboard_vfs::OrgPath;
use pretty_assertions::assert_eq;

struct Fixture {
    dir: tempfile::TempDir,
    store: Store,
    alice: UserRow,
    eve: UserRow,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = outboard_store::pgtest::open_test_store(&dir.path().join("outboard.db")).unwrap();
    let (alice, _) = store.add_user("acme", "alice").await.unwrap();
    let (eve, _) = store.add_user("evil", "eve").await.unwrap();
    Fixture { dir, store, alice, eve }
}

#[test]
fn defaults_are_the_documented_ones() {
    assert_eq!(
        Quotas::default(),
        Quotas {
            workspace_bytes: 10 * 1024 * 1024 * 1024,
            org_file_versions: 100_000,
            org_file_bytes: 1024 * 1024 * 1024,
            sessions_per_hour: 120,
            title_bytes: 256,
            live_sandboxes: 8,
            checkpoint_bytes: 2 * 1024 * 1024 * 1024,
            upload_bytes_per_day: 10 * 1024 * 1024 * 1024,
            upload_files_per_day: 2_000_000,
            pending_uploads_per_user: 8,
            pending_upload_bytes_per_user: 1024 * 1024 * 1024,
        }
    );
}

#[test]
fn values_and_sizes_parse_and_print() {
    let ws = QuotaKey::WorkspaceBytes;
    assert_eq!(parse_value(ws, "default").unwrap(), None);
    assert_eq!(parse_value(ws, "4096").unwrap(), Some(4096));
    assert_eq!(parse_value(ws, "10GiB").unwrap(), Some(10 << 30));
    assert_eq!(parse_value(ws, "64 KiB").unwrap(), Some(64 << 10));
    assert!(matches!(
        parse_value(QuotaKey::SessionsPerHour, "2GiB"),
        Err(QuotaError::InvalidValue(_))
    ));
    assert!(matches!(parse_value(ws, "-1"), Err(QuotaError::InvalidValue(_))));
    assert!(matches!(parse_value(ws, "99999999999GiB"), Err(QuotaError::InvalidValue(_))));
    assert!(matches!("disk".parse::<QuotaKey>(), Err(QuotaError::UnknownKey(_))));
    assert_eq!(human_bytes(512), "512 B");
    assert_eq!(human_bytes(10 << 30), "10 GiB");
    assert_eq!(human_bytes((10 << 30) + (1 << 28)), "10.2 GiB");
    assert_eq!(
        exceeded_message((10 << 30) + (1 << 28), 10 << 30),
        "workspace quota exceeded: 10.2 GiB used of 10 GiB; delete files in /workspace (build \
         outputs, caches, downloads) to get back under it. Until then Write and Edit that add \
         data are refused."
    );
}

#[tokio::test]
async fn admin_set_show_and_reset() {
    let f = fixture().await;
    let shown = show(&f.store, "acme").await.unwrap();
    assert_eq!(
        shown,
        "org acme\n\
         workspace_bytes    10737418240 (10 GiB)  [default]\n\
         org_file_versions  100000  [default]  (used: 0)\n\
         org_file_bytes     1073741824 (1 GiB)  [default]  (used: 0 B)\n\
         sessions_per_hour  120  [default]  (used: 0 in the last hour)\n\
         title_bytes        256  [default]\n\
         live_sandboxes     8  [default]\n\
         checkpoint_bytes   2147483648 (2 GiB)  [default]\n\
         upload_bytes_per_day 10737418240 (10 GiB)  [default]  (used: 0 B)\n\
         upload_files_per_day 2000000  [default]  (used: 0)\n\
         pending_uploads_per_user 8  [default]\n\
         pending_upload_bytes_per_user 1073741824 (1 GiB)  [default]\n"
    );
    let after = set(&f.store, "acme", "live_sandboxes", "2").await.unwrap();
    assert!(after.contains("live_sandboxes     2  [set]\n"), "{after}");
    set(&f.store, "acme", "workspace_bytes", "1MiB").await.unwrap();
    let q = Quotas::for_org(&f.store, &f.alice.org_id).await.unwrap();
    assert_eq!((q.live_sandboxes, q.workspace_bytes), (2, 1 << 20));
    // Another org keeps its defaults.
    assert_eq!(Quotas::for_org(&f.store, &f.eve.org_id).await.unwrap(), Quotas::default());
    set(&f.store, "acme", "live_sandboxes", "default").await.unwrap();
    assert_eq!(Quotas::for_org(&f.store, &f.alice.org_id).await.unwrap().live_sandboxes, 8);
    assert!(matches!(set(&f.store, "nope", "title_bytes", "1").await, Err(QuotaError::NoOrg(_))));
    let unknown = set(&f.store, "acme", "disk", "1").await.unwrap_err().to_string();
    assert_eq!(
        unknown,
        "unknown quota \"disk\": use one of workspace_bytes, org_file_versions, org_file_bytes, \
         sessions_per_hour, title_bytes, live_sandboxes, checkpoint_bytes, \
         upload_bytes_per_day, upload_files_per_day, pending_uploads_per_user, \
         pending_upload_bytes_per_user"
    );
}

#[tokio::test]
async fn session_titles_and_sessions_per_hour_are_bounded() {
    let f = fixture().await;
    set(&f.store, "acme", "sessions_per_hour", "2").await.unwrap();
    set(&f.store, "acme", "title_bytes", "5").await.unwrap();
    let long = create_session(&f.store, &f.alice, "123456", "m").await.unwrap_err();
    assert_eq!(long.code, ErrorCode::QuotaExceeded);
    assert_eq!(
        long.message,
        "the title is 6 bytes; the limit is 5 bytes (title_bytes quota): shorten it"
    );
    create_session(&f.store, &f.alice, "12345", "m").await.unwrap();
    create_session(&f.store, &f.alice, "", "m").await.unwrap();
    let third = create_session(&f.store, &f.alice, "", "m").await.unwrap_err();
    assert_eq!(third.code, ErrorCode::QuotaExceeded);
    assert!(
        third.message.starts_with(
            "your org created 2 sessions in the last hour, its sessions_per_hour quota (2)"
        ) && third
            .message
            .contains("`outboard-server admin quota set --org acme sessions_per_hour N`"),
        "{}",
        third.message
    );
    assert_eq!(f.store.list_sessions(&f.alice.org_id, 10).await.unwrap().len(), 2);
    // The count is per org, and an hour old sessions no longer count.
    create_session(&f.store, &f.eve, "", "m").await.unwrap();
    f.store
        .call(|c| {
            c.execute("UPDATE sessions SET created_at = '2000-01-01T00:00:00.000Z'", ())?;
            Ok(())
        })
        .await
        .unwrap();
    create_session(&f.store, &f.alice, "", "m").await.unwrap();
}

fn p(path: &str) -> OrgPath {
    OrgPath::parse(path).unwrap()
}

#[tokio::test]
async fn org_file_versions_and_bytes_are_bounded_in_the_writing_transaction() {
    let f = fixture().await;
    let fs = OrgFs::new(f.store.clone(), f.dir.path().join("orgs"));
    let (acme, evil) = (f.alice.org_id.clone(), f.eve.org_id.clone());
    let by = Author { user: "alice".into(), session: None };
    set(&f.store, "acme", "org_file_versions", "3").await.unwrap();
    set(&f.store, "acme", "org_file_bytes", "10").await.unwrap();
    let write = |path: &'static str, text: &'static str| {
        let (fs, acme, by) = (fs.clone(), acme.clone(), by.clone());
        async move {
            fs.write(&acme, &p(path), text.into(), &by, FileOp::Write, Precondition::Any).await
        }
    };
    write("/memory/a.md", "1234").await.unwrap();
    write("/memory/a.md", "5678").await.unwrap();
    // 8 bytes used: 3 more would pass org_file_bytes.
    let Err(FsError::Quota(message)) = write("/memory/b.md", "abc").await else {
        panic!("the bytes quota must refuse")
    };
    assert_eq!(
        message,
        "this version (3 B) would take the org's files to 11 B of its org_file_bytes quota \
         (10 B); nothing was written. Every version of an org file is kept, so deleting does not \
         free room: keep big or generated data in /workspace instead; an admin can raise it \
         with `outboard-server admin quota set --org acme org_file_bytes N`"
    );
    write("/memory/b.md", "ab").await.unwrap();
    // Three versions kept: a fourth, even a delete, is refused.
    let Err(FsError::Quota(message)) =
        fs.delete(&acme, &p("/memory/b.md"), &by, Precondition::Any).await
    else {
        panic!("the versions quota must refuse")
    };
    assert!(
        message.starts_with("the org's files hold 3 versions, its org_file_versions quota (3)"),
        "{message}"
    );
    // An import that would pass it is refused whole, and counts nothing.
    let batch = vec![(p("/skills/x/SKILL.md"), String::new())];
    assert!(matches!(fs.import(&acme, batch, &by).await, Err(FsError::Quota(_))));
    assert_eq!(fs.history(&acme, &p("/memory/a.md")).await.unwrap().len(), 2);
    // The counter agrees with the versions stored; another org is not charged.
    let counted = f
        .store
        .call(move |c| {
            let usage = org_file_usage(c, &acme)?;
            let real: (i64, i64) = c.query_row(
                "SELECT COUNT(*), SUM(size) FROM org_files WHERE org_id = ?1",
                [&acme.0],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            Ok((usage, (real.0 as u64, real.1 as u64), org_file_usage(c, &evil)?))
        })
        .await
        .unwrap();
    assert_eq!(counted, ((3, 10), (3, 10), (0, 0)));
}

#[test]
fn the_migration_counts_versions_written_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outboard.db");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let org = rt.block_on(async {
        let store = Store::open(&path, Durability::Normal).unwrap();
        let (alice, _) = store.add_user("acme", "alice").await.unwrap();
        let fs = OrgFs::new(store, dir.path().join("orgs"));
        let by = Author { user: "alice".into(), session: None };
        for text in ["a", "bb", "ccc"] {
            fs.write(
                &alice.org_id,
                &p("/memory/m.md"),
                text.into(),
                &by,
                FileOp::Write,
                Precondition::Any,
            )
            .await
            .unwrap();
        }
        alice.org_id
    });
    // Pretend the database predates the quota migration (4), then open it again: the later
    // migrations are undone too, since `migrate` resumes after the highest version applied.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "DROP INDEX events_by_kind;
         DROP TABLE org_quotas; DROP TABLE org_file_usage; DROP INDEX sessions_by_org_created;
         DROP TABLE drive_grants; ALTER TABLE sessions DROP COLUMN workspace_path;
         ALTER TABLE sessions DROP COLUMN source; DROP TABLE org_secrets;
         DROP TABLE session_pushes; DROP TABLE uploads;
         DROP TABLE org_network; DROP TABLE network_log;
         ALTER TABLE sessions DROP COLUMN network; DROP TABLE org_ca;
         DROP TABLE model_usage; ALTER TABLE sessions DROP COLUMN context_window;
         ALTER TABLE sessions DROP COLUMN usage_input; ALTER TABLE sessions DROP COLUMN usage_output;
         ALTER TABLE sessions DROP COLUMN usage_cache_read;
         ALTER TABLE sessions DROP COLUMN usage_cache_write;
         ALTER TABLE sessions DROP COLUMN todos_done; ALTER TABLE sessions DROP COLUMN todos_total;
         ALTER TABLE events DROP COLUMN parent; DROP TABLE org_mcp_servers; DROP TABLE org_tool_policies;
         ALTER TABLE sessions DROP COLUMN model_name;
         DROP TABLE sandbox_hosts; DROP INDEX sessions_by_host; ALTER TABLE sessions DROP COLUMN host;
         DROP TABLE nodes; DROP TABLE session_leases; DROP TABLE org_search; DROP TABLE org_hooks;
         DELETE FROM schema_migrations WHERE version >= 4;",
    )
    .unwrap();
    drop(conn);
    rt.block_on(async {
        let store = Store::open(&path, Durability::Normal).unwrap();
        let usage = store.call(move |c| org_file_usage(c, &org)).await.unwrap();
        assert_eq!(usage, (3, 6));
    });
}

fn ws_file(root: &Path, rel: &str, bytes: usize) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, vec![b'x'; bytes]).unwrap();
}

#[test]
fn measure_counts_blocks_once_and_never_follows_symlinks() {
    let dir = tempfile::tempdir().unwrap();
    let (root, outside) = (dir.path().join("ws"), dir.path().join("outside"));
    std::fs::create_dir_all(&root).unwrap();
    let never = CancellationToken::new();
    let empty = measure(&root, &never, 100).unwrap().bytes;
    ws_file(&root, "a/b/big.bin", 1 << 20);
    let one = measure(&root, &never, 100).unwrap();
    assert!(one.bytes >= empty + (1 << 20), "{one:?}");
    assert!(one.bytes < empty + (1 << 20) + 64 * 1024, "{one:?}");
    // A hard link does not count twice; a symlink to a big file outside counts as a link.
    std::fs::hard_link(root.join("a/b/big.bin"), root.join("again.bin")).unwrap();
    ws_file(&outside, "huge.bin", 4 << 20);
    std::os::unix::fs::symlink(outside.join("huge.bin"), root.join("link")).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("linkdir")).unwrap();
    let linked = measure(&root, &never, 100).unwrap();
    assert!(linked.bytes < one.bytes + 64 * 1024, "{linked:?} vs {one:?}");
    // The walk is bounded and cancellable.
    for i in 0..20 {
        ws_file(&root, &format!("many/{i}"), 1);
    }
    assert!(matches!(measure(&root, &never, 10), Err(MeasureError::TooManyEntries)));
    let cancelled = CancellationToken::new();
    cancelled.cancel();
    for i in 0..1100 {
        ws_file(&root, &format!("more/{i}"), 0);
    }
    assert!(matches!(measure(&root, &cancelled, 10_000), Err(MeasureError::Cancelled)));
}

#[test]
fn a_workspace_that_cannot_be_read_is_not_counted_as_empty() {
    let dir = tempfile::tempdir().unwrap();
    let never = CancellationToken::new();
    let Err(e) = measure(&dir.path().join("gone"), &never, 100) else {
        panic!("a missing workspace must not measure as empty")
    };
    assert!(
        e.to_string()
            .starts_with("cannot measure the workspace's disk usage: /workspace cannot be read"),
        "{e}"
    );
    // An unreadable directory inside (only for an unprivileged user: root reads anything).
    use std::os::unix::fs::PermissionsExt as _;
    let root = dir.path().to_path_buf();
    ws_file(&root, "hidden/big.bin", 1 << 20);
    std::fs::set_permissions(root.join("hidden"), std::fs::Permissions::from_mode(0o000)).unwrap();
    let readable = std::fs::read_dir(root.join("hidden")).is_ok();
    let result = measure(&root, &never, 100);
    std::fs::set_permissions(root.join("hidden"), std::fs::Permissions::from_mode(0o755)).unwrap();
    if !readable {
        let Err(e) = result else { panic!("an unreadable directory must not count as empty") };
        assert!(e.to_string().contains("/workspace/hidden cannot be read"), "{e}");
    }
}

#[tokio::test]
async fn workspace_checks_use_the_orgs_quota() {
    let f = fixture().await;
    let root = f.dir.path().join("ws");
    std::fs::create_dir_all(&root).unwrap();
    let org = f.alice.org_id.clone();
    let never = CancellationToken::new();
    set(&f.store, "acme", "workspace_bytes", "256KiB").await.unwrap();
    assert_eq!(workspace_over(&f.store, &org, &root, &never).await, None);
    assert_eq!(workspace_write_refusal(&f.store, &org, &root, 100 << 10, &never).await, None);
    let refused = workspace_write_refusal(&f.store, &org, &root, 300 << 10, &never).await.unwrap();
    assert!(refused.starts_with("Not written: this write adds 300 KiB"), "{refused}");
    ws_file(&root, "big.bin", 300 << 10);
    let over = workspace_over(&f.store, &org, &root, &never).await.unwrap();
    assert!(over.starts_with("workspace quota exceeded: 30"), "{over}");
    assert!(over.contains(" used of 256 KiB; delete files"), "{over}");
    let refused = workspace_write_refusal(&f.store, &org, &root, 1, &never).await.unwrap();
    assert!(refused.starts_with("Not written: workspace quota exceeded"), "{refused}");
    // A write that adds nothing may still trim the workspace.
    assert_eq!(workspace_write_refusal(&f.store, &org, &root, 0, &never).await, None);
    // The other org's default quota is far away.
    assert_eq!(workspace_over(&f.store, &f.eve.org_id, &root, &never).await, None);
}

#[test]
fn a_directory_swapped_for_a_symlink_never_leads_the_measurement_out() {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir(ws.path().join("d")).unwrap();
    std::fs::write(ws.path().join("d/f"), "x").unwrap();
    // /usr holds tens of thousands of entries on the server's own filesystem.
    std::os::unix::fs::symlink("/usr", ws.path().join("l")).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (stop, d, l) = (stop.clone(), ws.path().join("d"), ws.path().join("l"));
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = renameat_with(CWD, &d, CWD, &l, RenameFlags::EXCHANGE);
            }
        })
    };
    let cancel = CancellationToken::new();
    let mut most = 0;
    for _ in 0..300 {
        let usage = measure(ws.path(), &cancel, 2_000_000).unwrap();
        most = most.max(usage.entries);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().unwrap();
    assert!(most <= 10, "the walk left the workspace: {most} entries seen");
}
