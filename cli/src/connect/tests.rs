use outboard_shared::ErrorBody;

use super::*;

fn server(code: ErrorCode) -> ClientError {
    ClientError::Server { method: "session/attach", error: ErrorBody::new(code, "no") }
}

#[test]
fn client_errors_map_onto_the_exit_table() {
    let cases = [
        (ClientError::Unauthorized { message: "no".into() }, exit::CONNECT),
        (ClientError::ProtocolVersion { message: "v9".into() }, exit::CONNECT),
        (
            ClientError::Connect { url: "ws://x".into(), reason: "refused".into(), source: None },
            exit::CONNECT,
        ),
        (ClientError::Closed { reason: None }, exit::CONNECT),
        (ClientError::Insecure { host: "example.com".into() }, exit::USAGE),
        (ClientError::InvalidUrl { url: "http://x".into(), reason: "scheme".into() }, exit::USAGE),
        (ClientError::TooLarge { bytes: 2, limit: 1 }, exit::USAGE),
        (server(ErrorCode::NotFound), exit::USAGE),
        (server(ErrorCode::ShuttingDown), exit::CONNECT),
        (server(ErrorCode::Internal), exit::FAILED),
        (ClientError::Protocol("?".into()), exit::FAILED),
    ];
    for (err, code) in cases {
        assert_eq!(err.exit_code(), code, "{err}");
    }
}

#[test]
fn a_refused_upload_token_exits_like_a_refused_connection() {
    let refused = UploadError::Refused { status: 401, message: "no".into() };
    assert_eq!(refused.exit_code(), exit::CONNECT);
    assert_eq!(UploadError::Url("ftp://x".into()).exit_code(), exit::USAGE);
}

#[test]
fn the_binary_adds_the_hints_that_name_its_flags() {
    let refused = ClientError::Connect {
        url: "ws://127.0.0.1:1".into(),
        reason: "connection refused".into(),
        source: None,
    };
    assert_eq!(
        Hinted(&refused).to_string(),
        "cannot connect to ws://127.0.0.1:1: connection refused — is outboard-server running? Set --server/OUTBOARD_SERVER"
    );
    let insecure = ClientError::Insecure { host: "example.com".into() };
    assert_eq!(
        Hinted(&insecure).to_string(),
        "refusing to send the token over clear-text ws:// to example.com: use wss:// (serve with \
         --tls-cert/--tls-key), or pass --insecure (OUTBOARD_INSECURE=1) on a network you trust"
    );
    // Nothing to add where no flag helps.
    let closed = ClientError::Closed { reason: None };
    assert_eq!(Hinted(&closed).to_string(), closed.to_string());
    assert!(!refused.to_string().contains("--"), "the library names no flag: {refused}");
}
