#!/usr/bin/env bash
# Property-based check of the console API against its own OpenAPI description: schemathesis
# (pinned, from PyPI, in a virtualenv under target/) sends generated requests to every
# operation, as a platform operator, and fails on any 5xx answer or any answer that does not
# match the spec. The console runs on PostgreSQL in a fresh schema, with a tenant, an app, tasks
# and runs seeded so that operations are not all 404.
#
#   scripts/schemathesis.sh    (needs MTHPT_TEST_DATABASE_URL; builds the tests if they are not)
#
# The test suite runs it as a test (console/tests/nodes/schemathesis.rs), with MTHPT_BIN set to
# the `mthpt` it built: then nothing is built here.
#
# The task import operation is left out: its body is TOML (application/toml), which
# schemathesis cannot serialise; its JSON form is the same code as tasks/apply, which is covered.
set -euo pipefail
cd "$(dirname "$0")/.."

: "${MTHPT_TEST_DATABASE_URL:?set MTHPT_TEST_DATABASE_URL}"
SCHEMATHESIS_VERSION=4.32.5
MAX_EXAMPLES="${MTHPT_SCHEMATHESIS_EXAMPLES:-10}"
# A guard against a hang, not a budget: alone the test takes about a minute, but beside the
# whole suite on a slow 2-core machine it took 378-406 s, and 560 s on a slower one. Below
# nextest's twenty-minute stop for it (.config/nextest.toml), so this script still says what
# failed.
TIME_CAP="${MTHPT_SCHEMATHESIS_SECONDS:-1080}"
if [ -n "${MTHPT_BIN:-}" ]; then
  mthpt="$MTHPT_BIN"
else
  mthpt=target/debug/mthpt
  # The `mthpt` the test build makes (the tests run it): after a test build this builds
  # nothing. `cargo build -p mthpt-console` would build the engine and the console a second
  # time, in the dev profile and with other features.
  cargo test -q --workspace --locked --no-run
fi

venv=target/venv
if ! "$venv/bin/schemathesis" --version 2>/dev/null | grep -q "$SCHEMATHESIS_VERSION"; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "schemathesis==$SCHEMATHESIS_VERSION"
fi

schema="mthpt_test_schemathesis_$$"
work="$(mktemp -d)"
console_pid=""
cleanup() {
  [ -n "$console_pid" ] && kill "$console_pid" 2>/dev/null && wait "$console_pid" 2>/dev/null
  psql "$MTHPT_TEST_DATABASE_URL" -qAt -c "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
psql "$MTHPT_TEST_DATABASE_URL" -qAt -v ON_ERROR_STOP=1 -c "CREATE SCHEMA $schema" >/dev/null
sep='?'; case "$MTHPT_TEST_DATABASE_URL" in *\?*) sep='&' ;; esac
db="${MTHPT_TEST_DATABASE_URL}${sep}options=-csearch_path%3D${schema}"

"$mthpt" migrate --database-url "$db" >/dev/null
token="$("$mthpt" bootstrap --database-url "$db" | grep -o 'mthpt_[A-Za-z0-9_-]*' | head -n1)"
[ -n "$token" ] || { echo "scripts/schemathesis.sh: bootstrap printed no token" >&2; exit 1; }

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
url="http://127.0.0.1:$port"
RUST_LOG=warn "$mthpt" console --database-url "$db" --bind "127.0.0.1:$port" 2>"$work/console.log" &
console_pid=$!
for _ in $(seq 1 60); do
  curl -sf -o /dev/null "$url/api/v1/openapi.json" && break
  sleep 0.5
done

api() { # method path [json]
  curl -sf -X "$1" -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    ${3:+-d "$3"} "$url/api/v1$2" >/dev/null
}
api POST /tenants '{"name": "acme"}'
api POST /tenants/acme/apps '{"name": "shop"}'
for name in nightly-report extract-orders cleanup; do
  api POST /tenants/acme/tasks "{\"name\": \"$name\", \"app\": \"shop\", \"handler\": \"report\",
    \"schedule\": {\"kind\": \"cron\", \"expr\": \"0 0 2 * * ?\"}}"
done
api POST /tenants/acme/tasks/1/trigger
api POST /tenants/acme/tasks/2/trigger

status=0
timeout "$TIME_CAP" "$venv/bin/schemathesis" run "$url/api/v1/openapi.json" \
  --url "$url" \
  -H "Authorization: Bearer $token" \
  --checks not_a_server_error,response_schema_conformance \
  --max-examples "$MAX_EXAMPLES" \
  --exclude-path-regex 'tasks/import$' \
  --generation-deterministic \
  || status=$?
if [ "$status" != 0 ]; then
  echo "scripts/schemathesis.sh: schemathesis failed (exit $status); console log:" >&2
  tail -n 50 "$work/console.log" >&2
fi
exit "$status"
