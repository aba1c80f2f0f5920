//! What a window of a benchmark costs besides the engine: the write-ahead log PostgreSQL wrote
//! (`pg_current_wal_lsn()`), the CPU time of the PostgreSQL server's processes and of the bench
//! process (which hosts the wrappers), all read from `/proc` and the bench's own connection.

use std::str::FromStr;
use std::sync::OnceLock;

use anyhow::{Context, bail};
use nix::unistd::{SysconfVar, sysconf};
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};

/// The fields of a `/proc/<pid>/stat` line the bench reads, CPU times in clock ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stat {
    pub ppid: u32,
    pub utime: u64,
    pub stime: u64,
    /// CPU time of the children the process waited for (they exited), user and system.
    pub cutime: u64,
    pub cstime: u64,
}

impl Stat {
    /// Parses a `/proc/<pid>/stat` line. The command name (field 2) is in parentheses and may
    /// hold spaces and parentheses, so fields are counted after its last `)`.
    pub fn parse(line: &str) -> Option<Self> {
        let after = &line[line.rfind(')')? + 1..];
        let fields: Vec<&str> = after.split_whitespace().collect();
        // `fields[0]` is field 3 (state): ppid is field 4, utime 14, stime 15, cutime 16 and
        // cstime 17. cutime and cstime are signed in the kernel's format.
        let ticks = |i: usize| -> Option<u64> {
            let v: i64 = fields.get(i)?.parse().ok()?;
            Some(u64::try_from(v).unwrap_or(0))
        };
        Some(Self {
            ppid: fields.get(1)?.parse().ok()?,
            utime: ticks(11)?,
            stime: ticks(12)?,
            cutime: ticks(13)?,
            cstime: ticks(14)?,
        })
    }

    /// Reads `/proc/<pid>/stat`.
    pub fn read(pid: u32) -> anyhow::Result<Self> {
        let line = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .with_context(|| format!("read /proc/{pid}/stat"))?;
        Self::parse(&line).with_context(|| format!("parse /proc/{pid}/stat"))
    }

    /// The process's own CPU time (user + system), in ticks.
    pub fn own_ticks(&self) -> u64 {
        self.utime + self.stime
    }

    /// Its own CPU time plus that of its children that exited, in ticks.
    pub fn with_exited_children_ticks(&self) -> u64 {
        self.own_ticks() + self.cutime + self.cstime
    }
}

/// Clock ticks per second of the CPU times in `/proc` (`sysconf(_SC_CLK_TCK)`).
pub fn clock_ticks_per_sec() -> anyhow::Result<u64> {
    static HZ: OnceLock<Option<u64>> = OnceLock::new();
    let hz = *HZ.get_or_init(|| {
        sysconf(SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .and_then(|v| u64::try_from(v).ok())
            .filter(|&v| v > 0)
    });
    hz.context("sysconf(_SC_CLK_TCK) gave no clock tick rate")
}

/// `ticks` clock ticks in microseconds.
pub fn ticks_to_us(ticks: u64, hz: u64) -> u64 {
    ticks.saturating_mul(1_000_000) / hz.max(1)
}

/// The CPU time of process `pid` (user + system), in microseconds.
pub fn process_cpu_us(pid: u32) -> anyhow::Result<u64> {
    Ok(ticks_to_us(
        Stat::read(pid)?.own_ticks(),
        clock_ticks_per_sec()?,
    ))
}

/// The CPU time, in ticks, of a PostgreSQL server whose postmaster is `postmaster`, given the
/// stat of every process: the postmaster's own time and that of its children that exited
/// (`cutime`/`cstime`: the postmaster reaps its backends), plus the own time of its children
/// alive now. A child that exits between two readings moves its time from the second term to
/// the first, so the difference of two readings counts it once.
pub fn server_ticks(postmaster: u32, processes: &[(u32, Stat)]) -> Option<u64> {
    let main = processes.iter().find(|(pid, _)| *pid == postmaster)?.1;
    let children: u64 = processes
        .iter()
        .filter(|(_, s)| s.ppid == postmaster)
        .map(|(_, s)| s.with_exited_children_ticks())
        .sum();
    Some(main.with_exited_children_ticks() + children)
}

/// The stat of every process `/proc` shows (processes that end while it is read are skipped).
fn all_processes() -> Vec<(u32, Stat)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        Some((pid, Stat::read(pid).ok()?))
    })
    .collect()
}

