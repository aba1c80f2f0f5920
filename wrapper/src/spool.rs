//! The result spool: an append-only journal of the results no engine has confirmed yet, written
//! by a thread of its own in batches — one `fsync` for every result that finished while the
//! previous batch was being written — before any of them is delivered.
//!
//! Layout of the spool directory:
//! - `journal-<n>.log`: the journal, one JSON object per line: `{"result": {…}}` for a result
//!   spooled (a [`RunResult`]), `{"settled": [run ids]}` for results an engine confirmed. A
//!   result is live from its line until a `settled` line names it;
//! - `journal-<n>.log.corrupt`: a journal with a line that could not be read, kept for a person
//!   (the lines that could be read were carried over);
//! - `result-<run_id>.json`: one result per file, as wrappers before the journal spooled them;
//!   read at start-up and carried over into the journal (`.json.tmp`: an interrupted write of
//!   such a file, removed; `.json.corrupt`: one that could not be read, kept);
//! - `.lock`: held locked by the process that owns the spool, so two wrappers never share one.
//!
//! Durability: a batch's result lines are written and `fsync`'d before any of its results is
//! handed on for delivery. `settled` lines are not `fsync`'d: after a crash that lost one, the
//! result is delivered again and the engine, which already has it, acknowledges it again.
//!
//! Compaction: at start-up the live results are written into a new journal (`fsync`'d, with its
//! directory) before the old files are removed, and the same happens while running once the
//! journal has grown past [`ROTATE_BYTES`] and four times the live results' size. A crash in
//! between leaves both files; reading them in order gives the same live results. After a failed
//! write the next batch starts a new journal too, so results of the failed batch (kept in
//! memory) become durable with it.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::protocol::{RunId, RunResult};

/// Size past which the journal is compacted (when it is also four times the live results).
pub(crate) const ROTATE_BYTES: u64 = 8 * 1024 * 1024;

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
    /// A spool file could not be written, read or removed.
    #[error("spool file {path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The thread that writes the spool could not be started.
    #[error("cannot start the result spool's writer thread: {0}")]
    Thread(#[source] io::Error),
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

/// Called by the spool's thread with each batch of results once it is durable (or, when the
/// write failed, once the failure is logged: delivery still goes ahead from memory).
pub(crate) type OnSpooled = Box<dyn Fn(Vec<RunResult>) + Send + 'static>;

/// An open, locked spool directory.
pub(crate) struct Spool {
    dir: PathBuf,
    shared: Arc<Shared>,
    /// The journal until [`Spool::start`] hands it to the writer thread.
    journal: Mutex<Option<Journal>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    /// The directory's lock, shared with the writer thread: the directory stays locked until
    /// both are done with it, also when the writer outlives the spool (see `stop_writer`).
    lock: Arc<Mutex<Option<File>>>,
}

impl std::fmt::Debug for Spool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spool")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// What the writer thread is asked to do next.
#[derive(Default)]
struct Queue {
    /// Results to spool, each with its journal line (None: it could not be serialised).
    results: Vec<(RunResult, Option<Vec<u8>>)>,
    settled: Vec<RunId>,
    closed: bool,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
}

fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One line of the journal, as read back.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Record {
    Result(RunResult),
    Settled(Vec<RunId>),
}

#[derive(Serialize)]
struct ResultLine<'a> {
    result: &'a RunResult,
}

#[derive(Serialize)]
struct SettledLine<'a> {
    settled: &'a [RunId],
}

fn result_line(result: &RunResult) -> Result<Vec<u8>, SpoolError> {
    let mut line =
        serde_json::to_vec(&ResultLine { result }).map_err(|source| SpoolError::Encode {
            run_id: result.run_id,
            source,
        })?;
    line.push(b'\n');
    Ok(line)
}

fn settled_line(ids: &[RunId]) -> Vec<u8> {
    // A slice of integers always serialises.
    let mut line = serde_json::to_vec(&SettledLine { settled: ids }).unwrap_or_default();
    line.push(b'\n');
    line
}

fn file_err(path: &Path) -> impl FnOnce(io::Error) -> SpoolError + '_ {
    move |source| SpoolError::File {
        path: path.to_path_buf(),
        source,
    }
}

fn journal_name(seq: u64) -> String {
    format!("journal-{seq:020}.log")
}

/// The number of a journal file's name, if it is one.
fn journal_seq(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("journal-")?.strip_suffix(".log")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn sync_dir(dir: &Path) -> Result<(), SpoolError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| SpoolError::Dir {
            path: dir.to_path_buf(),
            source,
        })
}

