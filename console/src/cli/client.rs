//! The API client the admin and task commands share: where the console is and which token to
//! send, from `--url`/`--token`, `MTHPT_URL`/`MTHPT_TOKEN`, or a config file (`--cli-config`,
//! `MTHPT_CLI_CONFIG`, default `$XDG_CONFIG_HOME/mthpt/cli.toml` or `~/.config/mthpt/cli.toml`)
//! with `url = "…"` and `token = "…"`. Flags beat the environment, which beats the file.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use figment::Figment;
use figment::providers::{Format, Toml};
use reqwest::Method;
use serde::Deserialize;
use serde_json::Value;

/// The console the commands talk to.
pub const DEFAULT_URL: &str = "http://127.0.0.1:7800";

/// Where the API is and who is calling.
#[derive(Debug, Clone, Default, Args)]
pub struct ApiArgs {
    /// The console's base URL [default: http://127.0.0.1:7800].
    #[arg(long, env = "MTHPT_URL", global = true)]
    pub url: Option<String>,
    /// An API token (`mthpt_…`).
    #[arg(long, env = "MTHPT_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// A TOML file with `url` and `token`.
    #[arg(long, env = "MTHPT_CLI_CONFIG", global = true)]
    pub cli_config: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
struct FileConfig {
    url: Option<String>,
    token: Option<String>,
}

/// What can go wrong talking to the API.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{0}")]
    Config(String),
    #[error("cannot reach the console at {url}: {source}")]
    Unreachable {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// The API refused: its problem body, summarised.
    #[error("{status} {code}: {detail}{fields}")]
    Refused {
        status: u16,
        code: String,
        detail: String,
        fields: String,
    },
}

/// A client for `/api/v1`.
#[derive(Debug, Clone)]
pub struct ApiClient {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

fn default_config_file() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("mthpt").join("cli.toml"))
}

impl ApiClient {
    /// A client from the flags, the environment (clap reads it) and the config file.
    pub fn from_args(args: &ApiArgs) -> Result<Self, ClientError> {
        let file = match &args.cli_config {
            Some(path) if !path.is_file() => {
                return Err(ClientError::Config(format!(
                    "config file {} does not exist",
                    path.display()
                )));
            }
            Some(path) => Some(path.clone()),
            None => default_config_file().filter(|p| p.is_file()),
        };
        let from_file: FileConfig = match &file {
            Some(path) => Figment::from(Toml::file(path))
                .extract()
                .map_err(|e| ClientError::Config(format!("{}: {e}", path.display())))?,
            None => FileConfig::default(),
        };
        let base = args
            .url
            .clone()
            .or(from_file.url)
            .unwrap_or_else(|| DEFAULT_URL.to_owned());
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| ClientError::Config(format!("HTTP client: {e}")))?;
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            token: args.token.clone().or(from_file.token),
            http,
        })
    }

    /// Calls `method /api/v1<path>` with an optional JSON body; the answer's JSON (`null` for
    /// an empty answer).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ClientError> {
        let url = format!("{}/api/v1{path}", self.base);
        let mut req = self.http.request(method, &url);
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        if let Some(body) = body {
            req = req.json(body);
        }
        let res = req
            .send()
            .await
            .map_err(|source| ClientError::Unreachable {
                url: self.base.clone(),
                source,
            })?;
        let status = res.status();
        let text = res
            .text()
            .await
            .map_err(|source| ClientError::Unreachable {
                url: self.base.clone(),
                source,
            })?;
        let json: Value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        if status.is_success() {
            return Ok(json);
        }
        let fields = json["errors"]
            .as_array()
            .map(|errs| {
                errs.iter()
                    .map(|e| {
                        format!(
                            "\n  {}: {}",
                            e["field"].as_str().unwrap_or("?"),
                            e["message"].as_str().unwrap_or("?")
                        )
                    })
                    .collect::<String>()
            })
            .unwrap_or_default();
        let mut detail = json["detail"].as_str().unwrap_or("").to_owned();
        if status.as_u16() == 401 && self.token.is_none() {
            detail += " (give --token, MTHPT_TOKEN or token in the CLI config file)";
        }
        Err(ClientError::Refused {
            status: status.as_u16(),
            code: json["code"].as_str().unwrap_or("unknown").to_owned(),
            detail,
            fields,
        })
    }
}

/// Percent-encodes a path segment (names are slugs, but user input is not trusted).
pub fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_beat_the_config_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cli.toml");
        std::fs::write(&file, "url = \"http://file:1/\"\ntoken = \"mthpt_file\"\n").unwrap();
        let args = ApiArgs {
            url: Some("http://flag:2".into()),
            token: None,
            cli_config: Some(file),
        };
        let c = ApiClient::from_args(&args).unwrap();
        assert_eq!(c.base, "http://flag:2");
        assert_eq!(c.token.as_deref(), Some("mthpt_file"));
    }

    #[test]
    fn a_missing_config_file_is_named() {
        let args = ApiArgs {
            cli_config: Some("/nonexistent/cli.toml".into()),
            ..Default::default()
        };
        let err = ApiClient::from_args(&args).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/cli.toml"), "{err}");
    }

    #[test]
    fn path_segments_are_encoded() {
        assert_eq!(segment("acme"), "acme");
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
    }
}
