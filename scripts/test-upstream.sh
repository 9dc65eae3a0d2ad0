#!/usr/bin/env bash
# Runs the frameworks' own tests against contextd's adapters: the test files of the pinned
# framework versions, taken unmodified from their source distributions on PyPI (downloaded here
# with pip and checked against the sha256 below, never copied into this repository), with only
# the reference store's factory swapped for the adapter (test/upstream/contextd_upstream.py) and a
# real sidecar behind it. The frameworks' own pytest configuration applies (asyncio mode), except
# langchain-core's addopts, which name plugins its suite uses and these tests do not (syrupy).
#
# Usage: scripts/test-upstream.sh PYTHON RESULTS_DIR
#   PYTHON       an interpreter with the client (and its framework extras) installed, pytest,
#                pytest-asyncio, pytest-mock and blockbuster (requirements-dev.txt pins them)
#   RESULTS_DIR  gets upstream-<framework>.xml (JUnit) per framework
# CONTEXTD_UPSTREAM_STORE=redis runs the sidecar on a real Redis instead of its memory store.
# The downloads are cached in ${XDG_CACHE_HOME:-~/.cache}/contextd-upstream.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
python="$1"
results="$(mkdir -p "$2" && cd "$2" && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/contextd-upstream"
mkdir -p "$cache"

# framework | sdist | sha256 | test files (relative to the sdist's root)
suites=(
  "openai-agents|openai_agents-0.24.0.tar.gz|4b4b285f4fed81fdf1b4ac426a9101658d9cd29b4fb1aaeee18f639b77e704e3|tests/memory/test_session.py tests/memory/test_session_limit.py tests/memory/test_openai_responses_compaction_session.py tests/memory/test_compaction_model_visibility.py tests/test_agent_runner.py tests/test_agent_runner_streamed.py tests/test_max_turns.py tests/test_run_impl_resume_paths.py tests/test_soft_cancel.py tests/test_tool_batch_failure_history.py tests/test_native_tool_failure_history.py tests/test_tool_failure_boundaries.py tests/test_programmatic_tool_calling.py"
  "langchain-core|langchain_core-1.8.1.tar.gz|778b9bf1d18d4b7a716311defa230db190006ef75fe175930e00012d82df603b|tests/unit_tests/runnables/test_history.py tests/unit_tests/chat_history/test_chat_history.py"
)

status=0
for suite in "${suites[@]}"; do
  IFS='|' read -r framework sdist sha256 files <<<"$suite"
  archive="$cache/$sdist"
  if [ ! -f "$archive" ] || ! echo "$sha256  $archive" | sha256sum -c --status; then
    version="${sdist%.tar.gz}"; version="${version##*-}"
    "$python" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
      --dest "$cache" "$framework==$version" >&2
  fi
  echo "$sha256  $archive" | sha256sum -c --status || { echo "test-upstream: $sdist does not match its pinned sha256" >&2; exit 1; }
  work="$(mktemp -d "${TMPDIR:-/tmp}/contextd-upstream.XXXXXX")"
  tar -xzf "$archive" -C "$work"
  root="$work/${sdist%.tar.gz}"
  # The installed package, not the sdist's source tree, is what the tests import.
  rm -rf "$root/src" "$root/${framework//-/_}"
  (
    cd "$root"
    # shellcheck disable=SC2086 # the file list splits on spaces
    CONTEXTD_REPO_ROOT="$repo" CONTEXTD_UPSTREAM_FRAMEWORK="$framework" PYTHONPATH="$repo/test/upstream${PYTHONPATH:+:$PYTHONPATH}" \
      "$python" -m pytest $files -q -p contextd_upstream -p no:cacheprovider -o addopts= \
      --junitxml="$results/upstream-$framework.xml"
  ) || status=1
  rm -rf "$work"
done
exit "$status"
