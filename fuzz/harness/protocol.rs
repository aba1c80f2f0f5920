//! The checks behind the protocol fuzz targets, shared with the corpus replay test
//! (`wrapper/tests/suite/fuzz_corpus.rs`) so that CI runs every corpus file through exactly what the
//! fuzzer ran. Each function takes arbitrary bytes, must never panic, and asserts properties that
//! hold for every input.
//!
//! Input format of the header and verification targets (chosen so corpus files stay readable):
//! `NAME: VALUE` lines. Lines naming one of the four signature headers (any case) become header
//! values, repeated names become repeated headers. `now:` sets the receiver clock (decimal Unix
//! seconds); `secret:`, `method:` and `path:` set the verification inputs. After the first empty
//! line comes the body, byte for byte.

use mthpt_wrapper::protocol::{
    self, BodySignature, ReplayGuard, SignatureError, SignatureHeaders, Signer, headers,
    verify_signature,
};

/// The receiver clock when the input does not set one (2027-01-15).
pub const DEFAULT_NOW: i64 = 1_800_000_000;

/// One fuzz input split into its parts.
#[derive(Debug, Default)]
pub struct Request<'a> {
    pub header_values: Vec<(&'static str, &'a [u8])>,
    pub now: Option<i64>,
    pub secret: Option<&'a [u8]>,
    pub method: Option<&'a [u8]>,
    pub path: Option<&'a [u8]>,
    pub body: &'a [u8],
}

const SIGNATURE_HEADERS: [&str; 4] = [
    headers::APP,
    headers::TIMESTAMP,
    headers::NONCE,
    headers::SIGNATURE,
];

fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| *b != b' ' && *b != b'\t')
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| *b != b' ' && *b != b'\t' && *b != b'\r')
        .map_or(start, |i| i + 1);
    &bytes[start..end.max(start)]
}

impl<'a> Request<'a> {
    /// Splits `data` into header lines and body (see the module docs).
    pub fn split(data: &'a [u8]) -> Request<'a> {
        let mut request = Request::default();
        let mut rest = data;
        loop {
            let (line, after) = match rest.iter().position(|b| *b == b'\n') {
                Some(i) => (&rest[..i], &rest[i + 1..]),
                None => (rest, &rest[rest.len()..]),
            };
            if trim(line).is_empty() {
                request.body = after;
                return request;
            }
            rest = after;
            let Some(colon) = line.iter().position(|b| *b == b':') else {
                continue;
            };
            let name = trim(&line[..colon]);
            let value = trim(&line[colon + 1..]);
            if let Some(header) = SIGNATURE_HEADERS
                .iter()
                .find(|h| h.as_bytes().eq_ignore_ascii_case(name))
            {
                request.header_values.push((header, value));
            } else if name.eq_ignore_ascii_case(b"now") {
                request.now = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok());
            } else if name.eq_ignore_ascii_case(b"secret") {
                request.secret = Some(value);
            } else if name.eq_ignore_ascii_case(b"method") {
                request.method = Some(value);
            } else if name.eq_ignore_ascii_case(b"path") {
                request.path = Some(value);
            }
            if rest.is_empty() {
                return request;
            }
        }
    }

    /// The signature headers as a receiver reads them: every value of each name.
    pub fn parse_headers(&self) -> Result<SignatureHeaders, SignatureError> {
        SignatureHeaders::from_all_values(|name| {
            self.header_values
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| *v)
                .collect::<Vec<_>>()
        })
    }

    fn now(&self) -> i64 {
        self.now.unwrap_or(DEFAULT_NOW)
    }
}

/// Target `signature_headers`: parse the four headers and check them before the body.
/// Returns whether the headers were accepted at the input's clock.
pub fn check_signature_headers(data: &[u8]) -> bool {
    let request = Request::split(data);
    let Ok(parsed) = request.parse_headers() else {
        return false;
    };
    // Accepted headers are canonical: written back out they read as the same headers.
    let pairs = parsed.pairs();
    let again = SignatureHeaders::from_all_values(|name| {
        pairs
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_bytes())
            .collect::<Vec<_>>()
    });
    assert_eq!(
        again.as_ref(),
        Ok(&parsed),
        "accepted headers do not round-trip"
    );
    let timestamp_text = pairs[1].1.as_bytes();
    let received = request
        .header_values
        .iter()
        .find(|(n, _)| *n == headers::TIMESTAMP)
        .map(|(_, v)| *v);
    assert_eq!(
        received,
        Some(timestamp_text),
        "the verified timestamp text differs from the received one"
    );
    for now in [parsed.timestamp, i64::MIN, i64::MAX, 0] {
        let _ = parsed.check_before_body(now);
    }
    parsed.check_before_body(request.now()).is_ok()
}

