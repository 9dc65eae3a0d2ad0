#!/usr/bin/env bash
# Runs every test suite (vitest, go test, pytest, the TypeScript client's node:test) against real processes and prints one summary
# line, "N passed, N failed", summed over all suites. The checks around them (gen/ matches
# `buf generate`, tsc over src and tests, go vet, gofmt) add one failure each when they fail. Installs
# what it needs on a fresh machine: redis-server, openssl and postgresql (apt), npm packages, the Go code generators, the
# Python venv, Go modules, chromium (apt) for the web inspector's browser test.
set -uo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n==> %s\n' "$*" >&2; }

# redis-server for the stores' tests (redis-cli, from Debian's redis-tools, joins the Redis Cluster
# tests' nodes), openssl for the TLS tests' throwaway certificates.
for command in redis-server redis-cli openssl; do
  if ! command -v "$command" >/dev/null 2>&1; then
    package=$command
    [ "$command" = redis-cli ] && package=redis-tools
    log "installing $package"
    if [ "$(id -u)" = 0 ]; then sudo_cmd=(); else sudo_cmd=(sudo); fi
    "${sudo_cmd[@]}" apt-get install -y "$package" >/dev/null 2>&1 \
      || { "${sudo_cmd[@]}" apt-get update >/dev/null && "${sudo_cmd[@]}" apt-get install -y "$package" >/dev/null; } \
      || { echo "could not install $package" >&2; exit 1; }
  fi
done

# PostgreSQL for the Postgres store's suites: the tests make a throwaway cluster with initdb and
# run it as the `postgres` user (initdb refuses root); no system service is used.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v pg_config >/dev/null 2>&1; then
  log "installing postgresql"
  if [ "$(id -u)" = 0 ]; then sudo_cmd=(); else sudo_cmd=(sudo); fi
  "${sudo_cmd[@]}" apt-get install -y postgresql >/dev/null 2>&1 \
    || { "${sudo_cmd[@]}" apt-get update >/dev/null && "${sudo_cmd[@]}" apt-get install -y postgresql >/dev/null; } \
    || { echo "could not install postgresql" >&2; exit 1; }
fi
if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
  useradd --system --user-group --no-create-home postgres || { echo "could not create the postgres user" >&2; exit 1; }
fi
# The web inspector's browser test drives Debian's Chromium (playwright-core with its executable
# path; no browser download).
if [ ! -x /usr/bin/chromium ]; then
  log "installing chromium"
  if [ "$(id -u)" = 0 ]; then sudo_cmd=(); else sudo_cmd=(sudo); fi
  "${sudo_cmd[@]}" apt-get install -y chromium >/dev/null 2>&1 \
    || { "${sudo_cmd[@]}" apt-get update >/dev/null && "${sudo_cmd[@]}" apt-get install -y chromium >/dev/null; } \
    || { echo "could not install chromium" >&2; exit 1; }
fi

set -e
# The suites run on the Node.js LTS the Docker image uses, installed from the npm registry (the
# machine's own Node may be older), with its npm (which runs `npm ci`); every `node` the suites start (vitest, pytest, go test) is it.
log "Node.js (scripts/install-node.sh)"
PATH="$(bash scripts/install-node.sh):$PATH"
export PATH
node --version
log "npm ci"
npm ci --no-audit --no-fund --loglevel=error
log "tool chain (Go plugins, Python venv)"
bash scripts/install-tools.sh
log "build"
npm run build --silent
set +e

mkdir -p .test-results
passed=0
failed=0
# The checks that count as one failure each, named again beside the summary (CI keeps the tail).
failed_checks=()
check_failed() { failed=$((failed + 1)); failed_checks+=("$1"); }

log "generated code is up to date"
gen_ok=1
bash scripts/generate.sh >.test-results/generate.log 2>&1 || gen_ok=0
generated=(gen)
changed=$(git status --porcelain --untracked-files=all -- "${generated[@]}" | grep -v __pycache__)
if [ "$gen_ok" != 1 ] || [ -n "$changed" ]; then
  echo "FAIL: gen/ differs from a fresh 'buf generate' (see .test-results/generate.log and git status gen/)" >&2
  check_failed "gen/ differs from a fresh buf generate"
fi

log "typecheck (tsc --strict, including tests)"
npx tsc -p tsconfig.test.json || check_failed "tsc -p tsconfig.test.json"
npx tsc -p inspector/tsconfig.json || check_failed "tsc -p inspector/tsconfig.json"

