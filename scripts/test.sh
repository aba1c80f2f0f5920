#!/usr/bin/env bash
# The one test command. On a fresh Debian machine (as root) it installs what is missing
# (PostgreSQL, RabbitMQ, OpenJDK + Quartz for the cron differential test, Patroni + etcd for the
# PostgreSQL failover test), starts what is stopped, prepares the test database, then runs
# formatting, lint and every test on both store backends.
#
#   scripts/test.sh            everything
#   scripts/test.sh --no-lint  skip cargo fmt and clippy's lints (quicker local runs)
#
# Environment:
#   MTHPT_TEST_DATABASE_URL  PostgreSQL for the tests (default: a role and database this script
#                            creates: postgres://mthpt:mthpt@127.0.0.1:5432/mthpt_test)
set -euo pipefail
cd "$(dirname "$0")/.."

lint=1
for arg in "$@"; do
  case "$arg" in
    --no-lint) lint=0 ;;
    *) echo "usage: scripts/test.sh [--no-lint]" >&2; exit 2 ;;
  esac
done

say() { printf "\n==> [%ss] %s\n" "$SECONDS" "$*"; }
die() { printf 'scripts/test.sh: %s\n' "$*" >&2; exit 1; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_port() { # port seconds
  for _ in $(seq 1 "$2"); do port_open "$1" && return 0; sleep 1; done
  return 1
}

apt_updated=0
apt_install() {
  [ "$(id -u)" = 0 ] || die "missing packages: $*; install them (apt-get install $*) or run as root"
  if [ "$apt_updated" = 0 ]; then
    say "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    apt_updated=1
  fi
  say "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

command -v cargo >/dev/null || die "cargo is missing: install a Rust toolchain (https://rustup.rs)"

# ---- PostgreSQL --------------------------------------------------------------------------
if ! command -v pg_ctlcluster >/dev/null; then
  apt_install postgresql
fi
if ! port_open 5432; then
  say "starting PostgreSQL"
  for version in $(ls /etc/postgresql); do
    pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  done
  wait_port 5432 30 || die "PostgreSQL did not start on 127.0.0.1:5432"
fi
if [ -z "${MTHPT_TEST_DATABASE_URL:-}" ]; then
  # A dedicated role with a password works whatever the server's host authentication is.
  say "preparing the test database"
  as_postgres=(runuser -u postgres --)
  [ "$(id -un)" = postgres ] && as_postgres=()
  "${as_postgres[@]}" psql -q -v ON_ERROR_STOP=1 -d postgres <<'SQL'
SELECT 'CREATE ROLE mthpt LOGIN PASSWORD ''mthpt'' CREATEDB'
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mthpt') \gexec
SELECT 'CREATE DATABASE mthpt_test OWNER mthpt'
WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'mthpt_test') \gexec
SQL
  export MTHPT_TEST_DATABASE_URL="postgres://mthpt:mthpt@127.0.0.1:5432/mthpt_test"
fi
# Schemas a crashed earlier run left behind (those of this role: a run under another role
# left its own, which names never collide with and this role may not drop).
psql "$MTHPT_TEST_DATABASE_URL" -qAt -v ON_ERROR_STOP=1 <<'SQL' >/dev/null
SET client_min_messages = warning;
DO $$
DECLARE s text;
BEGIN
  FOR s IN SELECT nspname FROM pg_namespace
           WHERE (nspname LIKE 'mthpt\_test\_%' OR nspname LIKE 'mthpt\_cli\_%')
             AND pg_get_userbyid(nspowner) = current_user LOOP
    EXECUTE format('DROP SCHEMA IF EXISTS %I CASCADE', s);
  END LOOP;
END $$;
SQL
# Databases a failed bench smoke run left behind (tests/tests/system/bench_smoke.rs names them
# mthpt_bench_smoke_<scenario>_<pid>). DROP DATABASE cannot run in a DO block, so psql runs one
# statement per row with \gexec; none left over means no rows and nothing to do. Databases
# still in use (a concurrent run) are skipped.
psql "$MTHPT_TEST_DATABASE_URL" -qAt -v ON_ERROR_STOP=1 <<'SQL' >/dev/null ||
SELECT format('DROP DATABASE IF EXISTS %I', d.datname)
FROM pg_database d
WHERE d.datname LIKE 'mthpt\_bench\_smoke\_%'
  AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datname = d.datname) \gexec
