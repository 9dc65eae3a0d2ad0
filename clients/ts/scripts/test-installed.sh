#!/usr/bin/env bash
# Tests the TypeScript client as a user gets it: `npm pack` (which builds it), installs the tarball
# into a fresh project outside the repository, type-checks the tests against the installed
# package's .d.ts files, and runs them there with node:test against real sidecars (the
# repository's built dist/src/main.js). A file missing from the package fails here.
# Writes the TAP report to $1 (default: .test-results/ts-client.tap in the repository); further
# arguments name the test files to run (default: all of test/*.test.ts).
set -euo pipefail
cd "$(dirname "$0")/.."
package_dir="$PWD"
repo="$(cd ../.. && pwd)"
report="${1:-$repo/.test-results/ts-client.tap}"
shift || true
tests=("$@")
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

tarball="$(npm pack --silent --pack-destination "$work" | tail -n 1)"
mkdir "$work/project"
cd "$work/project"
printf '{ "name": "contextd-client-e2e", "private": true, "type": "module" }\n' >package.json
# Offline when the repository's `npm ci` already cached the dependencies; the registry otherwise.
# `ai` is the optional peer dependency of "@contextd/client/ai-sdk": npm does not install optional
# peers, so the project asks for it as a user would, at the version the repository pins.
ai_version="$(node -p 'require(process.argv[1]).devDependencies.ai' "$repo/package.json")"
npm install --prefer-offline --no-audit --no-fund --loglevel=error "$work/$tarball" "ai@$ai_version"
cp -R "$package_dir/test" test
# Two helpers of the repository's test/support (node: imports only) that the tests share with vitest's.
cp "$repo/test/support/tls-certificates.ts" test/tls-certificates.ts
cp "$repo/test/support/redis.ts" test/redis.ts
cp -R "$repo/examples/typescript" examples
# The README's and docs' TypeScript snippets run in test/docs-snippets.test.ts.
cat >tsconfig.json <<JSON
{
  "compilerOptions": {
    "target": "ES2022", "module": "NodeNext", "moduleResolution": "NodeNext", "lib": ["ES2023"],
    "types": ["node"], "typeRoots": ["$repo/node_modules/@types"],
    "strict": true, "skipLibCheck": true, "noEmit": true, "allowImportingTsExtensions": true, "erasableSyntaxOnly": true
  },
  "include": ["test", "examples"]
}
JSON
"$repo/node_modules/.bin/tsc" -p tsconfig.json
CONTEXTD_MAIN="$repo/dist/src/main.js" node --test --test-concurrency=1 \
  --test-reporter=spec --test-reporter-destination=stdout \
  --test-reporter=tap --test-reporter-destination="$report" \
  "${tests[@]:-test/*.test.ts}"