/// The journal lines of the results no engine confirmed yet: what a compaction writes.
#[derive(Default)]
struct Live {
    lines: HashMap<RunId, Vec<u8>>,
    /// The lines' length together.
    bytes: u64,
}

impl Live {
    fn insert(&mut self, id: RunId, line: Vec<u8>) {
        self.bytes += line.len() as u64;
        if let Some(old) = self.lines.insert(id, line) {
            self.bytes -= old.len() as u64;
        }
    }

    fn remove(&mut self, id: RunId) {
        if let Some(old) = self.lines.remove(&id) {
            self.bytes -= old.len() as u64;
        }
    }
}

/// The journal file being appended to, and the live results' lines.
struct Journal {
    dir: PathBuf,
    seq: u64,
    file: File,
    size: u64,
    live: Live,
    /// A write failed, so the file may end in part of a line: the next batch goes into a new
    /// journal, and until one is written the writer retries on a timer and once before it stops.
    needs_new_journal: bool,
}

/// The number after `seq` (a directory whose journals reached the last number is refused).
fn next_seq(dir: &Path, seq: u64) -> Result<u64, SpoolError> {
    seq.checked_add(1).ok_or_else(|| SpoolError::Dir {
        path: dir.to_path_buf(),
        source: io::Error::other("journal numbers are exhausted; move the journals away"),
    })
}

/// Writes `live` into a new journal numbered `seq` and makes it and its name durable.
fn write_journal(dir: &Path, seq: u64, live: &Live) -> Result<(File, u64), SpoolError> {
    let path = dir.join(journal_name(seq));
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
        .map_err(file_err(&path))?;
    let mut ids: Vec<RunId> = live.lines.keys().copied().collect();
    ids.sort_unstable();
    let mut bytes = Vec::with_capacity(usize::try_from(live.bytes).unwrap_or(0));
    for id in ids {
        if let Some(line) = live.lines.get(&id) {
            bytes.extend_from_slice(line);
        }
    }
    file.write_all(&bytes).map_err(file_err(&path))?;
    file.sync_all().map_err(file_err(&path))?;
    sync_dir(dir)?;
    Ok((file, bytes.len() as u64))
}

impl Journal {
    /// A new journal numbered `seq` holding `live`.
    fn create(dir: &Path, seq: u64, live: Live) -> Result<Self, SpoolError> {
        let (file, size) = write_journal(dir, seq, &live)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            seq,
            file,
            size,
            live,
            needs_new_journal: false,
        })
    }

    /// Starts a new journal with the live results and removes this one.
    fn rotate(&mut self) -> Result<(), SpoolError> {
        let next = next_seq(&self.dir, self.seq)?;
        let (file, size) = write_journal(&self.dir, next, &self.live).inspect_err(|_| {
            // A part-written journal must not bring back results settled after it.
            let _ = fs::remove_file(self.dir.join(journal_name(next)));
        })?;
        let old = self.dir.join(journal_name(self.seq));
        self.seq = next;
        self.file = file;
        self.size = size;
        self.needs_new_journal = false;
        if let Err(e) = fs::remove_file(&old) {
            tracing::warn!(file = %old.display(), error = %e, "could not remove a compacted spool journal");
        }
        Ok(())
    }

    fn wants_rotation(&self) -> bool {
        self.needs_new_journal || (self.size >= ROTATE_BYTES && self.size >= 4 * self.live.bytes)
    }

    /// Appends a batch: its results' lines, then one `settled` line; `fsync`s when the batch
    /// has results. The lines are kept as the live results'.
    fn append(
        &mut self,
        lines: Vec<(RunId, Vec<u8>)>,
        settled: &[RunId],
    ) -> Result<(), SpoolError> {
        let durable = !lines.is_empty();
        let mut bytes = Vec::with_capacity(lines.iter().map(|(_, line)| line.len()).sum());
        for (id, line) in lines {
            bytes.extend_from_slice(&line);
            self.live.insert(id, line);
        }
        for id in settled {
            self.live.remove(*id);
        }
        if !settled.is_empty() {
            bytes.extend_from_slice(&settled_line(settled));
        }
        if self.wants_rotation() {
            // The new journal holds every live result, this batch's included.
            match self.rotate() {
                Ok(()) => return Ok(()),
                Err(e) => {
                    tracing::error!(error = %e, "could not compact the result spool; appending to the old journal")
                }
            }
        }
        if bytes.is_empty() {
            return Ok(());
        }
        if self.needs_new_journal {
            // The rotation above failed too: keep this batch a line apart from the part line.
            bytes.insert(0, b'\n');
        }
        let path = self.dir.join(journal_name(self.seq));
        let written = self.file.write_all(&bytes).and_then(|()| {
            if durable {
                self.file.sync_data()
            } else {
                Ok(())
            }
        });
        match written {
            Ok(()) => {
                self.size += bytes.len() as u64;
                Ok(())
            }
            Err(source) => {
                self.needs_new_journal = true;
                Err(SpoolError::File { path, source })
            }
        }
    }
}

