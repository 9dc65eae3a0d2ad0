#!/usr/bin/env bash
# Installs the code-generation tool chain into the repository (.tools/ and .venv/), from the Go
# module proxy and PyPI only. Idempotent: versions already present are not fetched again.
set -euo pipefail
cd "$(dirname "$0")/.."

PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_CONNECT_GO_VERSION=v1.21.1
PROTOC_GEN_GO_GRPC_VERSION=v1.6.0

export GOBIN="$PWD/.tools/bin"
mkdir -p "$GOBIN"
stamp="$PWD/.tools/versions"
want="go=$PROTOC_GEN_GO_VERSION connect=$PROTOC_GEN_CONNECT_GO_VERSION grpc=$PROTOC_GEN_GO_GRPC_VERSION"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION"
  go install "connectrpc.com/connect/cmd/protoc-gen-connect-go@$PROTOC_GEN_CONNECT_GO_VERSION"
  go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION"
  echo "$want" > "$stamp"
fi

bash scripts/python-venv.sh