SQL
  say "could not drop every left-over mthpt_bench_smoke_* database; continuing"

# ---- RabbitMQ ------------------------------------------------------------------------------
if ! command -v rabbitmq-server >/dev/null; then
  apt_install rabbitmq-server
fi
if ! port_open 5672; then
  say "starting RabbitMQ"
  rabbitmq-server -detached || true
  wait_port 5672 90 || die "RabbitMQ did not start on 127.0.0.1:5672"
fi
export MTHPT_TEST_AMQP_URL="${MTHPT_TEST_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/%2f}"

# ---- Java + Quartz (the reference for cron semantics) ----------------------------------------
missing=()
command -v javac >/dev/null || missing+=(default-jdk-headless)
[ -f /usr/share/java/quartz2.jar ] || missing+=(libquartz2-java)
[ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"

# ---- Patroni + etcd (mthpt-chaos's PostgreSQL failover scenarios) ----------------------------
missing=()
command -v patroni >/dev/null || missing+=(patroni)
command -v etcd >/dev/null || missing+=(etcd-server)
[ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"

# ---- Python virtualenvs (schemathesis, installed by scripts/schemathesis.sh) ----------------
if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
  apt_install python3-venv
fi

# ---- Chromium + ChromeDriver (the console's browser tests) ---------------------------------
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
# Fonts for the screenshots: Chinese (the 中文 switch) and emoji (the notification toggle).
[ -f /usr/share/fonts/truetype/wqy/wqy-zenhei.ttc ] || missing+=(fonts-wqy-zenhei)
[ -f /usr/share/fonts/truetype/noto/NotoColorEmoji.ttf ] || missing+=(fonts-noto-color-emoji)
[ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"

# ---- Build, lint, test ----------------------------------------------------------------------
# Test binaries run in parallel, each test in a process of its own (.config/nextest.toml: the
# `ci` profile, and which tests must not overlap). Doc tests are not nextest's: cargo runs them.
if ! cargo nextest --version >/dev/null 2>&1; then
  say "cargo install --locked cargo-nextest"
  cargo install --locked cargo-nextest
fi
if [ "$lint" = 1 ]; then
  say "cargo fmt --check"
  cargo fmt --all -- --check
  # Clippy lints while the tests are built: clippy-driver compiles like rustc and runs its lints
  # on the way, so lint and build are one compilation of the workspace instead of two (what
  # `cargo clippy --workspace --all-targets -- -D warnings` reports, it reports here, and the
  # build stops). Its artifacts are kept apart from plain builds' (the wrapper is part of
  # their hash); dependencies are shared.
  command -v clippy-driver >/dev/null || die "clippy-driver is missing: rustup component add clippy"
  export RUSTC_WORKSPACE_WRAPPER
  RUSTC_WORKSPACE_WRAPPER="$(command -v clippy-driver)"
  export RUSTFLAGS="${RUSTFLAGS:-} -D warnings"
  say "cargo build of every test target, linted by clippy"
else
  say "cargo build of every test target"
fi
cargo nextest run --workspace --locked --profile ci --no-run
# The one benchmark target (nextest builds no benchmarks), in the test build's profile: it
# reuses what that built.
cargo build --workspace --locked --benches --profile dev
say "cargo nextest (PostgreSQL at ${MTHPT_TEST_DATABASE_URL%%@*}@..., SQLite in temp files)"
cargo nextest run --workspace --locked --profile ci
# schemathesis against the console API is one of the tests (console/tests/nodes/schemathesis.rs
# runs scripts/schemathesis.sh): it overlaps the others.
say "cargo test --doc"
cargo test --doc --workspace --locked
say "all checks passed"
