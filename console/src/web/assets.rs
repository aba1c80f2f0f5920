//! The console's static files (`console/static/`), embedded in the binary and served at
//! `/static/…` with their MIME type and an `ETag` (their SHA-256): a browser revalidates
//! them on every page (`no-cache`) and a file that did not change costs a `304` and no body.

use std::fmt::Write as _;

use actix_web::http::{StatusCode, header};
use actix_web::{HttpRequest, HttpResponse, web};

#[derive(rust_embed::Embed)]
#[folder = "static/"]
struct Static;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/static/{path:.*}", web::get().to(serve));
}

/// The quoted entity tag of a file's content.
fn etag(sha256: &[u8; 32]) -> String {
    let mut tag = String::with_capacity(66);
    tag.push('"');
    for b in sha256 {
        let _ = write!(tag, "{b:02x}");
    }
    tag.push('"');
    tag
}

/// Whether an `If-None-Match` header names `tag` (or `*`).
fn matches(if_none_match: &str, tag: &str) -> bool {
    if_none_match
        .split(',')
        .map(|t| t.trim().trim_start_matches("W/"))
        .any(|t| t == tag || t == "*")
}

async fn serve(req: HttpRequest, path: web::Path<String>) -> HttpResponse {
    let Some(file) = Static::get(&path) else {
        return HttpResponse::NotFound().body("no such file");
    };
    let tag = etag(&file.metadata.sha256_hash());
    let unchanged = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| matches(v, &tag));
    let mut answer = if unchanged {
        HttpResponse::build(StatusCode::NOT_MODIFIED)
    } else {
        HttpResponse::Ok()
    };
    answer
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header((header::ETAG, tag));
    if unchanged {
        answer.finish()
    } else {
        answer
            .content_type(file.metadata.mimetype())
            .body(file.data.into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entity_tags_match_exactly_weakly_in_lists_or_by_star() {
        let tag = etag(&[0xab; 32]);
        assert_eq!(tag.len(), 66);
        assert!(tag.starts_with("\"abab"));
        assert!(matches(&tag, &tag));
        assert!(matches(&format!("W/{tag}"), &tag));
        assert!(matches(&format!("\"x\", {tag}"), &tag));
        assert!(matches("*", &tag));
        assert!(!matches("\"abab\"", &tag));
        assert!(!matches("", &tag));
    }
}
