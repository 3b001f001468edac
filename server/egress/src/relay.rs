//! The proxy's half inside the sandbox: the agent listens on `127.0.0.1:`[`crate::contract::PROXY_PORT`]
//! in the sandbox's own network namespace and pipes every accepted connection, byte for byte,
//! to the server's Unix socket bound at [`crate::contract::SANDBOX_SOCKET`]. It understands nothing of
//! HTTP: every decision is the server's.
//!
//! Why a TCP port at all: tools take proxies as `http://host:port` URLs; few accept a Unix
//! socket. Why nothing else: the sandbox has no route anywhere, so this relay is its only way
//! out, and it leads only to the server's proxy.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, UnixStream};
use tokio::sync::Semaphore;

use crate::splice::{self, Sock, Unmetered};

/// Connections the relay pipes at once: well above the server's own per-sandbox cap (64 by
/// default, which answers the excess with an explanation), so that cap is what a client meets;
/// this one only keeps a runaway client from exhausting the agent's descriptors (the agent is
/// PID 1 and needs them to run commands). Beyond it an accepted connection is closed at once.
pub const MAX_RELAYS: usize = 1024;

/// Buffer of each direction of a relayed connection where it cannot splice ([`splice`]'s
/// fallback): large enough for full-speed downloads (fewer wakeups of the agent's single
/// thread), small enough that idle tunnels stay cheap.
pub(crate) const RELAY_BUF: usize = 32 * 1024;

/// What the agent is told (part of its JSON configuration).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelayConfig {
    /// The TCP port to listen on at 127.0.0.1.
    pub port: u16,
    /// The server's socket, as the sandbox sees it.
    pub socket: PathBuf,
}

/// Binds the relay's listener (before the agent says hello, so the first command finds it).
pub fn bind(config: &RelayConfig) -> std::io::Result<TcpListener> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", config.port))?;
    listener.set_nonblocking(true)?;
    TcpListener::from_std(listener)
}

/// Accepts forever, piping each connection to `socket`; at most `max` at once.
pub async fn relay(listener: TcpListener, socket: PathBuf, max: usize) {
    let slots = Arc::new(Semaphore::new(max));
    let socket: Arc<Path> = socket.into();
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            // Out of descriptors: let some connection end before accepting again.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            drop(tcp);
            continue;
        };
        let socket = socket.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _ = tcp.set_nodelay(true);
            let Ok(unix) = UnixStream::connect(&*socket).await else { return };
            splice::widen(&unix);
            let (a, b) = (Sock::Tcp(&tcp), Sock::Unix(&unix));
            let _ = splice::bidirectional(a, b, &Unmetered, RELAY_BUF).await;
        });
    }
}
