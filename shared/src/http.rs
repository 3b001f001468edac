//! The HTTP endpoints beside the WebSocket, on the same listener, authenticated with the same
//! bearer token (`Authorization: Bearer TOKEN`).

/// `POST`: the body is a working tree as a tar archive (see `docs/PROTOCOL.md`), answered
/// with [`super::UploadResponse`] as JSON; `413` beyond the server's cap.
pub const UPLOADS: &str = "/v1/uploads";
/// `GET /v1/sessions/{id}/diff[?stat=1]`: the workspace's changes against its base as a
/// unified git diff (`text/x-diff`), or `git diff --stat` output.
pub const SESSIONS: &str = "/v1/sessions";
/// The header naming the branch of an upload made from a git work tree.
pub const UPLOAD_BRANCH_HEADER: &str = "x-outboard-branch";
/// The reserved member of an upload's archive holding the branch's history as a
/// `git bundle`; it never lands in the workspace (the server makes `.git` from it).
pub const UPLOAD_HISTORY_BUNDLE: &str = ".outboard-upload/history.bundle";