/// Target `verify_request`: full verification of headers + body against a secret, plus the
/// sign-then-verify round trip for the same method, path and body. Returns whether the request
/// as given verified.
pub fn check_verify_request(data: &[u8]) -> bool {
    let request = Request::split(data);
    let secret = request.secret.unwrap_or(b"fuzz-secret");
    let method = String::from_utf8_lossy(request.method.unwrap_or(b"POST"));
    let path = String::from_utf8_lossy(request.path.unwrap_or(b"/mthpt/v1/runs"));
    let now = request.now();
    let body = request.body;

    let mut verified = false;
    if let Ok(parsed) = request.parse_headers() {
        let whole = verify_signature(secret, &method, &path, &parsed, body, now);
        // Hashing the body in two pieces, as the intake does, decides the same.
        let streamed = parsed.check_before_body(now).and_then(|()| {
            let mut check = BodySignature::new(secret, &method, &path, &parsed);
            let (a, b) = body.split_at(body.len() / 2);
            check.update(a);
            check.update(b);
            check.finish()
        });
        assert_eq!(
            whole, streamed,
            "streamed and whole-body verification differ"
        );
        if whole.is_ok() {
            verified = true;
            let guard = ReplayGuard::new();
            assert_eq!(
                guard.verify(secret, &method, &path, &parsed, body, now),
                Ok(())
            );
            assert_eq!(
                guard.verify(secret, &method, &path, &parsed, body, now),
                Err(SignatureError::Replayed),
                "a verified request was accepted twice"
            );
        }
    }

    // What a signer produces for this request verifies, and any change to the body breaks it.
    let signer = Signer::new("demo.shop", secret.to_vec());
    let timestamp = now.max(0);
    let signed = signer.sign_with(&method, &path, body, timestamp, "fuzz-nonce-0001");
    let pairs = signed.pairs();
    let read = SignatureHeaders::from_all_values(|name| {
        pairs
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_bytes())
            .collect::<Vec<_>>()
    });
    assert_eq!(
        read.as_ref(),
        Ok(&signed),
        "signed headers do not parse back"
    );
    assert_eq!(
        verify_signature(secret, &method, &path, &signed, body, timestamp),
        Ok(()),
        "a freshly signed request does not verify"
    );
    let mut tampered = body.to_vec();
    match tampered.first_mut() {
        Some(b) => *b ^= 1,
        None => tampered.push(b'x'),
    }
    assert_eq!(
        verify_signature(secret, &method, &path, &signed, &tampered, timestamp),
        Err(SignatureError::Mismatch),
        "a changed body still verifies"
    );
    verified
}

/// Target `protocol_json`: the first line names a protocol body type, the rest is its JSON.
/// Whatever parses must serialize and parse back to the same value and pass its own checks.
/// Returns whether the body parsed as the named type.
pub fn check_protocol_json(data: &[u8]) -> bool {
    let (name, json) = match data.iter().position(|b| *b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &data[data.len()..]),
    };
    macro_rules! round_trip {
        ($($ty:ident),* $(,)?) => {
            match trim(name) {
                $(n if n == stringify!($ty).as_bytes() => {
                    match serde_json::from_slice::<protocol::$ty>(json) {
                        Ok(value) => {
                            let text = serde_json::to_vec(&value).unwrap_or_else(|e| {
                                panic!("{} does not serialize: {e}", stringify!($ty))
                            });
                            let back = serde_json::from_slice::<protocol::$ty>(&text)
                                .unwrap_or_else(|e| {
                                    panic!("{} does not parse back: {e}", stringify!($ty))
                                });
                            assert_eq!(back, value, "{} changed in a round trip", stringify!($ty));
                            validate(&value);
                            true
                        }
                        Err(_) => false,
                    }
                })*
                _ => false,
            }
        };
    }
    round_trip!(
        RunRequest,
        RunBatchRequest,
        RunAck,
        RunBatchResponse,
        RunStatus,
        CancelRequest,
        CancelResponse,
        HealthResponse,
        RegisterRequest,
        RegisterResponse,
        HeartbeatRequest,
        HeartbeatResponse,
        DeregisterRequest,
        DeregisterResponse,
        RunResult,
        ResultBatch,
        ResultBatchResponse,
        ProgressBatch,
        ProgressBatchResponse,
        ErrorBody,
    )
}

/// The protocol's own checks beyond serde, run on whatever parsed.
trait Validate {
    fn check(&self) {}
}

fn validate<T: Validate>(value: &T) {
    value.check();
}

impl Validate for protocol::RunRequest {
    fn check(&self) {
        let _ = self.validate();
    }
}

impl Validate for protocol::RunBatchRequest {
    fn check(&self) {
        for run in &self.runs {
            let _ = run.validate();
        }
    }
}

impl Validate for protocol::ProgressBatch {
    fn check(&self) {
        let _ = self.run_ids();
    }
}

impl Validate for protocol::RunAck {}
impl Validate for protocol::RunBatchResponse {}
impl Validate for protocol::RunStatus {}
impl Validate for protocol::CancelRequest {}
impl Validate for protocol::CancelResponse {}
impl Validate for protocol::HealthResponse {}
impl Validate for protocol::RegisterRequest {}
impl Validate for protocol::RegisterResponse {}
impl Validate for protocol::HeartbeatRequest {}
impl Validate for protocol::HeartbeatResponse {}
impl Validate for protocol::DeregisterRequest {}
impl Validate for protocol::DeregisterResponse {}
impl Validate for protocol::RunResult {}
impl Validate for protocol::ResultBatch {}
impl Validate for protocol::ResultBatchResponse {}
impl Validate for protocol::ProgressBatchResponse {}
impl Validate for protocol::ErrorBody {}
