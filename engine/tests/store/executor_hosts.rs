//! A tenant's allow-list of executor hosts, through the engine's callback API on both
//! backends: a registration from a host the list does not allow is refused (403
//! `host_not_allowed`, naming the host and the tenant) and leaves no instance; an allowed host,
//! a `*.domain` wildcard and an empty list register; an instance already registered at a host the
//! list no longer allows is told it is unknown at its next heartbeat, gets no new runs, and is
//! refused when it registers again, until the list allows its host again.

#![allow(clippy::unwrap_used, clippy::expect_used)]

pub(crate) mod hosts {
    use std::sync::Arc;
    use std::time::Duration;

    use actix_web::{App, HttpServer};
    use chrono::Utc;
    use mthpt_engine::api::CallbackApi;
    use mthpt_engine::app::ExecutorState;
    use mthpt_engine::clock::SystemClock;
    use mthpt_engine::directory::Directory;
    use mthpt_engine::store::Store;
    use mthpt_engine::tenant::TenantUpdate;
    use mthpt_wrapper::client::SignedClient;
    use mthpt_wrapper::protocol::{
        ErrorBody, ErrorCode, HeartbeatRequest, HeartbeatResponse, RegisterRequest, Signer, paths,
    };

    use crate::in_tx;
    use crate::support::fixtures::*;

    /// An engine's callback API over `store`, on a free port; its base URL.
    pub(crate) fn serve(store: Arc<dyn Store>) -> String {
        let clock = Arc::new(SystemClock);
        let directory = Arc::new(Directory::new(
            store.clone(),
            reqwest::Client::new(),
            1_000,
            4_000,
        ));
        let api = actix_web::web::Data::new(CallbackApi::new(store, clock, directory, 5_000));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server =
            HttpServer::new(move || App::new().configure(CallbackApi::configure(api.clone())))
                .workers(1)
                .listen(listener)
                .unwrap()
                .run();
        tokio::spawn(server);
        format!("http://{addr}")
    }

    pub(crate) fn register_body(instance: &str, base_url: &str) -> RegisterRequest {
        RegisterRequest {
            instance_id: instance.into(),
            base_url: base_url.into(),
            capacity: 4,
            running: 0,
            handlers: vec![],
            labels: Default::default(),
            version: "test".into(),
            started_at: Utc::now(),
        }
    }

    pub(crate) fn heartbeat_body(instance: &str) -> HeartbeatRequest {
        HeartbeatRequest {
            instance_id: instance.into(),
            capacity: 4,
            running: 0,
            draining: false,
            running_runs: vec![],
            sent_at: Utc::now(),
        }
    }

    async fn set_hosts(store: &dyn Store, w: &World, hosts: &[&str]) {
        in_tx!(store, |tx| tx
            .update_tenant(
                w.tenant.id,
                &TenantUpdate {
                    executor_hosts: Some(hosts.iter().map(|h| (*h).to_owned()).collect()),
                    ..Default::default()
                },
                T0
            )
            .await
            .unwrap());
    }

    pub(crate) async fn state_of(
        store: &dyn Store,
        w: &World,
        instance: &str,
    ) -> Option<ExecutorState> {
        let mut tx = store.begin_read().await.unwrap();
        tx.find_executor(w.app.id, instance)
            .await
            .unwrap()
            .map(|e| e.state)
    }

