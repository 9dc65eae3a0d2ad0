#!/usr/bin/env bash
# Regenerates gen/ from proto/ with local plugins only. CI runs it and fails on any difference.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-tools.sh
npx buf lint
npx buf format --diff --exit-code
rm -rf gen/ts gen/go/contextd/v1 gen/python/contextd/v1
npx buf generate
npx buf generate --template buf.gen.grpc.yaml
# grpcio-tools emits no package markers; the installable package needs them.
touch gen/python/contextd/__init__.py gen/python/contextd/v1/__init__.py
