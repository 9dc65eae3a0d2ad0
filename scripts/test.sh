#!/usr/bin/env bash
# Runs every test suite (vitest, go test, pytest) against real processes and prints one summary
# line, "N passed, N failed", summed over all suites. The checks around them (gen/ matches
# `buf generate`, tsc over src and tests, go vet) add one failure each when they fail. Installs
# what it needs on a fresh machine: redis-server and openssl (apt), npm packages, the Go code generators, the
# Python venv, Go modules.
set -uo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n==> %s\n' "$*" >&2; }

# redis-server for the stores' tests, openssl for the TLS tests' throwaway certificates.
for package in redis-server openssl; do
  if ! command -v "$package" >/dev/null 2>&1; then
    log "installing $package"
    if [ "$(id -u)" = 0 ]; then sudo_cmd=(); else sudo_cmd=(sudo); fi
    "${sudo_cmd[@]}" apt-get install -y "$package" >/dev/null 2>&1 \
      || { "${sudo_cmd[@]}" apt-get update >/dev/null && "${sudo_cmd[@]}" apt-get install -y "$package" >/dev/null; } \
      || { echo "could not install $package" >&2; exit 1; }
  fi
done

set -e
# The suites run on the Node.js LTS the Docker image uses, installed from the npm registry (the
# machine's own Node may be older); every `node` the suites start (vitest, pytest, go test) is it.
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

log "generated code is up to date"
gen_ok=1
bash scripts/generate.sh >.test-results/generate.log 2>&1 || gen_ok=0
generated=(gen/ts gen/go/contextd/v1 gen/python)
changed=$(git status --porcelain --untracked-files=all -- "${generated[@]}" | grep -v __pycache__)
if [ "$gen_ok" != 1 ] || [ -n "$changed" ]; then
  echo "FAIL: gen/ differs from a fresh 'buf generate' (see .test-results/generate.log and git status gen/)" >&2
  failed=$((failed + 1))
fi

log "typecheck (tsc --strict, including tests)"
npx tsc -p tsconfig.test.json || failed=$((failed + 1))

log "vitest"
rm -f .test-results/vitest.json
npx vitest run
vitest_counts=$(node -e '
  const r = JSON.parse(require("fs").readFileSync(".test-results/vitest.json", "utf8"));
  // Suites that fail to load count as failures too.
  const broken = r.testResults.filter((s) => s.status === "failed" && s.assertionResults.length === 0).length;
  console.log(r.numPassedTests, r.numFailedTests + broken);
' 2>/dev/null || echo "0 1")
passed=$((passed + ${vitest_counts% *}))
failed=$((failed + ${vitest_counts#* }))

log "go vet + go test (gen/go: the generated API; clients/go: the client and its e2e tests)"
(cd gen/go && go vet ./...) || failed=$((failed + 1))
(cd clients/go && go vet ./...) || failed=$((failed + 1))
results="$PWD/.test-results"
go_json="$results/go-test.json"
(cd clients/go && go test -count=1 -json ./... >"$go_json" 2>"$results/go-test.stderr")
go_status=$?
go_passed=$(grep -c '"Action":"pass","Package":"[^"]*","Test"' "$go_json" || true)
go_failed=$(grep -c '"Action":"fail","Package":"[^"]*","Test"' "$go_json" || true)
if [ "$go_status" != 0 ] && [ "$go_failed" = 0 ]; then go_failed=1; cat "$results/go-test.stderr" >&2; fi
grep -h '"Action":"output"' "$go_json" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.split("\n")){if(!l)continue;try{process.stdout.write(JSON.parse(l).Output)}catch{}}})' | grep -E '^(--- |FAIL|ok|PASS|panic)' || true
passed=$((passed + go_passed))
failed=$((failed + go_failed))

log "pytest"
.venv/bin/python -m pytest test/python -q -p no:cacheprovider --junitxml=.test-results/pytest.xml
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

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
