//! Who is calling and what they may do, for the handlers: the access control is the service's
//! ([`crate::service::access`]), reading the caller from a request is [`crate::http`]'s (the
//! [`Caller`] extractor, the CSRF rule for cookie sessions).

pub use crate::http::{SESSION_COOKIE, authenticate, check_same_origin};
pub use crate::service::access::{
    Action, Caller, Credential, Decision, Target, authorize, decide, tenant_access,
};
