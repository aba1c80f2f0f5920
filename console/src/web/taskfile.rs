//! A tenant's tasks as a file, in the console: `GET /t/{tenant}/tasks/export?format=toml|json`
//! downloads it (the same file as the API's export); `/t/{tenant}/tasks/import` takes one
//! (pasted, or uploaded as a file), first as a dry run that shows what would be created,
//! changed and deleted, then applies it with a second post. Errors are shown on the page, each
//! with the entry it is about (`tasks[3].schedule.expr`).

use actix_multipart::Multipart;
use actix_web::http::StatusCode;
use actix_web::http::header::{self, ContentDisposition, DispositionParam, DispositionType};
use actix_web::{FromRequest, HttpRequest, HttpResponse, web};
use askama::Template;
use futures::StreamExt;
use serde::Deserialize;

use super::flash::Done;
use super::{Ctx, Layout, html, local_path, see_other, urlencode};
use crate::service::access::{Action, tenant_access};
use crate::service::error::{ApiError, ApiResult, Code, FieldProblem};
use crate::service::taskfile::{self, Format, Plan, Step, TaskFile};
use crate::{or_error, page_ctx};

/// Mounted before the task pages: `/tasks/export` must not be read as `/tasks/{id}`.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/t/{tenant}/tasks/export", web::get().to(export))
        .service(
            web::resource("/t/{tenant}/tasks/import")
                // A URL-encoded post carries the whole file too.
                .app_data(web::FormConfig::default().limit(MAX_FILE_BYTES))
                .route(web::get().to(import_form))
                .route(web::post().to(import)),
        );
}

/// The largest task file the import page reads.
pub const MAX_FILE_BYTES: usize = 4 * 1024 * 1024;

#[derive(Debug, Deserialize)]
struct ExportQuery {
    format: Option<String>,
}

/// A file name made of the tenant's name (letters, digits, `-` and `_` only).
fn file_name(tenant: &str, ext: &str) -> String {
    let safe: String = tenant
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{safe}-tasks.{ext}")
}

/// `GET /t/{tenant}/tasks/export?format=toml|json`: the task file as a download.
async fn export(
    req: HttpRequest,
    tenant: web::Path<String>,
    q: web::Query<ExportQuery>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let (format, ext, content_type) = match q.format.as_deref().unwrap_or("toml") {
        "toml" => (Format::Toml, "toml", "application/toml"),
        "json" => (Format::Json, "json", "application/json"),
        other => {
            return ctx.error(&ApiError::field(
                "format",
                format!("{other:?} is not toml or json"),
            ));
        }
    };
    let file = or_error!(
        ctx,
        taskfile::export(&ctx.services, &ctx.caller, &tenant).await
    );
    let text = or_error!(ctx, file.render(format).map_err(ApiError::internal));
    HttpResponse::Ok()
        .content_type(content_type)
        .insert_header(ContentDisposition {
            disposition: DispositionType::Attachment,
            parameters: vec![DispositionParam::Filename(file_name(&tenant, ext))],
        })
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .body(text)
}

/// One line of the plan as the page shows it.
#[derive(Debug, Clone)]
pub struct PlanRow {
    /// `create`, `update`, `unchanged`, `delete`: a class and test hook.
    pub step: &'static str,
    pub step_label: String,
    pub kind: String,
    pub name: String,
    pub changes: String,
}

#[derive(Template)]
#[template(path = "task_import.html")]
struct ImportPage {
    l: Layout,
    action: String,
    /// The file's text, as pasted or uploaded (kept for the next post).
    text: String,
    /// `toml`, `json` or empty (recognised from the text).
    format: String,
    prune: bool,
    /// What is wrong: (entry, message); an entry of `text` is about the file as a whole.
    errors: Vec<(String, String)>,
    /// The dry run's plan (empty before one).
    plan: Vec<PlanRow>,
    /// (label, count) of each step of the plan.
    counts: Vec<(String, usize)>,
    /// A dry run was made and the file changes something: Apply is offered.
    can_apply: bool,
    planned: bool,
}

