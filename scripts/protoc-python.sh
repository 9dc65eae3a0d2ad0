#!/usr/bin/env bash
# buf's `protoc_builtin` runs this as protoc: grpcio-tools bundles a protoc with the python, pyi and
# grpc_python generators, so Python generation needs nothing but the project's .venv.
exec "$(dirname "$0")/../.venv/bin/python" -m grpc_tools.protoc "$@"
