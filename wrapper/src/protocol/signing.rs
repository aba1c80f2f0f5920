//! Request signing: HMAC-SHA256 with the app's secret over a canonical string.
//!
//! The canonical string is the bytes
//! `METHOD "\n" PATH "\n" TIMESTAMP "\n" NONCE "\n" BODY` where METHOD is upper case, PATH is
//! the request path as sent (with `?query` when there is one), TIMESTAMP is the decimal Unix time
//! in seconds from the `X-Mthpt-Timestamp` header, NONCE the `X-Mthpt-Nonce` header and BODY the
//! raw body bytes (empty for `GET`). The signature is the lowercase hex HMAC-SHA256 of those
//! bytes keyed with the secret.
//!
//! A receiver accepts a request when the signature matches (compared in constant time), the
//! timestamp is within [`MAX_CLOCK_SKEW_SECS`] of its own clock, and the app + nonce pair was not
//! seen while that timestamp is in the window ([`ReplayGuard`]). Retries use a fresh nonce.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::headers;

type HmacSha256 = Hmac<Sha256>;

/// How far a request's timestamp may be from the receiver's clock, either way (5 minutes).
pub const MAX_CLOCK_SKEW_SECS: i64 = 300;

const NONCE_MIN_LEN: usize = 8;
const NONCE_MAX_LEN: usize = 128;

/// Why a request's signature was refused. Every variant means 401.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// A signature header is absent or not visible ASCII.
    #[error("missing or unreadable header {0}")]
    MissingHeader(&'static str),
    /// The timestamp header is not a decimal integer.
    #[error("header X-Mthpt-Timestamp is not a Unix time in seconds: {0:?}")]
    BadTimestamp(String),
    /// The timestamp is too far from the receiver's clock.
    #[error(
        "request timestamp is {skew_secs} s away from this clock (at most {MAX_CLOCK_SKEW_SECS} s allowed)"
    )]
    Stale {
        /// Receiver time minus request time, in seconds.
        skew_secs: i64,
    },
    /// The nonce has the wrong length or characters.
    #[error("header X-Mthpt-Nonce must be 8 to 128 characters of A-Z a-z 0-9 - _")]
    BadNonce,
    /// The app header names an app the receiver does not know.
    #[error("unknown app {0:?}")]
    UnknownApp(String),
    /// The signature does not match the request and the secret.
    #[error("signature does not match")]
    Mismatch,
    /// The same app + nonce was already used within the window.
    #[error("replayed request (nonce already used)")]
    Replayed,
}

/// The four signature headers of a request, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureHeaders {
    /// `X-Mthpt-App`.
    pub app: String,
    /// `X-Mthpt-Timestamp`, Unix seconds.
    pub timestamp: i64,
    /// `X-Mthpt-Nonce`.
    pub nonce: String,
    /// `X-Mthpt-Signature`, hex.
    pub signature: String,
}

impl SignatureHeaders {
    /// Reads the headers through `get`, a lookup by header name (case-insensitive on the caller's
    /// side, as HTTP header maps are). Works with any HTTP library:
    /// `SignatureHeaders::from_lookup(|n| req.headers().get(n).and_then(|v| v.to_str().ok()))`.
    pub fn from_lookup<'a, F>(get: F) -> Result<Self, SignatureError>
    where
        F: Fn(&str) -> Option<&'a str>,
    {
        let read = |name: &'static str| {
            get(name)
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .ok_or(SignatureError::MissingHeader(name))
        };
        let app = read(headers::APP)?.to_owned();
        let ts_text = read(headers::TIMESTAMP)?;
        let timestamp = ts_text
            .parse::<i64>()
            .map_err(|_| SignatureError::BadTimestamp(ts_text.to_owned()))?;
        let nonce = read(headers::NONCE)?.to_owned();
        let signature = read(headers::SIGNATURE)?.to_owned();
        Ok(Self {
            app,
            timestamp,
            nonce,
            signature,
        })
    }

    /// The headers as (name, value) pairs, ready to put on a request.
    pub fn pairs(&self) -> [(&'static str, String); 4] {
        [
            (headers::APP, self.app.clone()),
            (headers::TIMESTAMP, self.timestamp.to_string()),
            (headers::NONCE, self.nonce.clone()),
            (headers::SIGNATURE, self.signature.clone()),
        ]
    }
}

fn nonce_is_valid(nonce: &str) -> bool {
    (NONCE_MIN_LEN..=NONCE_MAX_LEN).contains(&nonce.len())
        && nonce
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The bytes that are signed (see the module docs).
pub fn canonical_string(
    method: &str,
    path: &str,
    timestamp: i64,
    nonce: &str,
    body: &[u8],
) -> Vec<u8> {
    let head = format!(
        "{}\n{}\n{}\n{}\n",
        method.to_ascii_uppercase(),
        path,
        timestamp,
        nonce
    );
    let mut out = Vec::with_capacity(head.len() + body.len());
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(body);
    out
}

fn mac(secret: &[u8], canonical: &[u8]) -> HmacSha256 {
    let mut mac = match HmacSha256::new_from_slice(secret) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC accepts keys of any length"),
    };
    mac.update(canonical);
    mac
}