log "vitest"
rm -f .test-results/vitest.json
npx vitest run
vitest_counts=$(node -e '
  const r = JSON.parse(require("fs").readFileSync(".test-results/vitest.json", "utf8"));
  // A file that failed with no failed test counts as one failure: it failed to load, or a hook
  // (beforeAll: a server that did not start) failed and its tests were skipped, not passed.
  const broken = r.testResults.filter((s) => s.status === "failed" && !s.assertionResults.some((a) => a.status === "failed")).length;
  console.log(r.numPassedTests, r.numFailedTests + broken);
' 2>/dev/null || echo "0 1")
passed=$((passed + ${vitest_counts% *}))
failed=$((failed + ${vitest_counts#* }))

log "go vet + go test (gen/go: the generated API; clients/go: the client and its e2e tests)"
(cd gen/go && go vet ./...) || check_failed "go vet in gen/go"
(cd clients/go && go vet ./...) || check_failed "go vet in clients/go"
unformatted=$(gofmt -l clients/go test/installed/go examples/go)
if [ -n "$unformatted" ]; then echo "FAIL: gofmt -l lists: $unformatted" >&2; check_failed "gofmt -l lists: $unformatted"; fi
results="$PWD/.test-results"
# Runs `go test -json` in a module directory and adds its test counts to the summary.
go_suite() {
  local dir="$1" name="$2"
  local json="$results/$name.json"
  (cd "$dir" && go test -count=1 -json ./... >"$json" 2>"$results/$name.stderr")
  local status=$?
  local ok bad
  ok=$(grep -c '"Action":"pass","Package":"[^"]*","Test"' "$json" || true)
  bad=$(grep -c '"Action":"fail","Package":"[^"]*","Test"' "$json" || true)
  if [ "$status" != 0 ] && [ "$bad" = 0 ]; then bad=1; cat "$results/$name.stderr" >&2; fi
  grep -h '"Action":"output"' "$json" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.split("\n")){if(!l)continue;try{process.stdout.write(JSON.parse(l).Output)}catch{}}})' | grep -E '^(--- |FAIL|ok|PASS|panic)' || true
  passed=$((passed + ok))
  failed=$((failed + bad))
}
go_suite clients/go go-test

# The clients as a user installs them (scripts/install-clients.sh): Python wheels in a fresh venv,
# a Go module outside the repository; the README's snippets and the examples run from there.
log "install the clients outside the repository (python -m build, fresh venv, Go module)"
installed="$(mktemp -d "${TMPDIR:-/tmp}/contextd-installed.XXXXXX")"
if bash scripts/install-clients.sh "$installed"; then
  installed_ok=1
else
  installed_ok=0
  echo "FAIL: could not build or install the clients (scripts/install-clients.sh)" >&2
  check_failed "could not build or install the clients (scripts/install-clients.sh)"
fi
export CONTEXTD_REPO_ROOT="$PWD"

log "go test: README snippets and examples from a module outside the repository"
if [ "$installed_ok" = 1 ]; then
  go_suite "$installed/go" go-installed
fi

log "pytest (the installed wheels, from $installed/python-tests)"
rm -f .test-results/pytest.xml
if [ "$installed_ok" = 1 ]; then
  (cd "$installed/python-tests" && CONTEXTD_INSTALLED_VENV="$installed/venv" "$installed/venv/bin/python" -m pytest . -q \
    -p no:cacheprovider --junitxml="$results/pytest.xml")
fi
py_counts=$(.venv/bin/python - <<'PY'
import xml.etree.ElementTree as ET
try:
    root = ET.parse(".test-results/pytest.xml").getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    tests = sum(int(s.get("tests", 0)) for s in suites)
    bad = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
    skipped = sum(int(s.get("skipped", 0)) for s in suites)
    print(tests - bad - skipped, bad + skipped)
except Exception:
    print(0, 1)
PY
)
passed=$((passed + ${py_counts% *}))
failed=$((failed + ${py_counts#* }))

# The frameworks' own tests (openai-agents, langchain-core; pinned sdists from PyPI), unmodified,
# with the reference store swapped for the installed adapters, against a real sidecar.
log "upstream framework tests against the installed adapters (scripts/test-upstream.sh)"
rm -f .test-results/upstream-*.xml
if [ "$installed_ok" = 1 ]; then
  bash scripts/test-upstream.sh "$installed/venv/bin/python" .test-results
fi
upstream_counts=$(.venv/bin/python - <<'PY'
import xml.etree.ElementTree as ET
passed = bad = 0
for framework in ("openai-agents", "langchain-core"):
    try:
        root = ET.parse(f".test-results/upstream-{framework}.xml").getroot()
    except Exception:
        bad += 1
        continue
    for suite in [root] if root.tag == "testsuite" else list(root):
        failures = int(suite.get("failures", 0)) + int(suite.get("errors", 0)) + int(suite.get("skipped", 0))
        passed += int(suite.get("tests", 0)) - failures
        bad += failures
print(passed, bad)
PY
)
passed=$((passed + ${upstream_counts% *}))
failed=$((failed + ${upstream_counts#* }))
rm -rf "$installed"

log "TypeScript client as installed (clients/ts/scripts/test-installed.sh: npm pack, install in a temp project, node:test)"
ts_tap="$PWD/.test-results/ts-client.tap"
rm -f "$ts_tap"
bash clients/ts/scripts/test-installed.sh "$ts_tap"
ts_status=$?
# node:test's TAP summary: "# pass N", "# fail N", "# cancelled N", "# skipped N"; cancelled and
# skipped count as failures. No summary at all means packing, installing or tsc failed: one failure.
ts_count() { grep -E "^# $1 [0-9]+$" "$ts_tap" 2>/dev/null | tail -n 1 | awk '{print $3}'; }
ts_passed=$(ts_count pass)
if [ -z "$ts_passed" ]; then
  ts_passed=0
  ts_failed=1
else
  ts_failed=$(( $(ts_count fail) + $(ts_count cancelled) + $(ts_count skipped) ))
  if [ "$ts_status" != 0 ] && [ "$ts_failed" = 0 ]; then ts_failed=1; fi
fi
passed=$((passed + ts_passed))
failed=$((failed + ts_failed))

for check in ${failed_checks[@]+"${failed_checks[@]}"}; do echo "FAILED check: $check"; done
node scripts/report-failures.mjs .test-results
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
