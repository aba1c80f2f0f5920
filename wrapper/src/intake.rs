//! Reading signed request bodies without letting unauthenticated clients pin memory.
//!
//! Both ends of the protocol (a wrapper's run API and an engine's callback API) receive requests
//! through this module:
//!
//! 1. [`signature_headers`] refuses a request from its headers alone (missing, repeated or
//!    malformed signature headers, a stale timestamp); the receiver then checks the app key,
//!    still without reading the body.
//! 2. [`Intake::read_signed`] reads the body: a declared `Content-Length` above the limit is
//!    refused at once (413), so is a body without a declared length (411: chunked bodies are not
//!    accepted), the declared length is taken from a process-wide budget of unverified bytes until
//!    the signature over the body is checked (503 at once when the budget is spent), the body
//!    must arrive within the read timeout (408), and the signature is computed as the pieces
//!    arrive. Only a verified body leaves this module.
//!
//! So a flood of unsigned uploads costs a few KB each (they are answered from the headers), and
//! uploads with plausible headers hold at most the budget between them, for at most the read
//! timeout.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use actix_web::web::{Bytes, BytesMut, Payload};
use actix_web::{HttpRequest, HttpResponse};
use futures::StreamExt;

use crate::protocol::{
    BodySignature, ErrorBody, ErrorCode, ReplayGuard, SignatureError, SignatureHeaders, unix_now,
};

/// Largest request body accepted, in bytes (16 MiB), on both ends of the protocol.
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// Most bytes of bodies whose signature is not yet verified held at once by one process (16 MiB).
pub const MAX_UNVERIFIED_BYTES: usize = 16 * 1024 * 1024;

/// How long a request body may take to arrive once its headers are read (10 s).
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a request was refused before its body could be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IntakeError {
    /// Signature headers missing, repeated, malformed, stale or not matching: 401.
    #[error("{0}")]
    Unauthorized(#[from] SignatureError),
    /// The body is (or declares to be) larger than the limit: 413.
    #[error("request body is larger than the limit of {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// Too many bodies are being received at once: 503, try again.
    #[error("too many request bodies are being received; try again")]
    Busy,
    /// The body has no declared length (e.g. chunked transfer encoding): 411.
    #[error("request body must be sent with a Content-Length (chunked bodies are not accepted)")]
    LengthRequired,
    /// The body did not arrive within the read timeout: 408.
    #[error("request body did not arrive within {} ms", .0.as_millis())]
    TimedOut(Duration),
    /// The connection failed or the body was not valid HTTP framing: 400.
    #[error("request body could not be read: {0}")]
    Broken(String),
}

impl IntakeError {
    /// The protocol error code (and so the HTTP status) of this refusal.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Unauthorized(_) => ErrorCode::Unauthorized,
            Self::TooLarge { .. } => ErrorCode::TooLarge,
            Self::Busy => ErrorCode::Unavailable,
            Self::LengthRequired => ErrorCode::LengthRequired,
            Self::TimedOut(_) => ErrorCode::Timeout,
            Self::Broken(_) => ErrorCode::Malformed,
        }
    }

    /// The answer to send: the protocol's error body. The connection is closed after it, since
    /// the rest of the body may still be on its way.
    pub fn response(&self) -> HttpResponse {
        error_response(self.code(), self.to_string())
    }
}

/// An answer carrying the protocol's error body, closing the connection.
pub fn error_response(code: ErrorCode, message: impl Into<String>) -> HttpResponse {
    let status =
        StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    HttpResponse::build(status)
        .force_close()
        .json(ErrorBody::new(code, message))
}

/// Keeps a refused request's unread body attached for a moment, so that the server closes the
/// connection after the answer. (A body dropped unread is drained by the server when it is
/// chunked — read and discarded for as long as the client keeps sending.) Call it with the
/// payload of every refused request; it must run on the server's worker.
pub fn close_after_answer(req: &HttpRequest, payload: Payload) {
    if !req.headers().contains_key(TRANSFER_ENCODING) {
        // A body of declared length left unread already makes the server close.
        return;
    }
    actix_web::rt::spawn(async move {
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
        drop(payload);
    });
}

