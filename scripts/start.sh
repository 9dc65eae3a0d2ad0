#!/usr/bin/env bash
# `npm start`: runs the built sidecar, building it first only when dist/ is missing or was built
# from other sources (a build takes 25 s on a busy machine; a start with dist/ current, 1 s).
# Sources are compared by content (`npm run build` records their hash in dist/.sources), not by
# time, since regenerating gen/ts rewrites identical files. Arguments go to contextd
# (`npm start -- --port 7421`).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--sources-hash" ]; then
  find src gen/ts inspector package.json tsconfig.json -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1
  exit 0
fi
main=dist/src/main.js
if [ ! -f "$main" ] || [ "$(cat dist/.sources 2>/dev/null)" != "$(bash scripts/start.sh --sources-hash)" ]; then
  echo "contextd: building dist/ (npm run build)" >&2
  npm run build --silent
fi
exec node "$main" "$@"
