//! The result spool: one file per undelivered result, made durable before the first delivery
//! attempt and removed only once an engine confirmed the result.
//!
//! Layout of the spool directory:
//! - `result-<run_id>.json`: one [`RunResult`] as JSON;
//! - `result-<run_id>.json.tmp`: a write in progress (ignored and removed at start-up);
//! - `result-<run_id>.json.corrupt`: a file that could not be read back, kept for a person;
//! - `.lock`: held locked by the process that owns the spool, so two wrappers never share one.
//!
//! A write creates the temporary file, writes and fsyncs it, renames it into place and fsyncs
//! the directory, so that after a crash either the complete result or nothing is there.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use crate::protocol::{RunId, RunResult};

/// Errors of the spool.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// The spool directory could not be created or read.
    #[error("spool directory {path}: {source}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Another process holds the spool directory.
    #[error(
        "spool directory {0} is in use by another wrapper process (each instance needs its own spool directory)"
    )]
    Locked(PathBuf),
    /// A result file could not be written or removed.
    #[error("spool file {path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A result could not be serialised.
    #[error("cannot serialise the result of run {run_id}: {source}")]
    Encode {
        /// The run.
        run_id: RunId,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
}

/// An open, locked spool directory.
#[derive(Debug)]
pub(crate) struct Spool {
    dir: PathBuf,
    lock: Mutex<Option<File>>,
}

fn file_name(run_id: RunId) -> String {
    format!("result-{run_id}.json")
}

impl Spool {
    /// Opens (creating it if needed) and locks `dir`, and reads back every spooled result.
    pub(crate) fn open(dir: &Path) -> Result<(Self, Vec<RunResult>), SpoolError> {
        let dir_err = |source| SpoolError::Dir {
            path: dir.to_path_buf(),
            source,
        };
        fs::create_dir_all(dir).map_err(dir_err)?;
        let lock_path = dir.join(".lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|source| SpoolError::File {
                path: lock_path.clone(),
                source,
            })?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(SpoolError::Locked(dir.to_path_buf()));
            }
            Err(fs::TryLockError::Error(source)) => {
                return Err(SpoolError::File {
                    path: lock_path,
                    source,
                });
            }
        }
        let mut results = Vec::new();
        for entry in fs::read_dir(dir).map_err(dir_err)? {
            let entry = entry.map_err(dir_err)?;
            let path = entry.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if !name.starts_with("result-") {
                continue;
            }
            if name.ends_with(".json.tmp") {
                // An interrupted write: the result was never announced as spooled, and the
                // run's result was not delivered from it either. Remove the fragment.
                let _ = fs::remove_file(&path);
                continue;
            }
            if !name.ends_with(".json") {
                continue;
            }
            match fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<RunResult>(&b).map_err(|e| e.to_string()))
            {
                Ok(result) => results.push(result),
                Err(reason) => {
                    let aside = path.with_extension("json.corrupt");
                    tracing::error!(file = %path.display(), %reason, "unreadable spool file, moved aside");
                    let _ = fs::rename(&path, &aside);
                }
            }
        }
        results.sort_by_key(|r| (r.finished_at, r.run_id));
        Ok((
            Self {
                dir: dir.to_path_buf(),
                lock: Mutex::new(Some(lock)),
            },
            results,
        ))
    }

    /// The directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes a result durably (file and directory fsync'd). Blocking.
    pub(crate) fn write(&self, result: &RunResult) -> Result<(), SpoolError> {
        let bytes = serde_json::to_vec_pretty(result).map_err(|source| SpoolError::Encode {
            run_id: result.run_id,
            source,
        })?;
        let path = self.dir.join(file_name(result.run_id));
        let tmp = self.dir.join(format!("{}.tmp", file_name(result.run_id)));
        let file_err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| SpoolError::File { path, source }
        };
        {
            let mut file = File::create(&tmp).map_err(file_err(&tmp))?;
            file.write_all(&bytes).map_err(file_err(&tmp))?;
            file.sync_all().map_err(file_err(&tmp))?;
        }
        fs::rename(&tmp, &path).map_err(file_err(&path))?;
        self.sync_dir()
    }

    /// Removes a delivered result. Blocking. A missing file is not an error.
    pub(crate) fn remove(&self, run_id: RunId) -> Result<(), SpoolError> {
        let path = self.dir.join(file_name(run_id));
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(SpoolError::File { path, source }),
        }
    }

    fn sync_dir(&self) -> Result<(), SpoolError> {
        let dir_err = |source| SpoolError::Dir {
            path: self.dir.clone(),
            source,
        };
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(dir_err)
    }

    /// Releases the directory lock (at the end of a shutdown), so another process may take over.
    pub(crate) fn release(&self) {
        let mut lock = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(file) = lock.take() {
            let _ = file.unlock();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Outcome;
    use chrono::Utc;

    fn result(run_id: RunId) -> RunResult {
        RunResult {
            run_id,
            attempt: 1,
            handler: "h".into(),
            outcome: Outcome::Succeeded,
            output: serde_json::json!({"ok": true}),
            error: None,
            started_at: Utc::now(),
            finished_at: Utc::now(),
            log_tail: vec!["done".into()],
            instance_id: None,
            sent_at: None,
        }
    }

    #[test]
    fn written_results_are_read_back_after_reopen() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let (spool, found) = Spool::open(dir.path())?;
        assert!(found.is_empty());
        spool.write(&result(1))?;
        spool.write(&result(-2))?;
        spool.write(&result(3))?;
        spool.remove(3)?;
        spool.release();
        drop(spool);
        let (_spool, found) = Spool::open(dir.path())?;
        let mut ids: Vec<_> = found.iter().map(|r| r.run_id).collect();
        ids.sort();
        assert_eq!(ids, vec![-2, 1]);
        Ok(())
    }

    #[test]
    fn second_open_of_the_same_directory_is_refused() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let (_spool, _) = Spool::open(dir.path())?;
        assert!(matches!(
            Spool::open(dir.path()),
            Err(SpoolError::Locked(_))
        ));
        Ok(())
    }

    #[test]
    fn torn_and_corrupt_files_are_set_aside() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        fs::write(dir.path().join("result-5.json.tmp"), b"{\"run_")?;
        fs::write(dir.path().join("result-6.json"), b"not json")?;
        let (_spool, found) = Spool::open(dir.path())?;
        assert!(found.is_empty());
        assert!(!dir.path().join("result-5.json.tmp").exists());
        assert!(dir.path().join("result-6.json.corrupt").exists());
        Ok(())
    }
}
