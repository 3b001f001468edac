//! The shadow repositories against the real `git`.

use super::*;

#[tokio::test]
async fn a_git_lock_left_by_a_killed_server_does_not_stop_the_next_one() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "one").unwrap();
    let session = SessionId("s_lock".into());
    let first = Sources::new(data.path(), None).checkpoint(&session, ws.path()).await.unwrap();

    // A server SIGKILLed while git held the shadow's index leaves git's lock file behind.
    let sources = Sources::new(data.path(), None);
    let lock = sources.index(&session).with_extension("index.lock");
    std::fs::write(&lock, "").unwrap();
    std::fs::write(ws.path().join("a.txt"), "two").unwrap();
    let second = sources.checkpoint(&session, ws.path()).await.unwrap();
    assert_ne!(first, second);
    assert!(!lock.exists());
}
