//! A signing HTTP client for the protocol, usable in both directions: the wrapper uses it to call
//! engines, an engine (or a test) can use it to call wrappers.

use std::time::Duration;

use reqwest::{Method, StatusCode, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::protocol::Signer;

/// Errors of [`SignedClient`].
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Build(#[source] reqwest::Error),
    /// The base URL and path do not form a URL.
    #[error("invalid URL {url:?}: {reason}")]
    Url {
        /// What was given.
        url: String,
        /// Why it is invalid.
        reason: String,
    },
    /// The body could not be serialised.
    #[error("cannot serialise the request body: {0}")]
    Encode(#[source] serde_json::Error),
    /// Connecting, sending or reading failed (including timeouts).
    #[error("request to {url} failed: {source}")]
    Transport {
        /// The URL called.
        url: String,
        /// The cause.
        #[source]
        source: reqwest::Error,
    },
    /// The peer answered with an unexpected status.
    #[error("{url} answered {status}: {body}")]
    Status {
        /// The URL called.
        url: String,
        /// The status.
        status: StatusCode,
        /// The start of the body.
        body: String,
    },
    /// The answer is not the expected JSON.
    #[error("{url} answered with unexpected JSON: {source}")]
    Decode {
        /// The URL called.
        url: String,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
}

/// A raw answer: status and body.
#[derive(Debug, Clone)]
pub struct RawResponse {
    /// HTTP status.
    pub status: StatusCode,
    /// Body bytes.
    pub body: Vec<u8>,
}

impl RawResponse {
    /// Parses the body as JSON.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }
}

/// Joins a base URL (which may carry a path prefix) and a protocol path.
pub fn join_url(base: &str, path: &str) -> Result<Url, ClientError> {
    let joined = format!("{}{}", base.trim_end_matches('/'), path);
    let url = Url::parse(&joined).map_err(|e| ClientError::Url {
        url: joined.clone(),
        reason: e.to_string(),
    })?;
    match url.scheme() {
        "http" | "https" => Ok(url),
        other => Err(ClientError::Url {
            url: joined,
            reason: format!("scheme {other:?} is not http or https"),
        }),
    }
}

/// The path that is signed for a URL: its path, plus `?query` when it has one.
pub fn signed_path(url: &Url) -> String {
    match url.query() {
        Some(q) => format!("{}?{}", url.path(), q),
        None => url.path().to_owned(),
    }
}

/// An HTTP client that signs every request with one app's secret. Cheap to clone.
#[derive(Debug, Clone)]
pub struct SignedClient {
    http: reqwest::Client,
    signer: Signer,
}

impl SignedClient {
    /// A client with the given connect timeout and whole-request timeout.
    pub fn new(
        signer: Signer,
        connect_timeout: Duration,
        timeout: Duration,
    ) -> Result<Self, ClientError> {
        let http = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .timeout(timeout)
            .pool_idle_timeout(Duration::from_secs(90))
            .build()
            .map_err(ClientError::Build)?;
        Ok(Self { http, signer })
    }

    /// A client that signs with `signer` over an existing HTTP client (sharing its connection
    /// pool and timeouts), e.g. one pool for requests signed with several apps' secrets.
    pub fn with_http(http: reqwest::Client, signer: Signer) -> Self {
        Self { http, signer }
    }

    /// The signer.
    pub fn signer(&self) -> &Signer {
        &self.signer
    }

    /// Sends a signed request with a raw body and returns the raw answer, whatever its status.
    pub async fn send_raw(
        &self,
        method: Method,
        base_url: &str,
        path: &str,
        body: Vec<u8>,
    ) -> Result<RawResponse, ClientError> {
        self.send_raw_within(method, base_url, path, body, None)
            .await
    }

    /// [`SignedClient::send_raw`] with a whole-request timeout of its own instead of the
    /// client's.
    pub async fn send_raw_within(
        &self,
        method: Method,
        base_url: &str,
        path: &str,
        body: Vec<u8>,
        timeout: Option<Duration>,
    ) -> Result<RawResponse, ClientError> {
        let url = join_url(base_url, path)?;
        let headers = self.signer.sign(method.as_str(), &signed_path(&url), &body);
        let mut req = self.http.request(method, url.clone());
        if let Some(timeout) = timeout {
            req = req.timeout(timeout);
        }
        for (name, value) in headers.pairs() {
            req = req.header(name, value);
        }
        if !body.is_empty() {
            req = req.header(reqwest::header::CONTENT_TYPE, "application/json");
        }
        let transport = |source| ClientError::Transport {
            url: url.to_string(),
            source,
        };
        let resp = req.body(body).send().await.map_err(transport)?;
        let status = resp.status();
        let body = resp.bytes().await.map_err(transport)?.to_vec();
        Ok(RawResponse { status, body })
    }

    /// Sends `body` as signed JSON and returns the raw answer, whatever its status.
    pub async fn post_json_raw<B: Serialize>(
        &self,
        base_url: &str,
        path: &str,
        body: &B,
    ) -> Result<RawResponse, ClientError> {
        let bytes = serde_json::to_vec(body).map_err(ClientError::Encode)?;
        self.send_raw(Method::POST, base_url, path, bytes).await
    }

    /// Sends `body` as signed JSON, expects a 2xx answer and parses it as `R`.
    pub async fn post_json<B: Serialize, R: DeserializeOwned>(
        &self,
        base_url: &str,
        path: &str,
        body: &B,
    ) -> Result<R, ClientError> {
        let raw = self.post_json_raw(base_url, path, body).await?;
        Self::expect_json(base_url, path, raw)
    }

    /// [`SignedClient::post_json`] that gives up after `timeout` (e.g. a heartbeat, which is
    /// worth more sent to another engine at once than late).
    pub async fn post_json_within<B: Serialize, R: DeserializeOwned>(
        &self,
        base_url: &str,
        path: &str,
        body: &B,
        timeout: Duration,
    ) -> Result<R, ClientError> {
        let bytes = serde_json::to_vec(body).map_err(ClientError::Encode)?;
        let raw = self
            .send_raw_within(Method::POST, base_url, path, bytes, Some(timeout))
            .await?;
        Self::expect_json(base_url, path, raw)
    }

    /// Sends a signed `GET`, expects a 2xx answer and parses it as `R`.
    pub async fn get_json<R: DeserializeOwned>(
        &self,
        base_url: &str,
        path: &str,
    ) -> Result<R, ClientError> {
        let raw = self
            .send_raw(Method::GET, base_url, path, Vec::new())
            .await?;
        Self::expect_json(base_url, path, raw)
    }

    fn expect_json<R: DeserializeOwned>(
        base_url: &str,
        path: &str,
        raw: RawResponse,
    ) -> Result<R, ClientError> {
        let url = || format!("{}{}", base_url.trim_end_matches('/'), path);
        if !raw.status.is_success() {
            let text = String::from_utf8_lossy(&raw.body);
            return Err(ClientError::Status {
                url: url(),
                status: raw.status,
                body: text.chars().take(300).collect(),
            });
        }
        raw.json()
            .map_err(|source| ClientError::Decode { url: url(), source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_keeps_the_base_path_prefix() -> Result<(), ClientError> {
        let url = join_url("http://host:8080/exec/", "/mthpt/v1/runs")?;
        assert_eq!(signed_path(&url), "/exec/mthpt/v1/runs");
        Ok(())
    }

    #[test]
    fn join_refuses_other_schemes() {
        assert!(matches!(
            join_url("ftp://host", "/mthpt/v1/runs"),
            Err(ClientError::Url { .. })
        ));
    }
}
