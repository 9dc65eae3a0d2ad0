#!/usr/bin/env bash
# Installs the Node.js that CI and the Docker image run (an LTS line; the machine's own Node may be
# older) into .tools/node from the npm registry (the node-linux-<arch> packages carry the official
# binaries), and prints the directory to put first on PATH. Idempotent: a present version is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
NODE_VERSION=24.22.3
case "$(uname -m)" in
  x86_64) arch=x64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) echo "install-node.sh: no Node.js package for $(uname -m)" >&2; exit 1 ;;
esac
prefix="$PWD/.tools/node"
bin="$prefix/node_modules/node-linux-$arch/bin"
if [ "$("$bin/node" --version 2>/dev/null)" != "v$NODE_VERSION" ]; then
  mkdir -p "$prefix"
  npm install --prefix "$prefix" --no-audit --no-fund --no-save --loglevel=error "node-linux-$arch@$NODE_VERSION" >&2
fi
echo "$bin"
