//! The test kit every crate's tests share (a dev-dependency; it depends on no workspace crate):
//!
//! - [`ChildGuard`]: a child process that is stopped (SIGTERM, then SIGKILL) and reaped when
//!   dropped, printing the tail of its log if the test failed;
//! - [`free_port`]: a free local TCP port;
//! - [`wait_until`] / [`wait_for`]: poll a condition until it holds or a deadline passes, instead
//!   of sleeping a fixed time.
//!
//! What needs the engine stays behind its `test-support` feature: fresh databases
//! (`mthpt_engine::testing`), the both-backends macro (`mthpt_engine::on_both_backends!`) and the
//! manual clock (`mthpt_engine::clock::ManualClock`).

mod net;
mod process;
mod wait;

pub use net::{free_port, restartable_port, try_free_port, try_restartable_port};
pub use process::ChildGuard;
pub use wait::{TimedOut, wait_for, wait_until, wait_until_blocking};
