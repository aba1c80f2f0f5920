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
//!
//! Ambiguous requests are refused rather than interpreted: each signature header must appear
//! exactly once, the timestamp must be the canonical decimal form (digits only, no sign, no
//! leading zero), and the signature exactly 64 lower-case hex digits. Because only the canonical
//! timestamp text is accepted, the text that is verified is byte for byte the text received.
//! Everything but the HMAC itself is checked from the headers alone
//! ([`SignatureHeaders::check_before_body`]), so a receiver can refuse a request before reading
//! its body.

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
    /// A signature header appears more than once.
    #[error("header {0} appears more than once")]
    DuplicateHeader(&'static str),
    /// The timestamp header is not a Unix time in canonical decimal form.
    #[error(
        "header X-Mthpt-Timestamp must be the Unix time in seconds as plain decimal digits (no sign, no leading zero): {0:?}"
    )]
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
    /// The signature header is not 64 lower-case hex digits.
    #[error("header X-Mthpt-Signature must be 64 lower-case hex digits")]
    BadSignatureFormat,
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
    /// A receiver should prefer [`from_all_values`](Self::from_all_values), which also refuses
    /// a header that appears twice.
    pub fn from_lookup<'a, F>(get: F) -> Result<Self, SignatureError>
    where
        F: Fn(&str) -> Option<&'a str>,
    {
        Self::from_all_values(|name| get(name).map(str::as_bytes))
    }

    /// Reads the headers through `get_all`, which lists every value of a header name in the
    /// request (case-insensitive on the caller's side), e.g.
    /// `SignatureHeaders::from_all_values(|n| req.headers().get_all(n).map(|v| v.as_bytes()))`.
    /// Refuses a missing, repeated or unreadable header, a non-canonical timestamp and a
    /// signature that is not 64 lower-case hex digits.
    pub fn from_all_values<'a, F, I>(get_all: F) -> Result<Self, SignatureError>
    where
        F: Fn(&str) -> I,
        I: IntoIterator<Item = &'a [u8]>,
    {
        let read = |name: &'static str| -> Result<&'a str, SignatureError> {
            let mut values = get_all(name).into_iter();
            let value = values.next().ok_or(SignatureError::MissingHeader(name))?;
            if values.next().is_some() {
                return Err(SignatureError::DuplicateHeader(name));
            }
            std::str::from_utf8(value)
                .ok()
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_graphic()))
                .ok_or(SignatureError::MissingHeader(name))
        };
        let app = read(headers::APP)?.to_owned();
        let ts_text = read(headers::TIMESTAMP)?;
        let timestamp = parse_canonical_timestamp(ts_text)
            .ok_or_else(|| SignatureError::BadTimestamp(ts_text.to_owned()))?;
        let nonce = read(headers::NONCE)?.to_owned();
        let signature = read(headers::SIGNATURE)?;
        if !signature_format_is_valid(signature) {
            return Err(SignatureError::BadSignatureFormat);
        }
        Ok(Self {
            app,
            timestamp,
            nonce,
            signature: signature.to_owned(),
        })
    }

    /// Everything that can be checked before the body is read: the nonce's form, the signature's
    /// form and the timestamp against the receiver's clock (`now_unix`, seconds).
    pub fn check_before_body(&self, now_unix: i64) -> Result<(), SignatureError> {
        if !nonce_is_valid(&self.nonce) {
            return Err(SignatureError::BadNonce);
        }
        if !signature_format_is_valid(&self.signature) {
            return Err(SignatureError::BadSignatureFormat);
        }
        let skew_secs = now_unix.saturating_sub(self.timestamp);
        // `unsigned_abs`: a saturated difference (i64::MIN) has no `abs` in i64.
        if skew_secs.unsigned_abs() > MAX_CLOCK_SKEW_SECS.unsigned_abs() {
            return Err(SignatureError::Stale { skew_secs });
        }
        Ok(())
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

/// The timestamp when `text` is its canonical decimal form: `0` or digits not starting with `0`
/// (no sign, no spaces), small enough for an `i64`.
fn parse_canonical_timestamp(text: &str) -> Option<i64> {
    let canonical = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    if canonical { text.parse().ok() } else { None }
}

/// Lower-case hex of a SHA-256 MAC: 64 characters of `0-9 a-f`.
fn signature_format_is_valid(signature: &str) -> bool {
    signature.len() == 64
        && signature
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
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
    let head = canonical_head(method, path, timestamp, nonce);
    let mut out = Vec::with_capacity(head.len() + body.len());
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(body);
    out
}

/// The canonical string up to (not including) the body.
fn canonical_head(method: &str, path: &str, timestamp: i64, nonce: &str) -> String {
    format!(
        "{}\n{}\n{}\n{}\n",
        method.to_ascii_uppercase(),
        path,
        timestamp,
        nonce
    )
}

fn mac_of_head(secret: &[u8], method: &str, path: &str, timestamp: i64, nonce: &str) -> HmacSha256 {
    let mut mac = match HmacSha256::new_from_slice(secret) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC accepts keys of any length"),
    };
    mac.update(canonical_head(method, path, timestamp, nonce).as_bytes());
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
    let mut mac = mac_of_head(secret, method, path, timestamp, nonce);
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// Verifies a request's signature over a body that arrives in pieces, so the body is hashed as
/// it is read and never copied. Build it once the headers passed
/// [`SignatureHeaders::check_before_body`], feed every piece to [`update`](Self::update), then
/// call [`finish`](Self::finish).
pub struct BodySignature {
    mac: HmacSha256,
    given: Vec<u8>,
}

impl fmt::Debug for BodySignature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BodySignature").finish_non_exhaustive()
    }
}

