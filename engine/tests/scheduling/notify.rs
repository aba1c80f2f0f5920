//! The notifier, stepped with explicit times on both backends against receivers in the test: a
//! webhook that answers 500 three times and then 200 gets the alarm exactly once, every
//! attempt signed like the wrapper protocol; a channel whose receiver is down neither blocks
//! the other nor retries forever; an e-mail channel sends one message per alarm to a tiny SMTP
//! server.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use mthpt_engine::alarm::{AlarmKind, NewAlarm, Severity};
use mthpt_engine::channel::{ChannelConfig, DeliveryState, NewChannel, SmtpTls};
use mthpt_engine::notify::{DELIVERY_HEADER, Notifier, NotifyConfig, NotifyReport, WebhookBody};
use mthpt_engine::store::Store;
use mthpt_wrapper::protocol::{SignatureHeaders, unix_now, verify_signature};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use support::fixtures::*;

mthpt_engine::on_both_backends!(
    cases::webhook_answering_500_three_times_gets_the_alarm_once_signed,
    cases::email_channel_sends_one_message_per_alarm,
);

mod cases {
    use super::*;

    /// What the receiver saw of one request, and what it answered.
    #[derive(Debug, Clone)]
    struct Seen {
        path: String,
        headers: Vec<(String, Vec<u8>)>,
        body: Vec<u8>,
        answered: u16,
    }

    #[derive(Debug, Default)]
    struct Receiver {
        seen: Mutex<Vec<Seen>>,
    }

    async fn hook(req: HttpRequest, body: web::Bytes, rx: web::Data<Receiver>) -> HttpResponse {
        let mut seen = rx.seen.lock().unwrap();
        // 500 three times, then 200.
        let answered = if seen.len() < 3 { 500 } else { 200 };
        let path = match req.uri().query() {
            Some(q) => format!("{}?{q}", req.path()),
            None => req.path().to_owned(),
        };
        seen.push(Seen {
            path,
            headers: req
                .headers()
                .iter()
                .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
                .collect(),
            body: body.to_vec(),
            answered,
        });
        HttpResponse::build(actix_web::http::StatusCode::from_u16(answered).unwrap()).finish()
    }

