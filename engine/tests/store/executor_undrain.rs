//! Undrain through the engine's callback API on both backends: a drained instance asked to
//! undrain is `up` again from its next heartbeat, while an instance whose heartbeat says it is
//! shutting down itself stays draining (never `up` in between); a drain after the request
//! drops it, and only a draining instance can be asked.

#![allow(clippy::unwrap_used, clippy::expect_used)]

pub(crate) mod undrain {
    use std::sync::Arc;
    use std::time::Duration;

    use mthpt_engine::app::ExecutorState;
    use mthpt_engine::store::Store;
    use mthpt_wrapper::client::SignedClient;
    use mthpt_wrapper::protocol::{HeartbeatResponse, Signer, paths};

    use crate::executor_hosts::hosts::{heartbeat_body, register_body, serve, state_of};
    use crate::in_tx;
    use crate::support::fixtures::*;

    pub async fn an_undrained_instance_is_up_at_its_next_heartbeat_unless_it_is_shutting_down(
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
        let beat = |instance: &'static str, draining: bool| {
            let (client, engine) = (client.clone(), engine.clone());
            async move {
                let mut body = heartbeat_body(instance);
                body.draining = draining;
                client
                    .post_json::<_, HeartbeatResponse>(&engine, paths::HEARTBEAT, &body)
                    .await
                    .unwrap()
            }
        };
        let mut ids = Vec::new();
        for instance in ["i-1", "i-2", "i-3"] {
            let _: serde_json::Value = client
                .post_json(
                    &engine,
                    paths::REGISTER,
                    &register_body(instance, "http://10.0.0.9:9010"),
                )
                .await
                .unwrap();
            let drained = in_tx!(&*store, |tx| tx
                .set_executor_state(w.app.id, instance, ExecutorState::Draining, T0)
                .await
                .unwrap()
                .unwrap());
            ids.push(drained.id);
        }
        let undrain = |i: usize| {
            let store = store.clone();
            let (tenant, id) = (w.tenant.id, ids[i]);
            async move {
                in_tx!(&*store, |tx| tx
                    .request_executor_undrain(tenant, id)
                    .await
                    .unwrap())
            }
        };
        for i in 0..3 {
            let asked = undrain(i).await.expect("a draining instance can be asked");
            assert_eq!(asked.state, ExecutorState::Draining, "until its heartbeat");
            assert!(asked.undrain_requested);
        }

        // A heartbeat that does not say draining brings it back up, and later ones keep it up.
        assert!(beat("i-1", false).await.known);
        assert_eq!(state_of(&*store, &w, "i-1").await, Some(ExecutorState::Up));
        assert!(beat("i-1", false).await.known);
        assert_eq!(state_of(&*store, &w, "i-1").await, Some(ExecutorState::Up));
        assert!(undrain(0).await.is_none(), "an instance that is up");

        // An instance shutting down itself stays draining.
        assert!(beat("i-2", true).await.known);
        assert_eq!(
            state_of(&*store, &w, "i-2").await,
            Some(ExecutorState::Draining)
        );
        assert!(beat("i-2", true).await.known);
        assert_eq!(
            state_of(&*store, &w, "i-2").await,
            Some(ExecutorState::Draining)
        );

        // Drained again after the request: the request is dropped.
        in_tx!(&*store, |tx| tx
            .set_executor_state(w.app.id, "i-3", ExecutorState::Draining, T0)
            .await
            .unwrap());
        assert!(beat("i-3", false).await.known);
        assert_eq!(
            state_of(&*store, &w, "i-3").await,
            Some(ExecutorState::Draining)
        );

        // Another tenant's instance cannot be asked for.
        let other = world(&*store, "other").await;
        assert!(
            in_tx!(&*store, |tx| tx
                .request_executor_undrain(other.tenant.id, ids[2])
                .await
                .unwrap())
            .is_none()
        );
    }
}

mthpt_engine::on_both_backends!(
    undrain::an_undrained_instance_is_up_at_its_next_heartbeat_unless_it_is_shutting_down,
);
