use super::*;

async fn store_in(dir: &Path) -> (Store, UserRow) {
    let store = outboard_store::pgtest::open_test_store(&dir.join("outboard.db")).unwrap();
    let (user, _token) = store.add_user("acme", "ada").await.unwrap();
    (store, user)
}

async fn insert(store: &Store, user: &UserRow, id: &str) {
    let (id, org, uid) = (id.to_owned(), user.org_id.0.clone(), user.id.0.clone());
    store
        .call(move |c| {
            c.execute(
                "INSERT INTO uploads (id, org_id, user_id, bytes, branch, created_at)
                 VALUES (?1, ?2, ?3, 1, NULL, ?4)",
                outboard_store::params![id, org, uid, outboard_base::util::now_rfc3339()],
            )?;
            Ok(())
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn the_sweep_removes_old_uploads_and_what_a_crash_left() {
    let data = tempfile::tempdir().unwrap();
    let (store, user) = store_in(data.path()).await;
    let dir = uploads_dir(data.path());
    std::fs::create_dir_all(&dir).unwrap();
    insert(&store, &user, "up_old").await;
    std::fs::write(dir.join("up_old.tar"), b"x").unwrap();
    insert(&store, &user, "up_kept").await;
    std::fs::write(dir.join("up_kept.tar"), b"x").unwrap();
    std::fs::write(dir.join("up_crash.tar.part"), b"x").unwrap();
    std::fs::write(dir.join("up_norow.tar"), b"x").unwrap();

    // Nothing is a day old yet: only the crash's leftovers go, at start.
    assert_eq!(sweep(&store, data.path(), UNUSED_UPLOAD_TTL, true).await.unwrap(), 0);
    let mut left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["up_kept.tar", "up_old.tar"]);

    // Everything is older than zero seconds.
    assert_eq!(sweep(&store, data.path(), Duration::ZERO, false).await.unwrap(), 2);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    let dest = tempfile::tempdir().unwrap();
    let err = materialize(&store, data.path(), &user, "up_kept", dest.path(), &|_: &str, _, _| {})
        .await
        .unwrap_err();
    assert!(matches!(err, UploadError::NotFound(_)), "{err}");
}

#[test]
fn member_paths_are_checked() {
    assert_eq!(checked_path(Path::new("./a/b")).unwrap(), PathBuf::from("a/b"));
    assert!(checked_path(Path::new("a/../../b")).unwrap_err().contains(".."));
    assert!(checked_path(Path::new("/etc/passwd")).unwrap_err().contains("absolute"));
    assert!(checked_path(Path::new("x/.git/hooks/pre-commit")).unwrap_err().contains(".git"));
    assert!(checked_path(Path::new(".")).is_err());
    // What git itself takes for `.git` (it refuses these in an index on every platform).
    for path in [".GIT/config", "a/.Git/config", ".git./x", ".git  /x", "GIT~1/config", ".git:x"] {
        assert!(checked_path(Path::new(path)).unwrap_err().contains(".git"), "{path}");
    }
    assert_eq!(checked_path(Path::new(".github/x")).unwrap(), PathBuf::from(".github/x"));
    assert_eq!(checked_path(Path::new(".gitignore")).unwrap(), PathBuf::from(".gitignore"));
}