/// What the files of a spool directory hold.
#[derive(Default)]
struct Found {
    live: HashMap<RunId, (RunResult, Vec<u8>)>,
    /// Journals read completely: removed once their results are in the new journal.
    journals: Vec<PathBuf>,
    /// Journals with unreadable lines: set aside once their readable results are carried over.
    corrupt: Vec<PathBuf>,
    /// One-file-per-result files: removed once carried over.
    legacy: Vec<PathBuf>,
    max_seq: u64,
}

impl Found {
    /// `line` is the result's journal line, newline included.
    fn add(&mut self, result: RunResult, line: Vec<u8>) {
        self.live.insert(result.run_id, (result, line));
    }

    fn read_journal(&mut self, path: &Path) -> Result<(), SpoolError> {
        let bytes = fs::read(path).map_err(file_err(path))?;
        let mut corrupt = false;
        let mut lines = bytes.split(|b| *b == b'\n').peekable();
        while let Some(line) = lines.next() {
            let last = lines.peek().is_none();
            if line.is_empty() {
                continue;
            }
            if last {
                // No newline after it: a write the crash interrupted, never `fsync`'d, so
                // never handed on for delivery.
                tracing::warn!(file = %path.display(), bytes = line.len(), "ignoring an interrupted write at the end of the spool journal");
                break;
            }
            match serde_json::from_slice::<Record>(line) {
                Ok(Record::Result(result)) => {
                    let mut kept = Vec::with_capacity(line.len() + 1);
                    kept.extend_from_slice(line);
                    kept.push(b'\n');
                    self.add(result, kept);
                }
                Ok(Record::Settled(ids)) => {
                    for id in ids {
                        self.live.remove(&id);
                    }
                }
                Err(e) => {
                    tracing::error!(file = %path.display(), error = %e, "unreadable line in the spool journal; the file is kept aside");
                    corrupt = true;
                }
            }
        }
        if corrupt {
            self.corrupt.push(path.to_path_buf());
        } else {
            self.journals.push(path.to_path_buf());
        }
        Ok(())
    }

    fn read_legacy(&mut self, path: &Path) -> Result<(), SpoolError> {
        match fs::read(path)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<RunResult>(&b).map_err(|e| e.to_string()))
        {
            Ok(result) => {
                let line = result_line(&result)?;
                self.add(result, line);
                self.legacy.push(path.to_path_buf());
            }
            Err(reason) => {
                let aside = path.with_extension("json.corrupt");
                tracing::error!(file = %path.display(), %reason, "unreadable spool file, moved aside");
                let _ = fs::rename(path, &aside);
            }
        }
        Ok(())
    }
}

