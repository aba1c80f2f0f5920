//! A database URL with several PostgreSQL hosts, against the test server: the store connects to
//! the first read-write host, skipping one that does not answer and one that is read-only, and
//! says why for each host when none will do.

use mthpt_engine::store::{PgStore, Store, StoreError};
use mthpt_engine::testing;

/// The test server's URL with `before` (a list of `host:port`) ahead of its host.
fn with_hosts_before(before: &str, params: &str) -> String {
    let url = testing::postgres_url();
    let (scheme_user, host_and_rest) = url
        .rsplit_once('@')
        .expect("MTHPT_TEST_DATABASE_URL names a user (postgres://user@host/db)");
    let sep = if host_and_rest.contains('?') {
        '&'
    } else {
        '?'
    };
    format!("{scheme_user}@{before},{host_and_rest}{sep}{params}")
}

/// The test server's `host:port`.
fn test_server() -> String {
    let url = testing::postgres_url();
    let host = url.rsplit_once('@').map_or(url.as_str(), |(_, h)| h);
    let host = host.split(['/', '?']).next().unwrap_or_default();
    if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:5432")
    }
}

/// The test server's password, if its URL has one.
fn password() -> Option<String> {
    let url = testing::postgres_url();
    let userinfo = url.split_once("://")?.1.rsplit_once('@')?.0.to_owned();
    Some(userinfo.split_once(':')?.1.to_owned())
}

fn closed_port() -> u16 {
    mthpt_testkit::free_port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_write_host_after_an_unreachable_one_is_used() {
    let closed = closed_port();
    let url = with_hosts_before(&format!("127.0.0.1:{closed}"), "sslmode=disable");
    let store = PgStore::connect(&url).await.unwrap();
    assert_eq!(store.server(), test_server());
    store.server_warnings().await.unwrap();
    let (read_only,): (String,) = sqlx::query_as("SHOW transaction_read_only")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(read_only, "off");
    let timeouts: (String,) = sqlx::query_as("SHOW lock_timeout")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(
        timeouts.0, "1700ms",
        "every pooled session keeps the session limits"
    );
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_read_write_host_every_host_is_named_with_its_reason() {
    let closed = closed_port();
    // The test server itself, made read-only for these sessions, is a stand-in for a standby.
    let url = with_hosts_before(
        &format!("127.0.0.1:{closed}"),
        "options=-cdefault_transaction_read_only%3Don",
    );
    let e = PgStore::connect(&url).await.unwrap_err();
    let StoreError::Unavailable(message) = &e else {
        panic!("{e:?}");
    };
    assert!(
        message.contains("no read-write PostgreSQL server among the hosts"),
        "{message}"
    );
    assert!(
        message.contains(&format!("127.0.0.1:{closed} (")),
        "{message}"
    );
    assert!(
        message.contains(&format!("{} (read-only: a standby)", test_server())),
        "{message}"
    );
    if let Some(password) = password() {
        assert!(!message.contains(&format!(":{password}@")), "{message}");
    }

    // `any` takes the first host that answers, read-only or not.
    let store = PgStore::connect(&format!("{url}&target_session_attrs=any"))
        .await
        .unwrap();
    assert_eq!(store.server(), test_server());
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_of_unreachable_hosts_fails_naming_each() {
    let (a, b) = (closed_port(), closed_port());
    let url = format!("postgres://u:s3cret@127.0.0.1:{a},[::1]:{b}/db");
    let e = PgStore::connect(&url).await.unwrap_err().to_string();
    assert!(e.contains(&format!("127.0.0.1:{a} (")), "{e}");
    assert!(e.contains(&format!("[::1]:{b} (")), "{e}");
    assert!(e.contains("u:***@"), "{e}");
    assert!(!e.contains("s3cret"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_host_list_is_refused_before_connecting() {
    let e = PgStore::connect("postgres://u:s3cret@h1,,h3/db")
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "invalid PostgreSQL URL postgres://u:***@h1,,h3/db: host 2 of 3 in the host list is empty"
    );
}