/// Lowercase hex HMAC-SHA256 of the canonical string.
pub fn signature_hex(
    secret: &[u8],
    method: &str,
    path: &str,
    timestamp: i64,
    nonce: &str,
    body: &[u8],
) -> String {
    let canonical = canonical_string(method, path, timestamp, nonce, body);
    hex::encode(mac(secret, &canonical).finalize().into_bytes())
}

/// Checks a request's signature and timestamp against `secret` and the receiver's clock
/// (`now_unix`, seconds). Does not check replays: see [`ReplayGuard::verify`], which does both.
pub fn verify_signature(
    secret: &[u8],
    method: &str,
    path: &str,
    headers: &SignatureHeaders,
    body: &[u8],
    now_unix: i64,
) -> Result<(), SignatureError> {
    if !nonce_is_valid(&headers.nonce) {
        return Err(SignatureError::BadNonce);
    }
    let skew_secs = now_unix.saturating_sub(headers.timestamp);
    if skew_secs.abs() > MAX_CLOCK_SKEW_SECS {
        return Err(SignatureError::Stale { skew_secs });
    }
    let Ok(given) = hex::decode(&headers.signature) else {
        return Err(SignatureError::Mismatch);
    };
    let canonical = canonical_string(method, path, headers.timestamp, &headers.nonce, body);
    mac(secret, &canonical)
        .verify_slice(&given)
        .map_err(|_| SignatureError::Mismatch)
}

/// Current Unix time in seconds (the `now_unix` argument of the verification functions).
pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Signs outgoing requests for one app.
#[derive(Clone)]
pub struct Signer {
    app: String,
    secret: Vec<u8>,
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signer")
            .field("app", &self.app)
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl Signer {
    /// A signer for `app` with its secret.
    pub fn new(app: impl Into<String>, secret: impl Into<Vec<u8>>) -> Self {
        Self {
            app: app.into(),
            secret: secret.into(),
        }
    }

    /// The app name.
    pub fn app(&self) -> &str {
        &self.app
    }

    /// The secret, for the receiving side of the same app.
    pub fn secret(&self) -> &[u8] {
        &self.secret
    }

    /// Signs a request now, with a fresh random nonce.
    pub fn sign(&self, method: &str, path: &str, body: &[u8]) -> SignatureHeaders {
        let nonce = hex::encode(rand::random::<[u8; 16]>());
        self.sign_with(method, path, body, unix_now(), &nonce)
    }

    /// Signs a request with a given timestamp and nonce (for tests and reproducible examples).
    pub fn sign_with(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
        timestamp: i64,
        nonce: &str,
    ) -> SignatureHeaders {
        SignatureHeaders {
            app: self.app.clone(),
            timestamp,
            nonce: nonce.to_owned(),
            signature: signature_hex(&self.secret, method, path, timestamp, nonce, body),
        }
    }
}

/// Remembers the nonces of accepted requests while their timestamps are inside the skew window,
/// so that a captured request cannot be played again. One guard serves any number of apps.
///
/// Memory: one small entry (about 40 bytes) per request accepted in the last five minutes. The
/// entries are keyed by a keyed 64-bit hash of app and nonce; a collision between two genuine
/// requests would refuse the second one as a replay, which its sender then retries with a fresh
/// nonce (odds about 1 in 10^7 at a million requests in the window).
#[derive(Debug, Default)]
pub struct ReplayGuard {
    hasher: RandomState,
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    /// Hash of (app, nonce) → Unix second after which the entry can be forgotten.
    expiry: HashMap<u64, i64>,
    next_prune: i64,
}

impl ReplayGuard {
    /// An empty guard.
    pub fn new() -> Self {
        Self::default()
    }

    /// Verifies signature and timestamp ([`verify_signature`]), then refuses the request if its
    /// app + nonce was already accepted, else remembers it. Only requests with a valid signature
    /// are remembered, so forged requests cannot fill the guard or block a legitimate nonce.
    pub fn verify(
        &self,
        secret: &[u8],
        method: &str,
        path: &str,
        headers: &SignatureHeaders,
        body: &[u8],
        now_unix: i64,
    ) -> Result<(), SignatureError> {
        verify_signature(secret, method, path, headers, body, now_unix)?;
        self.check_and_remember(headers, now_unix)
    }

