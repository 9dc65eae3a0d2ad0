#!/usr/bin/env bash
# Installs the Node.js that CI and the Docker image run (an LTS line; the machine's own Node may be
# older, or come without npm, as Debian's does) with its npm and npx, into .tools/node/v<version>,
# and prints that installation's bin directory to put first on PATH. Both come from the npm
# registry (node-linux-<arch> carries the official binaries; npm is the npm package), fetched with
# curl or wget and checked against the sha512 pinned here, so no npm is needed to run it. The
# layout is the official tarballs' (bin/node, bin/npm and bin/npx -> lib/node_modules/npm), so the
# npm it gives treats that directory as its global prefix. Idempotent: a present install is kept.
# $npm_config_registry names another registry (a mirror), as npm's own setting does.
set -euo pipefail
cd "$(dirname "$0")/.."
NODE_VERSION=24.22.3
NPM_VERSION=11.21.2
case "$(uname -m)" in
  x86_64)
    arch=x64
    node_sha512=287b286fe16ff587ab013bd8ba331b8b226a9d10af2edadcaff79336a46a88e486a7dec43a244fd723f8efe9271a043fc677375d8f31ce45b9f3b76567336a44
    ;;
  aarch64 | arm64)
    arch=arm64
    node_sha512=219c74279dbfd4d0f002c6368b2591f6794f218b98be24d67ad8e3f3e125bd8421dbe5d184b7c27e46c5105ff63b9bc623685c51bc8f34757e9f3df8d856c95f
    ;;
  *) echo "install-node.sh: no Node.js package for $(uname -m)" >&2; exit 1 ;;
esac
npm_sha512=ec73c0a64f807e53146af4ac78bd4f9ba0a762a3081e4e77c7e2a6ba1aa64c3a8f9233cc8312294cf713aac13dd4428dc3880504957d7e75e249d1a6d435eaf4
registry="${npm_config_registry:-https://registry.npmjs.org/}"
registry="${registry%/}"
prefix="$PWD/.tools/node/v$NODE_VERSION"
bin="$prefix/bin"

installed() {
  [ "$("$bin/node" --version 2>/dev/null)" = "v$NODE_VERSION" ] \
    && [ "$(PATH="$bin:$PATH" "$bin/npm" --version 2>/dev/null)" = "$NPM_VERSION" ] \
    && [ "$(PATH="$bin:$PATH" "$bin/npx" --version 2>/dev/null)" = "$NPM_VERSION" ]
}

# fetch NAME VERSION SHA512 FILE: the package's tarball from the registry, checked.
fetch() {
  local url="$registry/$1/-/$1-$2.tgz"
  if command -v curl >/dev/null 2>&1; then
    curl --fail --silent --show-error --location --retry 3 --output "$4" "$url"
  elif command -v wget >/dev/null 2>&1; then
    wget --quiet --tries=3 --output-document="$4" "$url"
  else
    echo "install-node.sh: needs curl or wget to fetch $url" >&2
    return 1
  fi
  echo "$3  $4" | sha512sum --check --quiet >/dev/null \
    || { echo "install-node.sh: $url does not have the pinned sha512 (a different file, or a broken download)" >&2; return 1; }
}

if ! installed; then
  work="$(mktemp -d "${TMPDIR:-/tmp}/install-node.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  echo "install-node.sh: Node.js $NODE_VERSION and npm $NPM_VERSION from $registry into $prefix" >&2
  fetch "node-linux-$arch" "$NODE_VERSION" "$node_sha512" "$work/node.tgz"
  fetch npm "$NPM_VERSION" "$npm_sha512" "$work/npm.tgz"
  # Unpacked beside the target and moved into place, so an interrupted run leaves no half install.
  staged="$prefix.partial"
  rm -rf "$staged" && mkdir -p "$staged/lib/node_modules/npm"
  tar -xzf "$work/node.tgz" -C "$staged" --strip-components=1
  tar -xzf "$work/npm.tgz" -C "$staged/lib/node_modules/npm" --strip-components=1
  ln -s ../lib/node_modules/npm/bin/npm-cli.js "$staged/bin/npm"
  ln -s ../lib/node_modules/npm/bin/npx-cli.js "$staged/bin/npx"
  rm -rf "$prefix" && mv "$staged" "$prefix"
  installed || { echo "install-node.sh: the installed node, npm or npx does not answer its version" >&2; exit 1; }
fi
echo "$bin"