    pub async fn registration_is_refused_for_a_host_the_tenant_does_not_allow(
        store: Arc<dyn Store>,
    ) {
        let w = world(&*store, "acme").await;
        set_hosts(&*store, &w, &["10.0.0.5", "*.jobs.example.com"]).await;
        let engine = serve(store.clone());
        let client = SignedClient::new(
            Signer::new("acme.billing", b"0123456789abcdef-secret".to_vec()),
            Duration::from_secs(2),
            Duration::from_secs(10),
        )
        .unwrap();
        let register = |instance: &'static str, url: &'static str| {
            let client = client.clone();
            let engine = engine.clone();
            async move {
                client
                    .post_json_raw(&engine, paths::REGISTER, &register_body(instance, url))
                    .await
                    .unwrap()
            }
        };

        for (instance, url, host) in [
            ("i-1", "http://10.0.0.9:9010", "10.0.0.9"),
            ("i-2", "https://jobs.example.com/prefix", "jobs.example.com"),
            (
                "i-3",
                "https://a.jobs.example.com.evil.net",
                "a.jobs.example.com.evil.net",
            ),
        ] {
            let answer = register(instance, url).await;
            assert_eq!(answer.status.as_u16(), 403, "{url}");
            let error: ErrorBody = answer.json().unwrap();
            assert_eq!(error.error, ErrorCode::HostNotAllowed, "{url}");
            assert!(
                error.message.contains(&format!("{host:?}")) && error.message.contains("\"acme\""),
                "{url}: {}",
                error.message
            );
            assert_eq!(state_of(&*store, &w, instance).await, None, "{url}");
        }

        // Allowed hosts register: an exact address and a host below a wildcard domain.
        for (instance, url) in [
            ("i-4", "http://10.0.0.5:9010"),
            ("i-5", "https://a.b.jobs.example.com/prefix"),
        ] {
            let answer = register(instance, url).await;
            assert_eq!(
                answer.status.as_u16(),
                200,
                "{url}: {:?}",
                String::from_utf8_lossy(&answer.body)
            );
            assert_eq!(
                state_of(&*store, &w, instance).await,
                Some(ExecutorState::Up),
                "{url}"
            );
        }

        // An empty list allows any host again.
        set_hosts(&*store, &w, &[]).await;
        assert_eq!(
            register("i-1", "http://10.0.0.9:9010")
                .await
                .status
                .as_u16(),
            200
        );
        assert_eq!(state_of(&*store, &w, "i-1").await, Some(ExecutorState::Up));
    }

    pub async fn an_instance_at_a_host_no_longer_allowed_is_refused_at_its_next_heartbeat(
        store: Arc<dyn Store>,
    ) {
        let w = world(&*store, "acme").await;
        let engine = serve(store.clone());
        let client = SignedClient::new(
            Signer::new("acme.billing", b"0123456789abcdef-secret".to_vec()),
            Duration::from_secs(2),
            Duration::from_secs(10),
        )
        .unwrap();
        let registration = register_body("i-1", "http://10.0.0.9:9010");
        let beat = |client: SignedClient, engine: String| async move {
            client
                .post_json::<_, HeartbeatResponse>(
                    &engine,
                    paths::HEARTBEAT,
                    &heartbeat_body("i-1"),
                )
                .await
                .unwrap()
        };
        let _: serde_json::Value = client
            .post_json(&engine, paths::REGISTER, &registration)
            .await
            .unwrap();
        assert!(beat(client.clone(), engine.clone()).await.known);

        set_hosts(&*store, &w, &["10.0.0.5"]).await;
        assert!(
            !beat(client.clone(), engine.clone()).await.known,
            "told to register again"
        );
        assert_eq!(
            state_of(&*store, &w, "i-1").await,
            Some(ExecutorState::Draining),
            "no new runs, but the runs it holds may still report"
        );
        let again = client
            .post_json_raw(&engine, paths::REGISTER, &registration)
            .await
            .unwrap();
        assert_eq!(again.status.as_u16(), 403);
        assert_eq!(
            again.json::<ErrorBody>().unwrap().error,
            ErrorCode::HostNotAllowed
        );
        assert_eq!(
            state_of(&*store, &w, "i-1").await,
            Some(ExecutorState::Draining)
        );

        // Once the list allows the host again, the instance registers and takes runs.
        set_hosts(&*store, &w, &["10.0.0.5", "10.0.0.9"]).await;
        let _: serde_json::Value = client
            .post_json(&engine, paths::REGISTER, &registration)
            .await
            .unwrap();
        assert_eq!(state_of(&*store, &w, "i-1").await, Some(ExecutorState::Up));
        assert!(beat(client.clone(), engine.clone()).await.known);
    }
}

mthpt_engine::on_both_backends!(
    hosts::registration_is_refused_for_a_host_the_tenant_does_not_allow,
    hosts::an_instance_at_a_host_no_longer_allowed_is_refused_at_its_next_heartbeat,
);
