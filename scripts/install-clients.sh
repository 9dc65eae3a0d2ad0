#!/usr/bin/env bash
# Installs the clients the way a user gets them, outside the repository, for the test command:
#   Python: wheel and sdist of contextd-api (clients/python/api, the generated gen/python/contextd) and
#           contextd-client (clients/python) from
#           `python -m build` (which builds the wheel from the sdist, so a file missing from the
#           sdist fails the wheel's tests too), installed from the wheels into a fresh venv, with
#           the Python tests copied next to it — they import the installed packages, not the tree.
#   Go:     a new module that requires github.com/contextd-dev/contextd/clients/go and .../gen/go
#           by their import paths (the client's own `replace` does not apply to a module that
#           depends on it), pointed at the checkout with `go mod edit -replace`, holding
#           test/installed/go.
# Usage: scripts/install-clients.sh DIR   (DIR/venv, DIR/python-tests, DIR/go; DIR is emptied).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
out="$1"
rm -rf "$out" && mkdir -p "$out"
out="$(cd "$out" && pwd)"
case "$out/" in "$repo"/*) echo "install-clients: $out is inside the repository" >&2; exit 2 ;; esac

# Python. build writes build/ and *.egg-info into the source trees; both are git-ignored.
for project in clients/python/api clients/python; do
  "$repo/.venv/bin/python" -m build --no-isolation --outdir "$out/dist" "$repo/$project" >"$out/build.log" 2>&1 \
    || { cat "$out/build.log" >&2; exit 1; }
done
ls "$out/dist"/contextd_api-*.whl "$out/dist"/contextd_api-*.tar.gz "$out/dist"/contextd_client-*.whl "$out/dist"/contextd_client-*.tar.gz >/dev/null
python3 -m venv "$out/venv"
# The wheels by file, the client with its framework extras (the suite tests the adapters); their
# dependencies (grpcio, protobuf, ...) from the index as for a user, held to the versions
# requirements-dev.txt pins.
client_wheel=$(ls "$out"/dist/contextd_client-*.whl)
"$out/venv/bin/pip" install --quiet --disable-pip-version-check -c "$repo/requirements-dev.txt" \
  "$out"/dist/contextd_api-*.whl "$client_wheel[openai-agents,langchain]" pytest \
  pytest-asyncio pytest-mock blockbuster
mkdir -p "$out/python-tests"
cp "$repo"/test/python/*.py "$out/python-tests/"

# Go.
mkdir -p "$out/go"
cp "$repo"/test/installed/go/*.go "$out/go/"
cd "$out/go"
go mod init contextd.test/installed >/dev/null 2>&1
go mod edit \
  -require=github.com/contextd-dev/contextd/clients/go@v0.0.0 \
  -require=github.com/contextd-dev/contextd/gen/go@v0.0.0 \
  -replace=github.com/contextd-dev/contextd/clients/go="$repo/clients/go" \
  -replace=github.com/contextd-dev/contextd/gen/go="$repo/gen/go"
# The programs the test builds import the client; tidy would drop requirements no file imports yet.
cp "$repo/clients/go/go.sum" go.sum
go mod edit -go="$(cd "$repo/clients/go" && go list -m -f '{{.GoVersion}}')"