impl Spool {
    /// Locks `dir` (created if missing), reads back the results no engine confirmed, and
    /// compacts them into a new journal. The results come back oldest first.
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
            .map_err(file_err(&lock_path))?;
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
        let mut journals = Vec::new();
        let mut legacy = Vec::new();
        for entry in fs::read_dir(dir).map_err(dir_err)? {
            let path = entry.map_err(dir_err)?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if let Some(seq) = journal_seq(name) {
                journals.push((seq, path));
            } else if name.starts_with("result-") && name.ends_with(".json.tmp") {
                // An interrupted write: the result was never announced as spooled, and the
                // run's result was not delivered from it either. Remove the fragment.
                let _ = fs::remove_file(&path);
            } else if name.starts_with("result-") && name.ends_with(".json") {
                legacy.push(path);
            }
        }
        journals.sort();
        let mut found = Found::default();
        for path in &legacy {
            found.read_legacy(path)?;
        }
        for (seq, path) in &journals {
            found.max_seq = found.max_seq.max(*seq);
            found.read_journal(path)?;
        }
        let mut results = Vec::with_capacity(found.live.len());
        let mut live = Live::default();
        for (id, (result, line)) in found.live {
            results.push(result);
            live.insert(id, line);
        }
        let journal = Journal::create(dir, next_seq(dir, found.max_seq)?, live)?;
        // The results are durable in the new journal: the old files may go.
        for path in found.journals.iter().chain(&found.legacy) {
            let _ = fs::remove_file(path);
        }
        for path in &found.corrupt {
            let _ = fs::rename(path, path.with_extension("log.corrupt"));
        }
        results.sort_by_key(|r| (r.finished_at, r.run_id));
        Ok((
            Self {
                dir: dir.to_path_buf(),
                shared: Arc::new(Shared::default()),
                journal: Mutex::new(Some(journal)),
                writer: Mutex::new(None),
                lock: Arc::new(Mutex::new(Some(lock))),
            },
            results,
        ))
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Starts the thread that writes the journal; `on_spooled` gets each batch of results once
    /// it is durable. Results submitted before this wait for it.
    pub(crate) fn start(&self, on_spooled: OnSpooled) -> Result<(), SpoolError> {
        let Some(journal) = guard(&self.journal).take() else {
            return Ok(());
        };
        let shared = self.shared.clone();
        let lock = self.lock.clone();
        let handle = std::thread::Builder::new()
            .name("mthpt-spool".to_owned())
            .spawn(move || {
                write_batches(&shared, journal, &on_spooled);
                drop(lock);
            })
            .map_err(SpoolError::Thread)?;
        *guard(&self.writer) = Some(handle);
        Ok(())
    }

    /// Spools `result`: the writer thread appends it with the others of its batch and hands it
    /// on once that batch is durable. Never blocks on the disk.
    pub(crate) fn submit(&self, result: RunResult) {
        let line = match result_line(&result) {
            Ok(line) => Some(line),
            Err(e) => {
                // Delivery still goes ahead from memory; only a crash before it would lose it.
                tracing::error!(run_id = result.run_id, error = %e, "could not spool the result");
                None
            }
        };
        let mut queue = guard(&self.shared.queue);
        queue.results.push((result, line));
        drop(queue);
        self.shared.wake.notify_one();
    }

    /// Notes that engines confirmed these results: they are not read back after a restart.
    pub(crate) fn settle(&self, run_ids: &[RunId]) {
        if run_ids.is_empty() {
            return;
        }
        let mut queue = guard(&self.shared.queue);
        queue.settled.extend_from_slice(run_ids);
        drop(queue);
        self.shared.wake.notify_one();
    }

    /// Writes what is queued, stops the writer thread and unlocks the directory.
    pub(crate) fn release(&self) {
        self.stop_writer();
        let mut lock = guard(&self.lock);
        if let Some(file) = lock.take() {
            let _ = file.unlock();
        }
    }

    fn stop_writer(&self) {
        guard(&self.shared.queue).closed = true;
        self.shared.wake.notify_all();
        let handle = guard(&self.writer).take();
        if let Some(handle) = handle {
            // The writer itself may drop the last handle on the wrapper (its callback holds
            // one for a moment): it cannot wait for itself.
            if handle.thread().id() != std::thread::current().id() {
                let _ = handle.join();
            }
        }
    }
}

impl Drop for Spool {
    fn drop(&mut self) {
        // What is queued is written before the directory's lock goes with `self.lock`.
        self.stop_writer();
    }
}

/// How often a journal whose last write failed is rewritten while no batch comes.
const RETRY_BROKEN: Duration = Duration::from_secs(1);