/// Whether `/proc/<pid>/comm` names a PostgreSQL process.
fn is_postgres(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .is_ok_and(|c| matches!(c.trim(), "postgres" | "postmaster"))
}

/// One reading of the counters of a window's start or end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CostSample {
    /// `pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')`: the WAL position in bytes.
    pub wal_bytes: i64,
    /// CPU time of the PostgreSQL server's processes, when they are visible in `/proc`.
    pub pg_cpu_us: Option<u64>,
    /// CPU time of the bench process (the wrappers and the harness).
    pub bench_cpu_us: u64,
}

/// What the bench reads the costs with: its own connection to the database and, when the server
/// runs on this machine in the same process namespace, the postmaster's pid.
#[derive(Debug)]
pub struct CostProbe {
    conn: PgConnection,
    postmaster: Option<u32>,
}

impl CostProbe {
    /// Connects to `database_url` and finds the server's postmaster: the parent of this
    /// connection's backend (`pg_backend_pid()`), if `/proc` shows both as PostgreSQL processes.
    pub async fn connect(database_url: &str) -> anyhow::Result<Self> {
        let options = PgConnectOptions::from_str(database_url).context("parse the database URL")?;
        let mut conn = PgConnection::connect_with(&options)
            .await
            .context("connect to PostgreSQL to read the WAL position")?;
        let (backend,): (i32,) = sqlx::query_as("SELECT pg_backend_pid()")
            .fetch_one(&mut conn)
            .await?;
        let postmaster = u32::try_from(backend)
            .ok()
            .filter(|&pid| is_postgres(pid))
            .and_then(|pid| Stat::read(pid).ok())
            .map(|s| s.ppid)
            .filter(|&ppid| is_postgres(ppid));
        if postmaster.is_none() {
            super::progress(format_args!(
                "PostgreSQL backend {backend} is not visible in /proc (server on another host or \
                 in a container): pg_cpu_us_per_run is not measured"
            ));
        }
        Ok(Self { conn, postmaster })
    }

    /// The postmaster's pid, if the server's processes are visible.
    pub fn postmaster(&self) -> Option<u32> {
        self.postmaster
    }

    /// Reads every counter now.
    pub async fn sample(&mut self) -> anyhow::Result<CostSample> {
        let (wal_bytes,): (i64,) =
            sqlx::query_as("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::int8")
                .fetch_one(&mut self.conn)
                .await
                .context("read pg_current_wal_lsn()")?;
        let hz = clock_ticks_per_sec()?;
        let pg_cpu_us = match self.postmaster {
            Some(pm) => {
                let ticks = server_ticks(pm, &all_processes());
                if ticks.is_none() {
                    bail!("the PostgreSQL postmaster {pm} is gone");
                }
                ticks.map(|t| ticks_to_us(t, hz))
            }
            None => None,
        };
        Ok(CostSample {
            wal_bytes,
            pg_cpu_us,
            bench_cpu_us: process_cpu_us(std::process::id())?,
        })
    }

    pub async fn close(self) {
        let _ = self.conn.close().await;
    }
}

/// The costs of a window per run completed in it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CostPerRun {
    pub wal_bytes_per_run: f64,
    pub pg_cpu_us_per_run: Option<f64>,
    pub wrapper_cpu_us_per_run: f64,
}

/// `total / runs` rounded to a tenth (0 when no run completed).
pub fn per_run(total: u64, runs: u64) -> f64 {
    if runs == 0 {
        return 0.0;
    }
    (total as f64 / runs as f64 * 10.0).round() / 10.0
}