    fn header<'a>(s: &'a Seen, name: &str) -> Vec<&'a [u8]> {
        s.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
            .collect()
    }

    async fn raise(store: &dyn Store, w: &World, severity: Severity, at: i64) -> i64 {
        let mut tx = store.begin().await.unwrap();
        let alarm = tx
            .insert_alarm(
                &NewAlarm::new(
                    Some(w.tenant.id),
                    AlarmKind::RetriesExhausted,
                    severity,
                    "nightly failed 3 times",
                ),
                at,
            )
            .await
            .unwrap()
            .unwrap();
        tx.commit().await.unwrap();
        alarm.id.0
    }

    async fn channel(
        store: &dyn Store,
        w: &World,
        name: &str,
        config: ChannelConfig,
        secret: Option<&str>,
    ) -> mthpt_engine::channel::Channel {
        let mut tx = store.begin().await.unwrap();
        let c = tx
            .create_channel(
                w.tenant.id,
                &NewChannel {
                    name: name.into(),
                    min_severity: Severity::Warning,
                    config,
                    secret: secret.map(str::to_owned),
                    enabled: true,
                },
                T0,
            )
            .await
            .unwrap();
        tx.commit().await.unwrap();
        c
    }

    fn config() -> NotifyConfig {
        NotifyConfig {
            backoff_ms: SECOND,
            backoff_max_ms: MINUTE,
            max_attempts: 5,
            http_timeout: std::time::Duration::from_secs(5),
            smtp_timeout: std::time::Duration::from_secs(5),
            ..NotifyConfig::default()
        }
    }

    pub async fn webhook_answering_500_three_times_gets_the_alarm_once_signed(
        store: Arc<dyn Store>,
    ) {
        let rx = web::Data::new(Receiver::default());
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let for_server = rx.clone();
        let server = HttpServer::new(move || {
            App::new()
                .app_data(for_server.clone())
                .route("/hooks/ops", web::post().to(hook))
        })
        .workers(1)
        .disable_signals()
        .listen(listener)
        .unwrap()
        .run();
        let handle = server.handle();
        tokio::spawn(server);

        let w = world(&*store, "acme").await;
        let ops = channel(
            &*store,
            &w,
            "ops",
            ChannelConfig::Webhook {
                url: format!("http://{addr}/hooks/ops?src=mthpt"),
            },
            Some("hook-secret"),
        )
        .await;
        // Nobody listens on port 1: this channel fails every attempt.
        let dead = channel(
            &*store,
            &w,
            "dead",
            ChannelConfig::Webhook {
                url: "http://127.0.0.1:1/hook".into(),
            },
            Some("other-secret"),
        )
        .await;
        // Below the channels' minimum severity: not sent.
        raise(&*store, &w, Severity::Info, T0 + SECOND).await;
        let alarm = raise(&*store, &w, Severity::Critical, T0 + SECOND).await;

        let notifier = Notifier::new(store.clone(), config()).unwrap();
        let mut reports: Vec<NotifyReport> = Vec::new();
        let mut now = T0 + 2 * SECOND;
        for _ in 0..8 {
            reports.push(notifier.run_once(now).await.unwrap());
            // Further than the longest backoff of these attempts (1, 2, 4, 8 s).
            now += 10 * SECOND;
        }
        handle.stop(true).await;

        let seen = rx.seen.lock().unwrap().clone();
        assert_eq!(
            seen.iter().map(|s| s.answered).collect::<Vec<_>>(),
            vec![500, 500, 500, 200],
            "three failures, then exactly one success, then nothing more"
        );
        let mut delivery_ids = Vec::new();
        for (i, s) in seen.iter().enumerate() {
            assert_eq!(s.path, "/hooks/ops?src=mthpt");
            let headers = SignatureHeaders::from_all_values(|n| header(s, n)).unwrap();
            assert_eq!(headers.app, "acme.ops");
            verify_signature(
                b"hook-secret",
                "POST",
                &s.path,
                &headers,
                &s.body,
                unix_now(),
            )
            .unwrap_or_else(|e| panic!("attempt {}: {e}", i + 1));
            // Another secret does not verify.
            assert!(
                verify_signature(
                    b"other-secret",
                    "POST",
                    &s.path,
                    &headers,
                    &s.body,
                    unix_now()
                )
                .is_err()
            );
            let body: WebhookBody = serde_json::from_slice(&s.body).unwrap();
            assert_eq!(body.alarm.id, alarm);
            assert_eq!(body.alarm.severity, "critical");
            assert_eq!(body.alarm.kind, "retries_exhausted");
            assert_eq!(
                (body.tenant.as_str(), body.channel.as_str()),
                ("acme", "ops")
            );
            assert_eq!(body.attempt, i32::try_from(i + 1).unwrap());
            let delivery = header(s, DELIVERY_HEADER);
            assert_eq!(delivery.len(), 1);
            delivery_ids.push(delivery[0].to_vec());
            assert_eq!(delivery[0], body.delivery_id.to_string().as_bytes());
        }
        delivery_ids.dedup();
        assert_eq!(
            delivery_ids.len(),
            1,
            "every attempt names the same delivery"
        );

        let mut tx = store.begin_read().await.unwrap();
        let log = tx
            .list_deliveries(w.tenant.id, ops.id, None, 10)
            .await
            .unwrap();
        assert_eq!(log.len(), 1);
        assert_eq!(log[0].state, DeliveryState::Delivered);
        assert_eq!((log[0].attempts, log[0].last_status), (4, Some(200)));
        assert!(log[0].delivered_at.is_some());
        // The dead receiver's delivery was tried up to the limit, then given up, without
        // holding the other channel back.
        let log = tx
            .list_deliveries(w.tenant.id, dead.id, None, 10)
            .await
            .unwrap();
        assert_eq!(log.len(), 1);
        assert_eq!((log[0].state, log[0].attempts), (DeliveryState::Failed, 5));
        assert!(
            log[0]
                .last_error
                .as_deref()
                .unwrap_or_default()
                .contains("connect"),
            "{:?}",
            log[0].last_error
        );
        drop(tx);
        assert_eq!(reports[0].enqueued, 2);
        assert_eq!(reports.iter().map(|r| r.delivered).sum::<usize>(), 1);
        assert_eq!(reports.iter().map(|r| r.failed).sum::<usize>(), 1);
        assert_eq!(reports.iter().map(|r| r.attempted).sum::<usize>(), 9);
    }

    /// A minimal SMTP server: accepts one message per connection and keeps its DATA.
    async fn smtp_server(listener: tokio::net::TcpListener, messages: Arc<Mutex<Vec<String>>>) {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                return;
            };
            let messages = messages.clone();
            tokio::spawn(async move {
                let (read, mut write) = socket.into_split();
                let mut lines = BufReader::new(read).lines();
                write.write_all(b"220 test ESMTP\r\n").await.unwrap();
                let mut data: Option<String> = None;
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Some(d) = data.as_mut() {
                        if line == "." {
                            messages.lock().unwrap().push(std::mem::take(d));
                            data = None;
                            write.write_all(b"250 queued\r\n").await.unwrap();
                        } else {
                            d.push_str(&line);
                            d.push('\n');
                        }
                        continue;
                    }
                    let verb = line.get(..4).unwrap_or("").to_ascii_uppercase();
                    let answer: &[u8] = match verb.as_str() {
                        "EHLO" | "HELO" => b"250 test\r\n",
                        "MAIL" | "RCPT" | "RSET" | "NOOP" => b"250 ok\r\n",
                        "DATA" => {
                            data = Some(String::new());
                            b"354 go on\r\n"
                        }
                        "QUIT" => {
                            write.write_all(b"221 bye\r\n").await.unwrap();
                            return;
                        }
                        _ => b"502 no\r\n",
                    };
                    write.write_all(answer).await.unwrap();
                }
            });
        }
    }

    pub async fn email_channel_sends_one_message_per_alarm(store: Arc<dyn Store>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let messages = Arc::new(Mutex::new(Vec::new()));
        let server = tokio::spawn(smtp_server(listener, messages.clone()));

        let w = world(&*store, "acme").await;
        let mail = channel(
            &*store,
            &w,
            "mail",
            ChannelConfig::Email {
                smtp_host: "127.0.0.1".into(),
                smtp_port: port,
                tls: SmtpTls::None,
                username: None,
                from: "mthpt@example.com".into(),
                to: vec!["ops@example.com".into(), "oncall@example.com".into()],
            },
            None,
        )
        .await;
        let alarm = raise(&*store, &w, Severity::Warning, T0 + SECOND).await;
        let notifier = Notifier::new(store.clone(), config()).unwrap();
        let first = notifier.run_once(T0 + 2 * SECOND).await.unwrap();
        let again = notifier.run_once(T0 + 20 * SECOND).await.unwrap();
        server.abort();

        assert_eq!((first.attempted, first.delivered), (1, 1), "{first:?}");
        assert_eq!(again.attempted, 0, "{again:?}");
        let messages = messages.lock().unwrap().clone();
        assert_eq!(messages.len(), 1);
        let m = &messages[0];
        assert!(
            m.contains("Subject: [mthpt acme] warning retries_exhausted"),
            "{m}"
        );
        assert!(m.contains("nightly failed 3 times"), "{m}");
        assert!(m.contains(&format!("(id {alarm})")), "{m}");
        let mut tx = store.begin_read().await.unwrap();
        let log = tx
            .list_deliveries(w.tenant.id, mail.id, None, 10)
            .await
            .unwrap();
        assert_eq!(
            (log[0].state, log[0].attempts),
            (DeliveryState::Delivered, 1)
        );
    }
}