/// The writer thread: takes everything queued, appends it as one batch, hands the results on.
fn write_batches(shared: &Shared, mut journal: Journal, on_spooled: &OnSpooled) {
    loop {
        let (results, settled, closed) = {
            let mut queue = guard(&shared.queue);
            while queue.results.is_empty() && queue.settled.is_empty() && !queue.closed {
                if journal.needs_new_journal {
                    // Results of the failed write were handed on from memory: rewrite the
                    // journal soon even if nothing else comes, so they become durable.
                    let (next, timeout) = shared
                        .wake
                        .wait_timeout(queue, RETRY_BROKEN)
                        .unwrap_or_else(PoisonError::into_inner);
                    queue = next;
                    if timeout.timed_out() {
                        break;
                    }
                } else {
                    queue = shared
                        .wake
                        .wait(queue)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            }
            (
                std::mem::take(&mut queue.results),
                std::mem::take(&mut queue.settled),
                queue.closed,
            )
        };
        let mut lines = Vec::with_capacity(results.len());
        let results: Vec<RunResult> = results
            .into_iter()
            .map(|(result, line)| {
                if let Some(line) = line {
                    lines.push((result.run_id, line));
                }
                result
            })
            .collect();
        // The ids for the `result spooled` log lines (the chaos suite reads them).
        let spooled: Vec<RunId> = if tracing::enabled!(tracing::Level::DEBUG) {
            lines.iter().map(|(id, _)| *id).collect()
        } else {
            Vec::new()
        };
        match journal.append(lines, &settled) {
            Ok(()) => {
                for run_id in spooled {
                    tracing::debug!(run_id, "result spooled");
                }
            }
            // Delivery still goes ahead from memory; only a crash before the journal is
            // rewritten (with the next batch, or within RETRY_BROKEN) would lose them.
            Err(e) => {
                tracing::error!(error = %e, results = results.len(), "could not spool results")
            }
        }
        if !results.is_empty() {
            // A panic in what the callback reaches (a metrics recorder, a log subscriber) must
            // not stop the spool: every later result would wait for it for ever.
            if std::panic::catch_unwind(AssertUnwindSafe(|| on_spooled(results))).is_err() {
                tracing::error!("handing spooled results on panicked");
            }
        }
        if closed && guard(&shared.queue).results.is_empty() && !journal.needs_new_journal {
            return;
        }
        if closed && journal.needs_new_journal {
            // One last rewrite before leaving; what still fails is logged.
            if let Err(e) = journal.rotate() {
                tracing::error!(error = %e, "could not rewrite the result spool before stopping");
            }
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Outcome;
    use chrono::Utc;
    use std::sync::mpsc;

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

    /// Starts `spool`'s writer; the receiver gets the run ids of each durable batch.
    fn started(spool: &Spool) -> anyhow::Result<mpsc::Receiver<Vec<RunId>>> {
        let (tx, rx) = mpsc::channel();
        spool.start(Box::new(move |batch| {
            let _ = tx.send(batch.iter().map(|r| r.run_id).collect());
        }))?;
        Ok(rx)
    }

    /// Waits until `count` results were handed on.
    fn spooled(rx: &mpsc::Receiver<Vec<RunId>>, count: usize) -> Vec<RunId> {
        let mut ids = Vec::new();
        while ids.len() < count {
            match rx.recv_timeout(Duration::from_secs(5)) {
                Ok(batch) => ids.extend(batch),
                Err(_) => break,
            }
        }
        ids.sort_unstable();
        ids
    }

    fn names(dir: &Path) -> anyhow::Result<Vec<String>> {
        let mut names: Vec<String> = fs::read_dir(dir)?
            .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
            .collect::<anyhow::Result<_>>()?;
        names.sort();
        Ok(names)
    }

    #[test]
    fn results_not_settled_are_read_back_after_reopen() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let (spool, found) = Spool::open(dir.path())?;
        assert!(found.is_empty());
        let rx = started(&spool)?;
        for id in [1, -2, 3] {
            spool.submit(result(id));
        }
        assert_eq!(spooled(&rx, 3), vec![-2, 1, 3]);
        spool.settle(&[3]);
        spool.release();
        drop(spool);
        let (_spool, found) = Spool::open(dir.path())?;
        let mut ids: Vec<_> = found.iter().map(|r| r.run_id).collect();
        ids.sort();
        assert_eq!(ids, vec![-2, 1]);
        assert_eq!(found[0].output, serde_json::json!({"ok": true}));
        Ok(())
    }

    #[test]
    fn results_are_durable_before_they_are_handed_on() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let (spool, _) = Spool::open(dir.path())?;
        let (tx, rx) = mpsc::channel();
        let path = dir.path().to_path_buf();
        spool.start(Box::new(move |batch| {
            // What a crash right now would leave: a copy of the directory as it is.
            let copy = tempfile::tempdir().ok();
            let read_back = copy.and_then(|copy| {
                for entry in fs::read_dir(&path).ok()?.flatten() {
                    fs::copy(entry.path(), copy.path().join(entry.file_name())).ok()?;
                }
                let (_, found) = Spool::open(copy.path()).ok()?;
                Some(found.iter().map(|r| r.run_id).collect::<Vec<_>>())
            });
            let _ = tx.send((
                batch.iter().map(|r| r.run_id).collect::<Vec<_>>(),
                read_back,
            ));
        }))?;
        spool.submit(result(7));
        let (batch, read_back) = rx.recv_timeout(Duration::from_secs(5))?;
        assert_eq!(batch, vec![7]);
        assert_eq!(read_back, Some(vec![7]));
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
    fn an_interrupted_last_line_is_ignored_and_a_corrupt_journal_set_aside() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let good = String::from_utf8(result_line(&result(1))?)?;
        let other = String::from_utf8(result_line(&result(2))?)?;
        // An interrupted append after a good line.
        fs::write(
            dir.path().join(journal_name(3)),
            format!("{good}{{\"result\": {{\"run_"),
        )?;
        // A line in the middle that is not a record.
        fs::write(
            dir.path().join(journal_name(4)),
            format!("not json\n{other}"),
        )?;
        let (_spool, found) = Spool::open(dir.path())?;
        let mut ids: Vec<_> = found.iter().map(|r| r.run_id).collect();
        ids.sort();
        assert_eq!(ids, vec![1, 2]);
        assert_eq!(
            names(dir.path())?,
            vec![
                ".lock".to_owned(),
                journal_name(4) + ".corrupt",
                journal_name(5)
            ]
        );
        Ok(())
    }

    #[test]
    fn journal_names_are_read_strictly_and_their_numbers_never_wrap() -> anyhow::Result<()> {
        assert_eq!(journal_seq(&journal_name(42)), Some(42));
        assert_eq!(journal_seq("journal-+5.log"), None);
        assert_eq!(journal_seq("journal-.log"), None);
        assert_eq!(journal_seq("journal-5.log.corrupt"), None);
        let dir = tempfile::tempdir()?;
        fs::write(dir.path().join(journal_name(u64::MAX)), b"")?;
        let refused = Spool::open(dir.path())
            .map(|_| ())
            .map_err(|e| e.to_string());
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("journal numbers are exhausted")),
            "{refused:?}"
        );
        Ok(())
    }

    #[test]
    fn one_file_results_of_older_wrappers_are_carried_over() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        fs::write(dir.path().join("result-5.json.tmp"), b"{\"run_")?;
        fs::write(dir.path().join("result-6.json"), b"not json")?;
        fs::write(
            dir.path().join("result-7.json"),
            serde_json::to_vec_pretty(&result(7))?,
        )?;
        let (spool, found) = Spool::open(dir.path())?;
        assert_eq!(found.iter().map(|r| r.run_id).collect::<Vec<_>>(), vec![7]);
        assert_eq!(
            names(dir.path())?,
            vec![
                ".lock".to_owned(),
                journal_name(1),
                "result-6.json.corrupt".to_owned()
            ]
        );
        spool.release();
        drop(spool);
        let (_spool, found) = Spool::open(dir.path())?;
        assert_eq!(found.iter().map(|r| r.run_id).collect::<Vec<_>>(), vec![7]);
        Ok(())
    }

    #[test]
    fn a_grown_journal_is_compacted_to_its_live_results() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let (spool, _) = Spool::open(dir.path())?;
        let rx = started(&spool)?;
        let mut big = result(0);
        big.log_tail = vec!["x".repeat(64 * 1024)];
        let per_result = result_line(&big)?.len() as u64;
        let count = (ROTATE_BYTES / per_result) as RunId + 2;
        for id in 1..=count {
            spool.submit(RunResult {
                run_id: id,
                ..big.clone()
            });
            // Settled one by one, except the last: the journal's live part stays small.
            assert_eq!(spooled(&rx, 1), vec![id]);
            if id < count {
                spool.settle(&[id]);
            }
        }
        spool.submit(result(count + 1));
        assert_eq!(spooled(&rx, 1), vec![count + 1]);
        spool.release();
        let journals: Vec<String> = names(dir.path())?
            .into_iter()
            .filter(|n| journal_seq(n).is_some())
            .collect();
        assert_eq!(journals.len(), 1, "{journals:?}");
        let size = fs::metadata(dir.path().join(&journals[0]))?.len();
        assert!(size < ROTATE_BYTES / 2, "compacted journal is {size} bytes");
        drop(spool);
        let (_spool, found) = Spool::open(dir.path())?;
        let mut ids: Vec<_> = found.iter().map(|r| r.run_id).collect();
        ids.sort();
        assert_eq!(ids, vec![count, count + 1]);
        Ok(())
    }
}
