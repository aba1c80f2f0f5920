//! Sign-in and sign-out pages (the session service behind `POST /api/v1/session`), and the
//! language and time-zone choices (cookies).

use actix_web::cookie::{Cookie, SameSite, time};
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use serde::Deserialize;

use super::i18n::{Lang, Tr};
use super::{LANG_COOKIE, Layout, TZ_COOKIE, html, lang_of, safe_next, see_other};
use crate::http::{SESSION_COOKIE, check_same_origin, session_cookie};
use crate::service::error::Code;
use crate::service::{Services, sessions};

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/login", web::get().to(login_page))
        .route("/login", web::post().to(login))
        .route("/logout", web::post().to(logout))
        .route("/lang/{tag}", web::get().to(switch_lang))
        .route("/prefs", web::post().to(save_prefs));
}

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage {
    l: Layout,
    next: String,
    username: String,
    error: String,
}

#[derive(Debug, Deserialize)]
struct NextQuery {
    next: Option<String>,
}

fn login_form(tr: Tr, next: String, username: String, error: String) -> LoginPage {
    LoginPage {
        l: Layout::bare(tr, tr.t("login.title")),
        next,
        username,
        error,
    }
}

async fn login_page(req: HttpRequest, q: web::Query<NextQuery>) -> HttpResponse {
    let tr = Tr::new(lang_of(&req));
    let next = safe_next(q.next.as_deref());
    html(
        StatusCode::OK,
        &login_form(tr, next, String::new(), String::new()),
    )
}

#[derive(Debug, Deserialize)]
struct LoginForm {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    next: Option<String>,
}

async fn login(
    req: HttpRequest,
    services: web::Data<Services>,
    form: web::Form<LoginForm>,
) -> HttpResponse {
    let tr = Tr::new(lang_of(&req));
    let form = form.into_inner();
    let next = safe_next(form.next.as_deref());
    // A sign-in from another site's form would sign the browser into someone else's account.
    if let Err(e) = check_same_origin(&req) {
        return super::error_page(tr, &e);
    }
    let address = req
        .peer_addr()
        .map_or_else(|| "unknown".to_owned(), |a| a.ip().to_string());
    match sessions::sign_in(&services, &form.username, &form.password, &address).await {
        Ok(signed) => {
            let max_age = (signed.expires_at - services.now()) / 1000;
            HttpResponse::SeeOther()
                .cookie(session_cookie(&req, signed.cookie_value, max_age))
                .insert_header(("Location", next))
                .finish()
        }
        Err(e) => {
            let (status, message) = match e.code {
                Code::Unauthenticated => (StatusCode::UNAUTHORIZED, tr.t("login.wrong")),
                Code::RateLimited => (StatusCode::TOO_MANY_REQUESTS, tr.t("login.rate_limited")),
                _ => return super::error_page(tr, &e),
            };
            html(status, &login_form(tr, next, form.username, message))
        }
    }
}

async fn logout(req: HttpRequest, services: web::Data<Services>) -> HttpResponse {
    let tr = Tr::new(lang_of(&req));
    if let Err(e) = check_same_origin(&req) {
        return super::error_page(tr, &e);
    }
    if let Some(c) = req.cookie(SESSION_COOKIE)
        && let Err(e) = sessions::sign_out(&services, c.value()).await
    {
        return super::error_page(tr, &e);
    }
    HttpResponse::SeeOther()
        .cookie(session_cookie(&req, String::new(), 0))
        .insert_header(("Location", "/login"))
        .finish()
}

fn pref_cookie(name: &'static str, value: String) -> Cookie<'static> {
    Cookie::build(name, value)
        .path("/")
        .same_site(SameSite::Lax)
        .max_age(time::Duration::days(365))
        .finish()
}

#[derive(Debug, Deserialize)]
struct BackQuery {
    back: Option<String>,
}

/// `GET /lang/{en|zh-CN}?back=…`: remembers the language and goes back.
async fn switch_lang(path: web::Path<String>, q: web::Query<BackQuery>) -> HttpResponse {
    let back = safe_next(q.back.as_deref());
    let mut res = see_other(&back);
    if let Some(lang) = Lang::from_tag(&path) {
        let _ = res.add_cookie(&pref_cookie(LANG_COOKIE, lang.tag().to_owned()));
    }
    res
}

#[derive(Debug, Deserialize)]
struct PrefsForm {
    tz: String,
    back: Option<String>,
}

/// `POST /prefs`: remembers the time zone times are shown in.
async fn save_prefs(req: HttpRequest, form: web::Form<PrefsForm>) -> HttpResponse {
    let tr = Tr::new(lang_of(&req));
    if let Err(e) = check_same_origin(&req) {
        return super::error_page(tr, &e);
    }
    let tz = form.tz.trim();
    let back = safe_next(form.back.as_deref());
    if tz.parse::<chrono_tz::Tz>().is_err() {
        // Back where the reader was, saying so; times stay in the zone they were in.
        return see_other(&super::flash::Done::BadTimeZone(0).on(&back));
    }
    let mut res = see_other(&back);
    let _ = res.add_cookie(&pref_cookie(TZ_COOKIE, tz.to_owned()));
    res
}