    /// The replay half of [`verify`](Self::verify), run once the signature is checked: refuses
    /// the request if its app + nonce was already accepted, else remembers it.
    fn check_and_remember(
        &self,
        headers: &SignatureHeaders,
        now_unix: i64,
    ) -> Result<(), SignatureError> {
        let key = self.hasher.hash_one((&headers.app, &headers.nonce));
        // The request is acceptable until its timestamp leaves the window; keep the nonce that long.
        let expires = headers.timestamp.saturating_add(MAX_CLOCK_SKEW_SECS + 1);
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if now_unix >= seen.next_prune {
            seen.expiry.retain(|_, exp| *exp > now_unix);
            seen.next_prune = now_unix + 10;
        }
        match seen.expiry.get(&key) {
            Some(exp) if *exp > now_unix => Err(SignatureError::Replayed),
            _ => {
                seen.expiry.insert(key, expires);
                Ok(())
            }
        }
    }

    /// How many nonces are remembered now.
    pub fn len(&self) -> usize {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .expiry
            .len()
    }

    /// Whether no nonce is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"s3cret";

    fn signed(ts: i64, nonce: &str) -> SignatureHeaders {
        Signer::new("billing", SECRET).sign_with("POST", "/mthpt/v1/runs", b"{}", ts, nonce)
    }

    #[test]
    fn valid_signature_is_accepted() {
        let now = 1_800_000_000;
        let h = signed(now, "abcdefgh12345678");
        assert_eq!(
            verify_signature(SECRET, "post", "/mthpt/v1/runs", &h, b"{}", now),
            Ok(())
        );
    }

    #[test]
    fn changed_body_path_method_or_secret_is_refused() {
        let now = 1_800_000_000;
        let h = signed(now, "abcdefgh12345678");
        let mismatch = Err(SignatureError::Mismatch);
        assert_eq!(
            verify_signature(SECRET, "POST", "/mthpt/v1/runs", &h, b"{ }", now),
            mismatch
        );
        assert_eq!(
            verify_signature(SECRET, "POST", "/mthpt/v1/runz", &h, b"{}", now),
            mismatch
        );
        assert_eq!(
            verify_signature(SECRET, "PUT", "/mthpt/v1/runs", &h, b"{}", now),
            mismatch
        );
        assert_eq!(
            verify_signature(b"other", "POST", "/mthpt/v1/runs", &h, b"{}", now),
            mismatch
        );
    }

    #[test]
    fn timestamp_outside_five_minutes_is_refused_either_way() {
        let now = 1_800_000_000;
        let ok = signed(now - 300, "abcdefgh12345678");
        assert!(verify_signature(SECRET, "POST", "/mthpt/v1/runs", &ok, b"{}", now).is_ok());
        let old = signed(now - 301, "abcdefgh12345678");
        assert_eq!(
            verify_signature(SECRET, "POST", "/mthpt/v1/runs", &old, b"{}", now),
            Err(SignatureError::Stale { skew_secs: 301 })
        );
        let future = signed(now + 301, "abcdefgh12345678");
        assert!(matches!(
            verify_signature(SECRET, "POST", "/mthpt/v1/runs", &future, b"{}", now),
            Err(SignatureError::Stale { .. })
        ));
    }

    #[test]
    fn nonce_is_accepted_once_within_the_window() {
        let guard = ReplayGuard::new();
        let now = 1_800_000_000;
        let h = signed(now, "abcdefgh12345678");
        let verify = |at| guard.verify(SECRET, "POST", "/mthpt/v1/runs", &h, b"{}", at);
        assert_eq!(verify(now), Ok(()));
        assert_eq!(verify(now + 1), Err(SignatureError::Replayed));
        // Once the timestamp is out of the window the request is stale anyway.
        assert!(matches!(
            verify(now + 302),
            Err(SignatureError::Stale { .. })
        ));
    }

    #[test]
    fn forged_request_does_not_burn_the_nonce() {
        let guard = ReplayGuard::new();
        let now = 1_800_000_000;
        let mut forged = signed(now, "abcdefgh12345678");
        forged.signature = "00".repeat(32);
        assert_eq!(
            guard.verify(SECRET, "POST", "/mthpt/v1/runs", &forged, b"{}", now),
            Err(SignatureError::Mismatch)
        );
        let real = signed(now, "abcdefgh12345678");
        assert_eq!(
            guard.verify(SECRET, "POST", "/mthpt/v1/runs", &real, b"{}", now),
            Ok(())
        );
    }

    #[test]
    fn bad_nonce_and_missing_headers_are_named() {
        let now = 1_800_000_000;
        let h = signed(now, "short");
        assert_eq!(
            verify_signature(SECRET, "POST", "/mthpt/v1/runs", &h, b"{}", now),
            Err(SignatureError::BadNonce)
        );
        let missing =
            SignatureHeaders::from_lookup(|name| (name == headers::APP).then_some("billing"));
        assert_eq!(
            missing,
            Err(SignatureError::MissingHeader(headers::TIMESTAMP))
        );
    }

    #[test]
    fn headers_round_trip_through_pairs() {
        let h = signed(1_800_000_000, "abcdefgh12345678");
        let pairs = h.pairs();
        let parsed = SignatureHeaders::from_lookup(|name| {
            pairs
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        });
        assert_eq!(parsed, Ok(h));
    }
}
