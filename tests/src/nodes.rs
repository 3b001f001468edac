//! Several server nodes on one PostgreSQL store, as a deployment runs them: each node has its
//! own data dir (its secret key, its sandboxes' scratch files), and all share the store (a
//! schema of the test run's cluster) and one workspaces directory.

use std::path::PathBuf;

use crate::harness::{Api, TestServer, STORE_URL_FILE};

/// The store and the shared directory of a group of nodes.
pub struct Cluster {
    /// The PostgreSQL URL every node uses.
    pub url: String,
    workspaces: tempfile::TempDir,
    api: Api,
    base_url: String,
    lease_secs: u64,
    /// More flags for every node.
    flags: Vec<String>,
}

impl Cluster {
    /// A fresh store (a schema of its own) for nodes talking to the mock model at `base_url`,
    /// with `lease_secs` leases.
    pub fn new(api: Api, base_url: &str, lease_secs: u64) -> anyhow::Result<Cluster> {
        Ok(Cluster {
            url: outboard_server::store::pgtest::fresh_url().map_err(anyhow::Error::msg)?,
            workspaces: tempfile::tempdir()?,
            api,
            base_url: base_url.to_owned(),
            lease_secs,
            flags: Vec::new(),
        })
    }

    /// The cluster with `flags` added to every node's `serve`.
    pub fn with_flags(mut self, flags: &[&str]) -> Cluster {
        self.flags.extend(flags.iter().map(|f| (*f).to_owned()));
        self
    }

    fn args(&self) -> Vec<String> {
        let workspaces = self.workspaces.path().to_string_lossy().into_owned();
        let mut args = vec![
            "--lease-secs".to_owned(),
            self.lease_secs.to_string(),
            "--workspaces".to_owned(),
            workspaces,
        ];
        args.extend(self.flags.iter().cloned());
        args
    }

    /// A data dir whose servers and admin commands use the cluster's store.
    pub fn data_dir(&self) -> anyhow::Result<tempfile::TempDir> {
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join(STORE_URL_FILE), &self.url)?;
        Ok(dir)
    }

    /// Starts a new node.
    pub fn start(&self) -> anyhow::Result<TestServer> {
        self.start_in(self.data_dir()?)
    }

    /// Starts a node on `data` (a killed node's, to restart it).
    pub fn start_in(&self, data: tempfile::TempDir) -> anyhow::Result<TestServer> {
        let args = self.args();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        TestServer::start_in(data, self.api, &self.base_url, &args)
    }

    /// Starts a node again on `data` at `url`, the address of the node that stopped there (a
    /// deploy's restart: its clients reconnect to the same address).
    pub fn restart_at(&self, url: &str, data: tempfile::TempDir) -> anyhow::Result<TestServer> {
        let args = self.args();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        TestServer::restart_at(url, data, self.api, &self.base_url, &args)
    }

    /// The workspace of a session, whichever node runs it.
    pub fn workspace(&self, session_id: &str) -> PathBuf {
        self.workspaces.path().join(session_id)
    }
}
