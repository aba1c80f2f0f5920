//! One `mthpt console` node beside the cluster under test, and a poller that asks it for the
//! tenant's latest run every quarter second through the window: whether the API answers while
//! the database fails over, and whether it answers with errors once it is back.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, bail};
use mthpt_console::service::credentials::{hash_password, new_token, token_hash};
use mthpt_engine::store::Store;
use mthpt_engine::tenant::{NewApiToken, NewUser, Role};
use serde::Serialize;
use tokio::task::JoinHandle;

use super::cluster::Proc;
use super::now_ms;
use crate::Tenancy;
use crate::bench::nodes::free_port;

/// How often the poller asks.
pub const POLL_EVERY: Duration = Duration::from_millis(250);
/// How long one request may take before it counts as unanswered.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// One request of the poller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Sample {
    /// When it was sent and when its answer (or failure) came (epoch ms).
    pub sent_ms: i64,
    pub done_ms: i64,
    /// The HTTP status; `None`: no answer (refused, reset, timed out).
    pub status: Option<u16>,
}

impl Sample {
    /// Whether the API answered with success.
    pub fn ok(&self) -> bool {
        self.status.is_some_and(|s| (200..300).contains(&s))
    }

    /// Whether it answered with a server error.
    pub fn server_error(&self) -> bool {
        self.status.is_some_and(|s| s >= 500)
    }
}

/// The console process and the token the poller signs in with.
#[derive(Debug)]
pub struct ConsoleNode {
    pub proc: Proc,
    pub port: u16,
    token: String,
    tenant: String,
}

impl ConsoleNode {
    /// Creates an operator and its API token in `store`, then starts `mthpt console` on
    /// `database_url` and waits until the poller's request succeeds.
    pub async fn start(
        mthpt: &Path,
        database_url: &str,
        store: &dyn Store,
        tenancy: &Tenancy,
        work_dir: &Path,
        http: &reqwest::Client,
    ) -> anyhow::Result<Self> {
        let token = operator_token(store).await?;
        let port = free_port()?;
        let args = [
            "console",
            "--database-url",
            database_url,
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--node-id",
            "chaos-console",
        ]
        .map(str::to_owned)
        .to_vec();
        let mut proc = Proc::new(
            "console".to_owned(),
            mthpt,
            args,
            work_dir.join("console.log"),
        );
        proc.spawn(&[])?;
        let mut node = Self {
            proc,
            port,
            token,
            tenant: tenancy.tenant.name.clone(),
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = node.proc.exited()? {
                bail!(
                    "the console exited with {status} while starting:\n{}",
                    node.proc.log_tail(20)
                );
            }
            if node.ask(http).await.ok() {
                return Ok(node);
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("the console did not answer:\n{}", node.proc.log_tail(20));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The URL the poller asks: the tenant's latest run (a database read behind a token check,
    /// itself a database read).
    fn url(&self) -> String {
        format!(
            "http://127.0.0.1:{}/api/v1/tenants/{}/runs?limit=1",
            self.port, self.tenant
        )
    }

    async fn ask(&self, http: &reqwest::Client) -> Sample {
        let sent_ms = now_ms();
        let status = http
            .get(self.url())
            .bearer_auth(&self.token)
            .timeout(REQUEST_TIMEOUT)
            .send()
            .await
            .ok()
            .map(|r| r.status().as_u16());
        Sample {
            sent_ms,
            done_ms: now_ms(),
            status,
        }
    }

    /// Starts polling; the samples are read when the poller is stopped.
    pub fn poll(self: &Arc<Self>, http: reqwest::Client) -> Poller {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let node = Arc::clone(self);
        let out = Arc::clone(&samples);
        let task = tokio::spawn(async move {
            loop {
                let sample = node.ask(&http).await;
                out.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(sample);
                tokio::time::sleep(POLL_EVERY).await;
            }
        });
        Poller { samples, task }
    }
}

/// A running poller.
#[derive(Debug)]
pub struct Poller {
    samples: Arc<Mutex<Vec<Sample>>>,
    task: JoinHandle<()>,
}

impl Poller {
    /// Stops polling and returns every sample, in the order sent.
    pub fn stop(self) -> Vec<Sample> {
        self.task.abort();
        std::mem::take(&mut *self.samples.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A new operator `chaos-operator` and an API token for it.
async fn operator_token(store: &dyn Store) -> anyhow::Result<String> {
    let now = now_ms();
    let token = new_token();
    // Hashed before the transaction begins: a slow hash must not hold a transaction open.
    let password_hash = hash_password(&new_token())?;
    let mut tx = store.begin().await?;
    let user = tx
        .create_user(
            &NewUser {
                tenant_id: None,
                username: "chaos-operator".to_owned(),
                password_hash,
                role: Role::Operator,
            },
            now,
        )
        .await?;
    tx.create_api_token(
        &NewApiToken {
            user_id: user.id,
            name: "chaos".to_owned(),
            token_hash: token_hash(&token),
            expires_at: None,
            role: None,
        },
        now,
    )
    .await?;
    tx.commit().await.context("create the console's operator")?;
    Ok(token)
}