/// The request's signature headers, checked as far as the headers alone allow (everything but
/// the app key and the HMAC over the body).
pub fn signature_headers(req: &HttpRequest) -> Result<SignatureHeaders, SignatureError> {
    let headers = SignatureHeaders::from_all_values(|name| {
        req.headers()
            .get_all(name)
            .map(|v| v.as_bytes())
            .collect::<Vec<_>>()
    })?;
    headers.check_before_body(unix_now())?;
    Ok(headers)
}

/// The path a request signed: its path with the query, exactly as sent.
pub fn signed_path(req: &HttpRequest) -> &str {
    req.uri()
        .path_and_query()
        .map_or(req.uri().path(), |p| p.as_str())
}

/// The limits of one receiver: per-request size, read timeout and the shared budget of
/// unverified body bytes.
#[derive(Debug)]
pub struct Intake {
    limit: usize,
    timeout: Duration,
    budget: usize,
    unverified: AtomicUsize,
}

impl Default for Intake {
    fn default() -> Self {
        Self::with_read_timeout(BODY_READ_TIMEOUT)
    }
}

/// Bytes taken from the budget, given back when dropped.
struct Reserved<'a> {
    intake: &'a Intake,
    bytes: usize,
}

impl Reserved<'_> {
    fn take(&mut self, n: usize) -> bool {
        let taken =
            self.intake
                .unverified
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                    used.checked_add(n).filter(|&u| u <= self.intake.budget)
                });
        if taken.is_ok() {
            self.bytes += n;
        }
        taken.is_ok()
    }
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        self.intake
            .unverified
            .fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

impl Intake {
    /// Bodies up to `limit` bytes, at most `budget` unverified bytes at once, each body read
    /// within `timeout`. A budget below the limit is raised to it, so a body of the limit's size
    /// can always be received when nothing else is.
    pub fn new(limit: usize, budget: usize, timeout: Duration) -> Self {
        Self {
            limit,
            timeout,
            budget: budget.max(limit),
            unverified: AtomicUsize::new(0),
        }
    }

    /// The default limits ([`MAX_BODY_BYTES`], [`MAX_UNVERIFIED_BYTES`]), each body read within
    /// `timeout` instead of [`BODY_READ_TIMEOUT`].
    pub fn with_read_timeout(timeout: Duration) -> Self {
        Self::new(MAX_BODY_BYTES, MAX_UNVERIFIED_BYTES, timeout)
    }

    /// The per-request limit, in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Unverified body bytes held now.
    pub fn unverified_bytes(&self) -> usize {
        self.unverified.load(Ordering::Acquire)
    }

    /// Reads the body of `req` and verifies it against `headers` (already checked by
    /// [`signature_headers`]) and `secret`, then refuses a replay through `replay`. The body is
    /// returned only when the signature matches. On failure, pass the payload to
    /// [`close_after_answer`].
    pub async fn read_signed(
        &self,
        req: &HttpRequest,
        payload: &mut Payload,
        headers: &SignatureHeaders,
        secret: &[u8],
        replay: &ReplayGuard,
    ) -> Result<Bytes, IntakeError> {
        let declared = match declared_length(req) {
            Some(n) => n,
            None if req.headers().contains_key(TRANSFER_ENCODING) => {
                return Err(IntakeError::LengthRequired);
            }
            None => 0,
        };
        if declared > self.limit {
            return Err(IntakeError::TooLarge { limit: self.limit });
        }
        // The whole declared length is taken from the budget before a byte is read, so a body
        // that cannot be held is refused at once; memory is used only as the bytes arrive.
        let mut reserved = Reserved {
            intake: self,
            bytes: 0,
        };
        if !reserved.take(declared) {
            return Err(IntakeError::Busy);
        }
        let mut check =
            BodySignature::new(secret, req.method().as_str(), signed_path(req), headers);
        let read = async {
            let mut body = Blocks::expecting(declared);
            while let Some(piece) = payload.next().await {
                let piece = piece.map_err(|e| IntakeError::Broken(e.to_string()))?;
                if body.len + piece.len() > declared {
                    return Err(IntakeError::Broken(
                        "more bytes than the declared Content-Length".to_owned(),
                    ));
                }
                check.update(&piece);
                body.push(&piece);
            }
            Ok(body)
        };
        let body = tokio::time::timeout(self.timeout, read)
            .await
            .map_err(|_| IntakeError::TimedOut(self.timeout))??;
        check.finish()?;
        drop(reserved);
        replay.check_and_remember(headers, unix_now())?;
        Ok(body.concat())
    }
}