impl ImportPage {
    async fn of(ctx: &Ctx, req: &HttpRequest, tenant: &str, input: &Input) -> ApiResult<Self> {
        let tenant = tenant_access(&ctx.services, &ctx.caller, tenant, Action::Administer).await?;
        let l = Layout::of(
            ctx,
            &tenant,
            ctx.tr.t("import.title"),
            local_path(req),
            "tasks",
        )
        .await?;
        Ok(ImportPage {
            action: l.link("tasks/import"),
            l,
            text: input.text.clone(),
            format: input.format.clone(),
            prune: input.prune,
            errors: Vec::new(),
            plan: Vec::new(),
            counts: Vec::new(),
            can_apply: false,
            planned: false,
        })
    }

    fn show_plan(&mut self, tr: super::i18n::Tr, plan: &Plan) {
        let steps = [
            (Step::Create, "create"),
            (Step::Update, "update"),
            (Step::Delete, "delete"),
            (Step::Unchanged, "unchanged"),
        ];
        let key = |step: Step| {
            steps
                .iter()
                .find(|(s, _)| *s == step)
                .map_or("", |(_, k)| k)
        };
        self.counts = steps
            .iter()
            .map(|(s, k)| (tr.t(&format!("import.step.{k}")), plan.count(*s)))
            .collect();
        let mut items: Vec<_> = plan.items.iter().collect();
        // What changes first, in the order of `steps`.
        items.sort_by_key(|i| steps.iter().position(|(s, _)| *s == i.step));
        self.plan = items
            .into_iter()
            .map(|i| PlanRow {
                step: key(i.step),
                step_label: tr.t(&format!("import.step.{}", key(i.step))),
                kind: tr.t(&format!("import.kind.{}", i.kind)),
                name: i.name.clone(),
                changes: i.changes.join(", "),
            })
            .collect();
        self.can_apply = plan.has_changes();
        self.planned = true;
    }
}

/// What the import form posted.
#[derive(Debug, Clone, Default)]
struct Input {
    text: String,
    format: String,
    prune: bool,
    /// `apply` for the second post; else a dry run.
    step: String,
}

impl Input {
    fn from_pairs(pairs: &[(String, String)]) -> Input {
        let v = |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        Input {
            text: v("text"),
            format: v("format"),
            prune: !v("prune").is_empty(),
            step: v("step"),
        }
    }

    /// The format named, or recognised from the text (JSON starts with `{`).
    fn format(&self) -> Format {
        match self.format.as_str() {
            "json" => Format::Json,
            "toml" => Format::Toml,
            _ if self.text.trim_start().starts_with('{') => Format::Json,
            _ => Format::Toml,
        }
    }
}

/// Reads the import form: a multipart form (with the uploaded file, which wins over the
/// text when it has content) or a plain URL-encoded one.
async fn read_input(req: &HttpRequest, payload: web::Payload) -> ApiResult<Input> {
    let multipart = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/form-data"));
    let mut payload = payload.into_inner();
    if !multipart {
        let pairs = web::Form::<Vec<(String, String)>>::from_request(req, &mut payload)
            .await
            .map_err(|e| ApiError::bad_request(format!("the form cannot be read: {e}")))?;
        return Ok(Input::from_pairs(&pairs));
    }
    let mut parts = Multipart::new(req.headers(), payload);
    let mut pairs = Vec::new();
    let mut file = String::new();
    let mut total = 0usize;
    while let Some(field) = parts.next().await {
        let mut field =
            field.map_err(|e| ApiError::bad_request(format!("the form cannot be read: {e}")))?;
        let name = field.name().unwrap_or_default().to_owned();
        let mut bytes = Vec::new();
        while let Some(chunk) = field.next().await {
            let chunk = chunk
                .map_err(|e| ApiError::bad_request(format!("the form cannot be read: {e}")))?;
            total += chunk.len();
            if total > MAX_FILE_BYTES {
                return Err(ApiError::new(
                    Code::PayloadTooLarge,
                    format!("a task file is at most {} MiB", MAX_FILE_BYTES >> 20),
                ));
            }
            bytes.extend_from_slice(&chunk);
        }
        let value = String::from_utf8(bytes)
            .map_err(|_| ApiError::field(name.clone(), "not UTF-8 text"))?;
        if name == "file" {
            file = value;
        } else {
            pairs.push((name, value));
        }
    }
    let mut input = Input::from_pairs(&pairs);
    if !file.trim().is_empty() {
        input.text = file;
    }
    Ok(input)
}

