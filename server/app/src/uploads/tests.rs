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

/// A tar of `names` (long ones get GNU long-name headers), each holding `data`.
fn tar_of(names: &[String], data: &[u8]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for name in names {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(0o644);
        header.set_size(data.len() as u64);
        builder.append_data(&mut header, name, data).unwrap();
    }
    builder.into_inner().unwrap()
}

#[test]
fn the_tally_counts_members_as_bytes_arrive_in_any_chunks() {
    let mut names: Vec<String> = (0..50).map(|i| format!("f{i}")).collect();
    // Longer than a header's 100 bytes: a GNU long-name header precedes each, not a member.
    names.extend((0..5).map(|i| format!("{}/{i}", "long".repeat(40))));
    let archive = tar_of(&names, &[7u8; 700]);
    for step in [1, 7, 512, 4096, archive.len()] {
        let mut tally = limits::Tally::default();
        for chunk in archive.chunks(step) {
            tally.feed(chunk);
        }
        assert_eq!(tally.members(), 55, "chunks of {step}");
    }
    // Empty files: one header each, so 300,000 of them count 300,000 whatever their bytes.
    let empty: Vec<String> = (0..1000).map(|i| format!("e{i}")).collect();
    let mut tally = limits::Tally::default();
    tally.feed(&tar_of(&empty, b""));
    assert_eq!(tally.members(), 1000);
}

#[test]
fn the_quota_check_names_the_first_bound_passed() {
    let quotas = outboard_org::quota::Quotas {
        upload_bytes_per_day: 100,
        upload_files_per_day: 10,
        pending_uploads_per_user: 2,
        pending_upload_bytes_per_user: 50,
        ..Default::default()
    };
    let at = |org_bytes, org_files, user_pending, user_pending_bytes| limits::Usage {
        org_bytes,
        org_files,
        user_pending,
        user_pending_bytes,
    };
    let bound = |u: limits::Usage| limits::check(&quotas, &u, "acme").err().map(|(b, _)| b);
    assert_eq!(bound(at(100, 10, 2, 50)), None, "at every quota is still within");
    assert_eq!(bound(at(0, 0, 3, 0)), Some(limits::Bound::UserPending));
    assert_eq!(bound(at(0, 0, 1, 51)), Some(limits::Bound::UserPendingBytes));
    assert_eq!(bound(at(101, 0, 1, 0)), Some(limits::Bound::OrgBytes));
    assert_eq!(bound(at(0, 11, 1, 0)), Some(limits::Bound::OrgFiles));
    let (_, message) = limits::check(&quotas, &at(0, 11, 1, 0), "acme").unwrap_err();
    assert!(message.contains("admin quota set --org acme upload_files_per_day"), "{message}");
}

