//! The WebSocket close codes the server ends a connection with (RFC 6455 §7.4.1). The close
//! frame's reason is `"<error code>: <short text>"` (at most 123 bytes, the limit of a close
//! reason), e.g. `"idle_timeout: no frame from the client for 300 s"`; the fatal error frame sent
//! just before it carries the full message.

/// The server is going away (not used for restarts, see [`RESTART`]).
pub const GOING_AWAY: u16 = 1001;
/// The client broke a rule: no `hello` in time, a bad `hello`, a refused token, idle too long.
pub const POLICY: u16 = 1008;
/// The client sent more than a limit allows (a frame, or bytes before `hello`).
pub const TOO_BIG: u16 = 1009;
/// The server is restarting; reconnect in a moment.
pub const RESTART: u16 = 1012;
/// The longest close reason RFC 6455 allows (125 bytes of payload minus the 2-byte code).
pub const MAX_REASON_BYTES: usize = 123;