impl CostPerRun {
    /// The costs between `start` and `end` divided by `runs`.
    pub fn between(start: &CostSample, end: &CostSample, runs: u64) -> Self {
        let wal = u64::try_from(end.wal_bytes.saturating_sub(start.wal_bytes)).unwrap_or(0);
        Self {
            wal_bytes_per_run: per_run(wal, runs),
            pg_cpu_us_per_run: start
                .pg_cpu_us
                .zip(end.pg_cpu_us)
                .map(|(s, e)| per_run(e.saturating_sub(s), runs)),
            wrapper_cpu_us_per_run: per_run(
                end.bench_cpu_us.saturating_sub(start.bench_cpu_us),
                runs,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(ppid: u32, utime: u64, stime: u64, cutime: u64, cstime: u64) -> Stat {
        Stat {
            ppid,
            utime,
            stime,
            cutime,
            cstime,
        }
    }

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        let line = "4242 (postgres: 15/main: x) y) S 2213 4242 4242 0 -1 4194560 100 0 0 0 250 50 7 3 20 0 9 0 100 0 0";
        assert_eq!(Stat::parse(line), Some(stat(2213, 250, 50, 7, 3)));
        assert_eq!(Stat::parse("4242 (cut short) S 1 2"), None);
        assert_eq!(Stat::parse("no parenthesis"), None);
    }

    #[test]
    fn negative_child_times_read_as_zero() {
        let line = "7 (p) S 1 7 7 0 -1 0 0 0 0 0 5 6 -1 -2 20 0 1 0 1 0 0";
        assert_eq!(Stat::parse(line), Some(stat(1, 5, 6, 0, 0)));
    }

    #[test]
    fn ticks_convert_to_microseconds_at_the_reported_rate() {
        assert_eq!(ticks_to_us(300, 100), 3_000_000);
        assert_eq!(ticks_to_us(3, 1_000), 3_000);
        assert!(clock_ticks_per_sec().unwrap() > 0);
    }

    #[test]
    fn server_time_is_the_postmaster_its_live_children_and_the_ones_it_reaped() {
        let before = [
            (100, stat(1, 10, 5, 0, 0)),
            (101, stat(100, 40, 10, 0, 0)),
            (102, stat(100, 20, 0, 0, 0)),
            (200, stat(1, 999, 999, 0, 0)),
        ];
        assert_eq!(server_ticks(100, &before), Some(85));
        // Backend 102 exited after 30 ticks in all (reaped: in the postmaster's cutime/cstime),
        // 103 started and used 7; 101 used 5 more; unrelated 200 does not count.
        let after = [
            (100, stat(1, 11, 5, 25, 5)),
            (101, stat(100, 45, 10, 0, 0)),
            (103, stat(100, 7, 0, 0, 0)),
            (200, stat(1, 5_000, 0, 0, 0)),
        ];
        assert_eq!(server_ticks(100, &after), Some(108));
        assert_eq!(server_ticks(100, &after).unwrap() - 85, 1 + 10 + 5 + 7);
        assert_eq!(server_ticks(300, &after), None);
    }

    #[test]
    fn costs_are_divided_by_the_runs_of_the_window() {
        let start = CostSample {
            wal_bytes: 1_000,
            pg_cpu_us: Some(10_000),
            bench_cpu_us: 500,
        };
        let end = CostSample {
            wal_bytes: 4_000,
            pg_cpu_us: Some(16_000),
            bench_cpu_us: 1_400,
        };
        let c = CostPerRun::between(&start, &end, 4);
        assert_eq!(c.wal_bytes_per_run, 750.0);
        assert_eq!(c.pg_cpu_us_per_run, Some(1_500.0));
        assert_eq!(c.wrapper_cpu_us_per_run, 225.0);
        let unknown = CostSample {
            pg_cpu_us: None,
            ..end
        };
        assert_eq!(
            CostPerRun::between(&start, &unknown, 4).pg_cpu_us_per_run,
            None
        );
        assert_eq!(CostPerRun::between(&start, &end, 0).wal_bytes_per_run, 0.0);
    }
}
