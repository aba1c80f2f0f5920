//! One test per case and backend: [`on_both_backends!`](crate::on_both_backends).

/// What a both-backends case returns: nothing, or a `Result` whose error fails the test.
pub trait CaseOutcome {
    /// Fails the test if the case failed.
    fn check(self);
}

impl CaseOutcome for () {
    fn check(self) {}
}

impl<E: std::fmt::Debug> CaseOutcome for Result<(), E> {
    fn check(self) {
        if let Err(e) = self {
            panic!("the case failed: {e:?}");
        }
    }
}

/// Expands each listed case into a PostgreSQL test (in `mod postgres`) and a SQLite test (in
/// `mod sqlite`), named after the case. A case returns `()` or a `Result` (an error fails the
/// test).
///
/// - `on_both_backends!(module::case, …)` or `on_both_backends!(case, …)`: the case is an
///   `async fn(Arc<dyn Store>)` given a fresh migrated store (a PostgreSQL schema from
///   `MTHPT_TEST_DATABASE_URL`, a SQLite file in a temporary directory), removed afterwards.
/// - `on_both_backends!(with open; case, …)`: the case is given `open(backend).await` (an
///   `async fn(Backend) -> T`, e.g. the console's `spawn_app`).
///
/// Paths are resolved from the module the macro is called in.
#[macro_export]
macro_rules! on_both_backends {
    (with $open:path; $($case:ident),+ $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let fixture = $open($crate::store::Backend::Postgres).await;
                    $crate::testing::CaseOutcome::check(super::$case(fixture).await);
                }
            )+
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let fixture = $open($crate::store::Backend::Sqlite).await;
                    $crate::testing::CaseOutcome::check(super::$case(fixture).await);
                }
            )+
        }
    };
    ($($module:ident :: $case:ident),+ $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let db = $crate::testing::postgres().await;
                    $crate::testing::CaseOutcome::check(super::$module::$case(db.shared()).await);
                    db.cleanup().await;
                }
            )+
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let db = $crate::testing::sqlite().await;
                    $crate::testing::CaseOutcome::check(super::$module::$case(db.shared()).await);
                    db.cleanup().await;
                }
            )+
        }
    };
    ($($case:ident),+ $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let db = $crate::testing::postgres().await;
                    $crate::testing::CaseOutcome::check(super::$case(db.shared()).await);
                    db.cleanup().await;
                }
            )+
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let db = $crate::testing::sqlite().await;
                    $crate::testing::CaseOutcome::check(super::$case(db.shared()).await);
                    db.cleanup().await;
                }
            )+
        }
    };
}
