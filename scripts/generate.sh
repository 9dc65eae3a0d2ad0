#!/usr/bin/env bash
# Regenerates gen/ from proto/ with local plugins only. CI runs it and fails on any difference.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-tools.sh
npx buf lint
npx buf format --diff --exit-code
rm -rf gen/ts gen/go gen/python
npx buf generate
npx buf generate --template buf.gen.grpc.yaml
# grpcio-tools emits no package markers: contextd.v1 is a regular package, contextd a namespace
# shared with the client (clients/python); the generated API installs as contextd-api, built from
# clients/python/api (its `contextd` links here), so gen/ holds only what buf writes.
touch gen/python/contextd/v1/__init__.py
# The Go module's go.mod from its template, then go.sum and the indirect requirements by go itself
# (comments stripped: `go mod tidy` would keep them, and they describe the template, not the file).
mkdir -p gen/go
grep -v '^//' scripts/go-api.go.mod >gen/go/go.mod
(cd gen/go && go mod tidy)
