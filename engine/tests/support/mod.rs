//! Test support shared by the engine's test binaries: fresh databases and fixtures.

#![allow(dead_code)]

pub mod fixtures;

/// Expands each listed `module::case` (an `async fn(&dyn Store)`) into a PostgreSQL test (fresh
/// schema) and a SQLite test (fresh file).
#[macro_export]
macro_rules! on_both_backends {
    ($($module:ident :: $case:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let db = mthpt_engine::testing::postgres().await;
                    $crate::$module::$case(db.shared()).await;
                    db.cleanup().await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let db = mthpt_engine::testing::sqlite().await;
                    $crate::$module::$case(db.shared()).await;
                    db.cleanup().await;
                }
            )*
        }
    };
}
