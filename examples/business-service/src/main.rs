//! A small business service that embeds the MTHPT wrapper.
//!
//! It serves its own API (`GET /orders/stats`) and, on the same port, the MTHPT protocol
//! endpoints (`/mthpt/v1/...`) through which engines start two handlers:
//!
//! - `reconcile-orders` — blocking code (each run on its own OS thread);
//! - `send-reminders` — async code (each run a tokio task).
//!
//! Configuration (environment):
//! `MTHPT_APP` (the app key `<tenant>.<app>`, default `demo.shop`), `MTHPT_SECRET_FILE` (required), `MTHPT_ENGINE` (comma-separated
//! engine URLs, required), `LISTEN` (default `127.0.0.1:8088`), `MTHPT_ADVERTISE` (default
//! `http://<LISTEN>`), `MTHPT_SPOOL` (default `.mthpt/spool/<app>`).

use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use actix_web::{App, HttpResponse, HttpServer, web};
use anyhow::Context;
use mthpt_wrapper::{HandlerError, RunContext, Wrapper};
use serde::Deserialize;
use serde_json::json;

/// The service's own state, shared by its API and its handlers.
#[derive(Debug, Default)]
struct Shop {
    orders_reconciled: AtomicU64,
    reminders_sent: AtomicU64,
}

#[derive(Debug, Deserialize)]
struct ReconcileParams {
    day: String,
    #[serde(default = "default_batches")]
    batches: u32,
}

fn default_batches() -> u32 {
    5
}

/// Blocking handler: plain synchronous code on its own thread.
fn reconcile_orders(shop: &Shop, ctx: RunContext) -> Result<serde_json::Value, HandlerError> {
    let params: ReconcileParams = ctx.params_as()?;
    if params.batches == 0 {
        return Err(HandlerError::fatal("batches must be at least 1"));
    }
    ctx.log(format!(
        "reconciling orders of {} (run {}, attempt {})",
        params.day,
        ctx.run_id(),
        ctx.attempt()
    ));
    for batch in 1..=params.batches {
        // Stand-in for real work; wakes up early if the run is cancelled or its deadline passes.
        ctx.sleep(Duration::from_millis(300))?;
        shop.orders_reconciled.fetch_add(100, Ordering::Relaxed);
        ctx.progress(
            f64::from(batch) / f64::from(params.batches),
            format!("batch {batch} of {}", params.batches),
        );
    }
    Ok(json!({ "day": params.day, "orders": params.batches * 100 }))
}

/// Async handler: awaits I/O without holding a thread.
async fn send_reminders(
    shop: Arc<Shop>,
    ctx: RunContext,
) -> Result<serde_json::Value, HandlerError> {
    let count = ctx
        .params()
        .get("count")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(10);
    // Sharded runs split the work: this shard handles every shard_total-th customer.
    let mine: Vec<u64> = (0..count)
        .filter(|c| c % u64::from(ctx.shard_total()) == u64::from(ctx.shard_index()))
        .collect();
    for (i, customer) in mine.iter().enumerate() {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            _ = ctx.cancelled() => return Err(HandlerError::cancelled()),
        }
        shop.reminders_sent.fetch_add(1, Ordering::Relaxed);
        ctx.log(format!("reminder sent to customer {customer}"));
        ctx.progress((i + 1) as f64 / mine.len() as f64, "");
    }
    Ok(json!({ "sent": mine.len() }))
}

async fn stats(shop: web::Data<Shop>) -> HttpResponse {
    HttpResponse::Ok().json(json!({
        "orders_reconciled": shop.orders_reconciled.load(Ordering::Relaxed),
        "reminders_sent": shop.reminders_sent.load(Ordering::Relaxed),
    }))
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();

    let app = env_or("MTHPT_APP", "demo.shop");
    let secret_file = std::env::var("MTHPT_SECRET_FILE")
        .context("MTHPT_SECRET_FILE must name the file holding the app secret")?;
    let secret = std::fs::read(&secret_file)
        .with_context(|| format!("cannot read the secret file {secret_file}"))?;
    let engines = std::env::var("MTHPT_ENGINE")
        .context("MTHPT_ENGINE must list the engine URLs, comma-separated")?;
    let listen = env_or("LISTEN", "127.0.0.1:8088");
    let listener =
        TcpListener::bind(&listen).with_context(|| format!("cannot listen on {listen}"))?;
    let advertise = std::env::var("MTHPT_ADVERTISE").unwrap_or_else(|_| {
        format!(
            "http://{}",
            listener
                .local_addr()
                .map_or(listen.clone(), |a| a.to_string())
        )
    });

    let shop = web::Data::new(Shop::default());
    let for_blocking = shop.clone().into_inner();
    let for_async = shop.clone().into_inner();

    let mut builder = Wrapper::builder(app, secret.trim_ascii().to_vec())
        .engine_urls(engines.split(',').map(str::trim))
        .advertise_url(advertise)
        .capacity(16)
        .label("service", "business-service")
        .blocking_handler("reconcile-orders", move |ctx| {
            reconcile_orders(&for_blocking, ctx)
        })
        .async_handler("send-reminders", move |ctx| {
            send_reminders(for_async.clone(), ctx)
        });
    if let Ok(dir) = std::env::var("MTHPT_SPOOL") {
        builder = builder.spool_dir(dir);
    }
    let wrapper = builder.build()?;

    let w = wrapper.clone();
    let server = HttpServer::new(move || {
        App::new()
            .app_data(shop.clone())
            // The service's own API...
            .route("/orders/stats", web::get().to(stats))
            // ...and the MTHPT endpoints, /mthpt/v1/...
            .service(w.scope())
    })
    .disable_signals()
    .listen(listener)?
    .run();
    let handle = server.handle();
    let server = tokio::spawn(server);
    tracing::info!(%listen, "business service up");

    tokio::signal::ctrl_c().await?;
    // Drain: refuse new runs, let running ones finish (30 s), deliver results, deregister.
    let report = wrapper.shutdown(Duration::from_secs(30)).await;
    tracing::info!(?report, "drained");
    handle.stop(true).await;
    server.await??;
    Ok(())
}