fn git_in(dir: &Path, args: &[&str], stdin: &str) -> String {
    use std::io::Write as _;
    let mut child = std::process::Command::new("git")
        .args(["-c", "user.name=T", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A repository with a history: files in nested directories changed over ten commits (git
/// stores later trees as deltas), bundled; its paths and depth are known.
#[test]
fn a_real_bundle_with_deltas_is_read_and_measured() {
    let repo = tempfile::tempdir().unwrap();
    let dir = repo.path();
    git_in(dir, &["init", "-q", "-b", "main"], "");
    for round in 0..10 {
        // Round 0 writes 200 files, each later round changes one: its trees differ from the
        // ones before by an entry, which git stores as deltas.
        for i in (0..200).filter(|i| round == 0 || *i == round) {
            let path = dir.join(format!("a/b/c/file{i}.txt"));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, format!("file {i}, round {round}\n")).unwrap();
        }
        std::fs::write(dir.join("top.txt"), format!("round {round}\n")).unwrap();
        git_in(dir, &["add", "-A"], "");
        git_in(dir, &["commit", "-q", "-m", &format!("round {round}")], "");
    }
    git_in(dir, &["bundle", "create", "-q", "h.bundle", "HEAD", "main"], "");
    let checked = bundle::check(&dir.join("h.bundle"), 1000, 1024).unwrap();
    assert_eq!((checked.entries, checked.depth), (201, 4), "{checked:?}");
    assert!(checked.rebuilt > 0, "no tree came as a delta: {checked:?}");
    // The same bundle against smaller bounds.
    let err = bundle::check(&dir.join("h.bundle"), 200, 1024).unwrap_err();
    assert!(err.to_string().contains("more than 200 paths"), "{err}");
    let err = bundle::check(&dir.join("h.bundle"), 1000, 3).unwrap_err();
    assert!(err.to_string().contains("deeper than 3 directories"), "{err}");
}

fn zlib(data: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
    z.write_all(data).unwrap();
    z.finish().unwrap()
}

/// A pack object header: `kind` (1 commit, 2 tree, 3 blob, 6 offset delta) and `size`.
fn object_header(kind: u8, size: u64) -> Vec<u8> {
    let mut out = vec![(kind << 4) | (size & 15) as u8];
    let mut rest = size >> 4;
    while rest > 0 {
        *out.last_mut().unwrap() |= 0x80;
        out.push((rest & 0x7f) as u8);
        rest >>= 7;
    }
    out
}

fn offset_delta_base(back: u64) -> Vec<u8> {
    let mut bytes = vec![(back & 0x7f) as u8];
    let mut n = back >> 7;
    while n > 0 {
        n -= 1;
        bytes.push(0x80 | (n & 0x7f) as u8);
        n >>= 7;
    }
    bytes.reverse();
    bytes
}

/// A bundle naming `tip` as `refs/heads/main`, with `count` in its pack header and `objects`.
fn bundle_file(dir: &Path, tip: &str, count: u32, objects: &[u8]) -> PathBuf {
    let mut out = format!("# v2 git bundle\n{tip} refs/heads/main\n\n").into_bytes();
    out.extend_from_slice(b"PACK");
    out.extend_from_slice(&2u32.to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
    out.extend_from_slice(objects);
    let path = dir.join("b.bundle");
    std::fs::write(&path, out).unwrap();
    path
}

#[test]
fn a_bundle_past_its_bounds_is_refused_from_its_headers() {
    let dir = tempfile::tempdir().unwrap();
    let tip = "1".repeat(40);
    let refused = |path: &Path| bundle::check(path, 1_000_000, 1024).unwrap_err().to_string();

    // Objects: the pack header's count, before any object is read.
    let path = bundle_file(dir.path(), &tip, bundle::MAX_OBJECTS as u32 + 1, b"");
    assert!(refused(&path).contains("1000001 objects"), "{}", refused(&path));

    // Inflated bytes: an object declaring more than the bound, refused before it is inflated.
    let mut objects = object_header(3, bundle::MAX_INFLATED_BYTES + 1);
    objects.extend(zlib(b"tiny"));
    let path = bundle_file(dir.path(), &tip, 1, &objects);
    assert!(refused(&path).contains("inflate to more than"), "{}", refused(&path));

    // Delta chain: a commit, then offset deltas each on the one before, one longer than allowed.
    let mut objects = Vec::new();
    let mut offsets = Vec::new();
    let body = b"tree 0000000000000000000000000000000000000000\n";
    let pack_start = "# v2 git bundle\n".len() + 41 + "refs/heads/main\n\n".len() + 12;
    offsets.push(pack_start as u64);
    objects.extend(object_header(1, body.len() as u64));
    objects.extend(zlib(body));
    for _ in 0..=bundle::MAX_DELTA_CHAIN {
        let delta = [body.len() as u8, body.len() as u8, body.len() as u8]
            .into_iter()
            .chain(body.iter().copied())
            .collect::<Vec<u8>>();
        let here = (pack_start + objects.len()) as u64;
        objects.extend(object_header(6, delta.len() as u64));
        objects.extend(offset_delta_base(here - offsets.last().unwrap()));
        objects.extend(zlib(&delta));
        offsets.push(here);
    }
    let path = bundle_file(dir.path(), &tip, offsets.len() as u32, &objects);
    assert!(refused(&path).contains("delta chain is longer than 4095"), "{}", refused(&path));

    // Delta bytes: a delta on a commit declaring a result past the bound.
    let mut objects = object_header(1, body.len() as u64);
    objects.extend(zlib(body));
    let mut delta = vec![body.len() as u8];
    let mut size = bundle::MAX_DELTA_BYTES + 1;
    while size >= 0x80 {
        delta.push(0x80 | (size & 0x7f) as u8);
        size >>= 7;
    }
    delta.push(size as u8);
    delta.extend([0x91, 0, body.len() as u8]); // copy the base, once
    let here = (pack_start + objects.len()) as u64;
    objects.extend(object_header(6, delta.len() as u64));
    objects.extend(offset_delta_base(here - pack_start as u64));
    objects.extend(zlib(&delta));
    let path = bundle_file(dir.path(), &tip, 2, &objects);
    assert!(refused(&path).contains("makes more than"), "{}", refused(&path));

    // Prerequisites: a thin bundle cannot be restored in a new repository.
    let path = dir.path().join("thin.bundle");
    std::fs::write(&path, format!("# v2 git bundle\n-{tip} base\n{tip} refs/heads/main\n\n"))
        .unwrap();
    assert!(refused(&path).contains("prerequisites"), "{}", refused(&path));
}