/// `GET /t/{tenant}/tasks/import`: the form (tenant admins).
async fn import_form(req: HttpRequest, tenant: web::Path<String>) -> HttpResponse {
    let ctx = page_ctx!(req);
    let page = or_error!(
        ctx,
        ImportPage::of(&ctx, &req, &tenant, &Input::default()).await
    );
    html(StatusCode::OK, &page)
}

/// `POST /t/{tenant}/tasks/import`: a dry run that shows the plan (and offers Apply), or with
/// `step=apply` the file applied, landing on the task list with a message.
async fn import(
    req: HttpRequest,
    tenant: web::Path<String>,
    payload: web::Payload,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    // A role that may not change tasks is refused before the file is read.
    or_error!(
        ctx,
        tenant_access(&ctx.services, &ctx.caller, &tenant, Action::Administer).await
    );
    let input = or_error!(ctx, read_input(&req, payload).await);
    let mut page = or_error!(ctx, ImportPage::of(&ctx, &req, &tenant, &input).await);
    if input.text.trim().is_empty() {
        page.errors
            .push(("text".to_owned(), ctx.tr.t("import.empty")));
        return html(StatusCode::UNPROCESSABLE_ENTITY, &page);
    }
    let file = match TaskFile::parse(&input.text, input.format()) {
        Ok(f) => f,
        Err(e) => {
            page.errors
                .push(("text".to_owned(), ctx.tr.msg(&e.to_string())));
            return html(StatusCode::UNPROCESSABLE_ENTITY, &page);
        }
    };
    let dry_run = input.step != "apply";
    match taskfile::apply(
        &ctx.services,
        &ctx.caller,
        &tenant,
        &file,
        input.prune,
        dry_run,
    )
    .await
    {
        Ok(plan) if dry_run => {
            page.show_plan(ctx.tr, &plan);
            html(StatusCode::OK, &page)
        }
        Ok(plan) => {
            let changed = plan
                .items
                .iter()
                .filter(|i| i.step != Step::Unchanged)
                .count();
            see_other(
                &Done::Imported(changed as i64).on(&format!("/t/{}/tasks", urlencode(&tenant))),
            )
        }
        Err(e)
            if e.code == Code::ValidationFailed
                || e.code == Code::Conflict
                || e.code == Code::Cycle =>
        {
            page.errors = problems(&ctx.tr.error(&e));
            html(crate::http::status_of(e.code), &page)
        }
        Err(e) => ctx.error(&e),
    }
}

/// Each problem of `e` with the entry it is about; the error's detail when it names none.
fn problems(e: &ApiError) -> Vec<(String, String)> {
    if e.errors.is_empty() {
        return vec![("text".to_owned(), e.detail.clone())];
    }
    e.errors
        .iter()
        .map(|FieldProblem { field, message }| (field.clone(), message.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn download_names_keep_only_safe_characters() {
        assert_eq!(file_name("acme", "toml"), "acme-tasks.toml");
        assert_eq!(file_name("a\"b/c", "json"), "a_b_c-tasks.json");
    }

    #[test]
    fn the_format_is_recognised_from_the_text_unless_named() {
        let input = |text: &str, format: &str| Input {
            text: text.to_owned(),
            format: format.to_owned(),
            ..Default::default()
        };
        assert_eq!(input(" {\"tasks\": []}", "").format(), Format::Json);
        assert_eq!(input("[[tasks]]", "").format(), Format::Toml);
        assert_eq!(input("{}", "toml").format(), Format::Toml);
    }
}
