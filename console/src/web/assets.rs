//! The console's static files (`console/static/`), embedded in the binary and served at
//! `/static/…` with their MIME type.

use actix_web::http::header;
use actix_web::{HttpResponse, web};

#[derive(rust_embed::Embed)]
#[folder = "static/"]
struct Static;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/static/{path:.*}", web::get().to(serve));
}

async fn serve(path: web::Path<String>) -> HttpResponse {
    match Static::get(&path) {
        Some(file) => HttpResponse::Ok()
            .content_type(file.metadata.mimetype())
            .insert_header((header::CACHE_CONTROL, "no-cache"))
            .body(file.data.into_owned()),
        None => HttpResponse::NotFound().body("no such file"),
    }
}
