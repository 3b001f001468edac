//! A session's workspace on a sandbox host, as the tools see it ([`HostedWorkspace`]): each
//! call goes to the host's client, and errors become messages for the model that name the host
//! and say what to do.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use outboard_shared::OutputStream;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::client::{HostClient, RemoteError};
use crate::registry::Hosts;
use outboard_sandbox::ExecResult;
use outboard_tools::{HostedWorkspace, ReadLedger, ToolOutcome};

/// What the model is told after a host error: how the session gets a workspace again.
pub const RESTORE_HINT: &str = "If the host stays unreachable, the session can be moved to \
    another sandbox host with `outboard sessions restore SESSION_ID` (its workspace is then made \
    again there).";

/// Workspace `id` on host `host`. Made without touching the store or the network (a session
/// makes it when it lends its tool environment); the host's client is looked up at the first
/// call, and the host creates the workspace at the first call that needs it.
pub struct RemoteWorkspace {
    hosts: Arc<Hosts>,
    host: String,
    id: String,
}

impl RemoteWorkspace {
    /// The workspace `id` on host `host` of `hosts`.
    pub fn new(hosts: Arc<Hosts>, host: String, id: String) -> RemoteWorkspace {
        RemoteWorkspace { hosts, host, id }
    }

    /// The workspace's id on the host.
    pub fn id(&self) -> &str {
        &self.id
    }

    async fn client(&self) -> Result<Arc<HostClient>, String> {
        self.hosts.client(&self.host).await.map_err(|e| e.to_string())
    }

    async fn after<T>(&self, result: Result<T, RemoteError>) -> Result<T, String> {
        match &result {
            Ok(_) => self.hosts.note_joined(&self.host).await,
            // The next call reads the host's row again: an admin may have re-pinned it.
            Err(RemoteError::NotTheHost { .. }) => self.hosts.forget(&self.host).await,
            Err(_) => {}
        }
        result.map_err(|e| explain(&e))
    }
}

/// A host error as the model reads it.
fn explain(e: &RemoteError) -> String {
    match e {
        RemoteError::Unreachable { .. } => format!("{e}. The call did not run. {RESTORE_HINT}"),
        RemoteError::Lost { .. } | RemoteError::Down { .. } | RemoteError::NoAnswer { .. } => {
            format!("{e}. {RESTORE_HINT}")
        }
        _ => e.to_string(),
    }
}

impl HostedWorkspace for RemoteWorkspace {
    fn host(&self) -> &str {
        &self.host
    }

    fn tool<'a>(
        &'a self,
        name: &'a str,
        input: &'a Value,
        reads: &'a mut ReadLedger,
        cancel: CancellationToken,
    ) -> BoxFuture<'a, ToolOutcome> {
        Box::pin(async move {
            if cancel.is_cancelled() {
                return ToolOutcome::error("Interrupted by the user");
            }
            let client = match self.client().await {
                Ok(client) => client,
                Err(message) => return ToolOutcome::error(message),
            };
            let called = client.tool(&self.id, name, input, reads, cancel.clone()).await;
            match self.after(called).await {
                Ok(outcome) => outcome,
                Err(message) => ToolOutcome::error(message),
            }
        })
    }

    fn exec<'a>(
        &'a self,
        command: &'a str,
        timeout: Duration,
        on_output: &'a mut (dyn FnMut(OutputStream, &str) + Send),
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<ExecResult, String>> {
        Box::pin(async move {
            let client = self.client().await?;
            let ran = client.exec(&self.id, command, timeout, on_output, cancel).await;
            self.after(ran).await
        })
    }

    fn digest<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Option<String>> {
        Box::pin(async move {
            let client = self.client().await.ok()?;
            let digest = client.digest(&self.id, path).await;
            self.after(digest).await.ok().flatten()
        })
    }

    fn stamps(&self, paths: Vec<String>) -> BoxFuture<'_, Result<ReadLedger, String>> {
        Box::pin(async move {
            let client = self.client().await?;
            let stamps = client.stamps(&self.id, paths).await;
            self.after(stamps).await
        })
    }
}