/// A body being received, copied into blocks of [`BLOCK_BYTES`] allocated as it grows: no
/// buffer is ever reallocated (a growing buffer's copies and freed halves would make the
/// process's memory grow well beyond the bytes held). The pieces handed over by the HTTP server are
/// copied rather than kept, since a small piece can share a much larger read buffer.
struct Blocks {
    blocks: Vec<Vec<u8>>,
    len: usize,
    /// The declared length: no block is larger than what is still to come.
    declared: usize,
}

/// Size of the blocks a body is received in.
const BLOCK_BYTES: usize = 64 * 1024;

impl Blocks {
    fn expecting(declared: usize) -> Self {
        Self {
            blocks: Vec::new(),
            len: 0,
            declared,
        }
    }

    /// Adds a piece; the caller has checked that it stays within the declared length.
    fn push(&mut self, mut piece: &[u8]) {
        while !piece.is_empty() {
            let room = self.blocks.last().map_or(0, |b| b.capacity() - b.len());
            if room == 0 {
                let size = BLOCK_BYTES.min(self.declared.saturating_sub(self.len));
                self.blocks
                    .push(Vec::with_capacity(size.max(piece.len().min(BLOCK_BYTES))));
                continue;
            }
            let n = room.min(piece.len());
            if let Some(block) = self.blocks.last_mut() {
                block.extend_from_slice(&piece[..n]);
            }
            self.len += n;
            piece = &piece[n..];
        }
    }

    /// The body in one buffer (made once the signature is verified).
    fn concat(self) -> Bytes {
        let mut out = BytesMut::with_capacity(self.len);
        for block in self.blocks {
            out.extend_from_slice(&block);
        }
        out.freeze()
    }
}

/// The `Content-Length` the request declares, if any.
fn declared_length(req: &HttpRequest) -> Option<usize> {
    req.headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_is_given_back_when_a_reservation_ends() {
        const B: usize = BLOCK_BYTES;
        let intake = Intake::new(B, 3 * B, BODY_READ_TIMEOUT);
        let mut first = Reserved {
            intake: &intake,
            bytes: 0,
        };
        assert!(first.take(2 * B));
        let mut second = Reserved {
            intake: &intake,
            bytes: 0,
        };
        assert!(second.take(B));
        assert!(!second.take(1), "the budget of three blocks is spent");
        drop(first);
        assert_eq!(intake.unverified_bytes(), B);
        assert!(second.take(2 * B));
        drop(second);
        assert_eq!(intake.unverified_bytes(), 0);
    }

    #[test]
    fn refusals_carry_their_protocol_status() {
        let cases = [
            (
                IntakeError::Unauthorized(SignatureError::Mismatch),
                401,
                ErrorCode::Unauthorized,
            ),
            (IntakeError::TooLarge { limit: 1 }, 413, ErrorCode::TooLarge),
            (IntakeError::Busy, 503, ErrorCode::Unavailable),
            (IntakeError::LengthRequired, 411, ErrorCode::LengthRequired),
            (
                IntakeError::TimedOut(Duration::from_secs(1)),
                408,
                ErrorCode::Timeout,
            ),
        ];
        for (error, status, code) in cases {
            assert_eq!(error.code(), code);
            assert_eq!(error.response().status().as_u16(), status);
        }
    }
}