impl BodySignature {
    /// Starts verifying a request of `method` to `path` (with its query, as sent) signed with
    /// `headers`, against `secret`.
    pub fn new(secret: &[u8], method: &str, path: &str, headers: &SignatureHeaders) -> Self {
        Self {
            mac: mac_of_head(secret, method, path, headers.timestamp, &headers.nonce),
            given: hex::decode(&headers.signature).unwrap_or_default(),
        }
    }

    /// Adds the next piece of the body.
    pub fn update(&mut self, piece: &[u8]) {
        self.mac.update(piece);
    }

    /// Whether the signature matches the whole body (compared in constant time).
    pub fn finish(self) -> Result<(), SignatureError> {
        self.mac
            .verify_slice(&self.given)
            .map_err(|_| SignatureError::Mismatch)
    }
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
    headers.check_before_body(now_unix)?;
    let mut check = BodySignature::new(secret, method, path, headers);
    check.update(body);
    check.finish()
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

    /// The replay half of [`verify`](Self::verify), to run once the signature is checked (for
    /// example by [`BodySignature`]): refuses the request if its app + nonce was already
    /// accepted, else remembers it. Never call it for a request whose signature is not verified.
    pub fn check_and_remember(
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

    fn parse(pairs: &[(&str, &str)]) -> Result<SignatureHeaders, SignatureError> {
        SignatureHeaders::from_all_values(|name| {
            pairs
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_bytes())
                .collect::<Vec<_>>()
        })
    }

    const SIG: &str = "fda8c617692ebb4463a272f52626fa6658908c28f37c5dd2174b313c4d327702";

    fn with(name: &str, value: &'static str) -> Vec<(String, &'static str)> {
        let mut pairs = vec![
            (headers::APP.to_owned(), "acme.billing"),
            (headers::TIMESTAMP.to_owned(), "1795000003"),
            (headers::NONCE.to_owned(), "abcdefgh12345678"),
            (headers::SIGNATURE.to_owned(), SIG),
        ];
        for p in &mut pairs {
            if p.0 == name {
                p.1 = value;
            }
        }
        pairs
    }

    fn parse_owned(pairs: &[(String, &str)]) -> Result<SignatureHeaders, SignatureError> {
        let borrowed: Vec<(&str, &str)> = pairs.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        parse(&borrowed)
    }

    #[test]
    fn non_canonical_timestamps_are_refused() {
        assert!(parse_owned(&with(headers::TIMESTAMP, "1795000003")).is_ok());
        for text in ["+1795000003", "01795000003", "1795000003.0", "-5", "1e9"] {
            assert_eq!(
                parse_owned(&with(headers::TIMESTAMP, text)),
                Err(SignatureError::BadTimestamp(text.to_owned())),
                "{text:?}"
            );
        }
        assert_eq!(parse_canonical_timestamp("0"), Some(0));
        assert_eq!(parse_canonical_timestamp("99999999999999999999"), None);
    }

    #[test]
    fn upper_case_or_short_signatures_are_refused_before_the_body() {
        let upper = SIG.to_ascii_uppercase();
        let upper: &'static str = Box::leak(upper.into_boxed_str());
        assert_eq!(
            parse_owned(&with(headers::SIGNATURE, upper)),
            Err(SignatureError::BadSignatureFormat)
        );
        assert_eq!(
            parse_owned(&with(headers::SIGNATURE, "abcd")),
            Err(SignatureError::BadSignatureFormat)
        );
    }

    #[test]
    fn a_repeated_signature_header_is_refused() {
        for name in [
            headers::APP,
            headers::TIMESTAMP,
            headers::NONCE,
            headers::SIGNATURE,
        ] {
            let mut pairs = with("none", "");
            let copy = pairs
                .iter()
                .find(|(n, _)| n == name)
                .cloned()
                .expect("every header is in the list");
            pairs.push(copy);
            assert_eq!(
                parse_owned(&pairs),
                Err(SignatureError::DuplicateHeader(name))
            );
        }
    }

    #[test]
    fn body_signature_fed_in_pieces_matches_the_whole() {
        let now = 1_800_000_000;
        let body = b"{\"results\": []}";
        let h = Signer::new("billing", SECRET).sign_with("POST", "/p?x=1", body, now, "abcdefgh");
        let mut check = BodySignature::new(SECRET, "POST", "/p?x=1", &h);
        for piece in body.chunks(3) {
            check.update(piece);
        }
        assert_eq!(check.finish(), Ok(()));
        let mut short = BodySignature::new(SECRET, "POST", "/p?x=1", &h);
        short.update(&body[..body.len() - 1]);
        assert_eq!(short.finish(), Err(SignatureError::Mismatch));
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
