#!/usr/bin/env bash
# Creates .venv with the pinned Python tool chain (grpcio-tools for generation, pytest for tests)
# and installs the generated Python package into it in editable mode.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.requirements
if ! cmp -s requirements-dev.txt "$stamp"; then
  .venv/bin/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
  cp requirements-dev.txt "$stamp"
fi
# The generated API (contextd-api: clients/python/api, whose `contextd` links to the generated
# gen/python/contextd) and the client (contextd-client), both editable; on a checkout gen/python
# is always there, during a first generation not yet.
if [ -d gen/python/contextd/v1 ]; then
  # The client's distribution was called "contextd" before; a venv from then still has it.
  if .venv/bin/pip show --quiet contextd >/dev/null 2>&1; then .venv/bin/pip uninstall --quiet -y contextd; fi
  .venv/bin/pip install --quiet --disable-pip-version-check --no-deps -e clients/python/api -e clients/python
fi
