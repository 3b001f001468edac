//! What the binary adds to the client library (`outboard-client`) for its command line: the
//! connection options and the token the flags give, the hints that name flags after a client
//! error's message ([`Hinted`]), and the process exit status each client error maps to (the table
//! of [`crate::exit`]). The library knows neither clap nor exit codes.

use outboard_client::upload::UploadError;
use outboard_client::{ClientError, ConnectOptions};
use outboard_shared::ErrorCode;

use crate::args::ConnectArgs;
use crate::exit;

/// The options the connection flags give (`--ca-cert`, `--insecure`).
pub fn options(args: &ConnectArgs) -> ConnectOptions {
    ConnectOptions {
        ca_cert: args.ca_cert.clone(),
        insecure: args.insecure,
        ..ConnectOptions::default()
    }
}

/// The bearer token the flags give: `--token-file FILE` (its first line), else `--token` /
/// `OUTBOARD_TOKEN`. `None` when neither is set or the value is blank.
pub fn token_from_args(args: &ConnectArgs) -> Result<Option<String>, ClientError> {
    if let Some(path) = &args.token_file {
        let text = std::fs::read_to_string(path).map_err(|e| ClientError::TokenFile {
            path: path.display().to_string(),
            reason: e.to_string(),
            source: Some(std::sync::Arc::new(e)),
        })?;
        let token = text.lines().next().unwrap_or("").trim().to_owned();
        if token.is_empty() {
            return Err(ClientError::TokenFile {
                path: path.display().to_string(),
                reason: "it is empty".into(),
                source: None,
            });
        }
        return Ok(Some(token));
    }
    Ok(args.token.as_deref().map(str::trim).filter(|t| !t.is_empty()).map(str::to_owned))
}

/// What to do about `err` with this binary's flags, to follow its message; the library's
/// messages name no flag.
pub fn hint(err: &ClientError) -> Option<&'static str> {
    match err {
        ClientError::Connect { .. } => Some(" Set --server/OUTBOARD_SERVER"),
        ClientError::Insecure { .. } => Some(
            " (serve with --tls-cert/--tls-key), or pass --insecure (OUTBOARD_INSECURE=1) on a \
             network you trust",
        ),
        ClientError::CaCert { .. } => Some(" — give a PEM file with --ca-cert/OUTBOARD_CA_CERT"),
        ClientError::Certificate { .. } => Some(
            " — if the server's certificate comes from a private CA, pass --ca-cert FILE \
             (OUTBOARD_CA_CERT)",
        ),
        _ => None,
    }
}

/// A client error as the binary prints it: its message and [`hint`].
#[derive(Debug, Clone, Copy)]
pub struct Hinted<'a>(pub &'a ClientError);

impl std::fmt::Display for Hinted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.0, hint(self.0).unwrap_or_default())
    }
}

/// The process exit status an error of the client library maps to (see [`crate::exit`]).
pub trait ExitCode {
    /// Configuration mistakes are 2, connection and authorisation failures 3, anything else
    /// about the run 1.
    fn exit_code(&self) -> i32;
}

impl ExitCode for ClientError {
    fn exit_code(&self) -> i32 {
        match self {
            ClientError::InvalidUrl { .. }
            | ClientError::TooLarge { .. }
            | ClientError::Insecure { .. }
            | ClientError::TokenFile { .. }
            | ClientError::CaCert { .. } => exit::USAGE,
            ClientError::Certificate { .. } => exit::CONNECT,
            ClientError::Connect { .. }
            | ClientError::Unauthorized { .. }
            | ClientError::ProtocolVersion { .. }
            | ClientError::Handshake { .. }
            | ClientError::Closed { .. } => exit::CONNECT,
            ClientError::Server { error, .. } | ClientError::Connection { error, .. } => {
                match error.code {
                    ErrorCode::Unauthorized
                    | ErrorCode::ProtocolVersion
                    | ErrorCode::HandshakeRequired
                    | ErrorCode::ShuttingDown => exit::CONNECT,
                    ErrorCode::NotFound | ErrorCode::Forbidden | ErrorCode::BadRequest => {
                        exit::USAGE
                    }
                    _ => exit::FAILED,
                }
            }
            ClientError::Protocol(_) => exit::FAILED,
        }
    }
}

impl ExitCode for UploadError {
    /// A refused token exits like a refused connection.
    fn exit_code(&self) -> i32 {
        match self {
            UploadError::Refused { status: 401 | 403, .. } | UploadError::Transport { .. } => {
                exit::CONNECT
            }
            UploadError::Url(_) | UploadError::CaCert { .. } => exit::USAGE,
            _ => exit::FAILED,
        }
    }
}

#[cfg(test)]
mod tests;
