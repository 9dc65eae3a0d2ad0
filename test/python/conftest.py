"""Fixtures that start real contextd and redis-server processes for the Python client tests."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from typing import Iterator

import pytest

# The checkout (its dist/, examples/, README.md and golden vectors). scripts/test.sh runs these
# tests from a copy outside it, against the installed packages, and says where it is.
REPO_ROOT = pathlib.Path(os.environ.get("CONTEXTD_REPO_ROOT") or pathlib.Path(__file__).resolve().parents[2])


def free_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Redis:
    """A real redis-server on a free loopback port, persistence off, in a temporary directory."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}"
        self._dir = tempfile.TemporaryDirectory(prefix="contextd-redis-")
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self._dir.name],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if "Ready to accept connections" in line:
                break
        else:
            raise RuntimeError(f"redis-server exited with {self.process.wait()} before it was ready")
        # Keep draining so redis-server never blocks on a full pipe.
        threading.Thread(target=self.process.stdout.read, daemon=True).start()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait(timeout=15)
        self._dir.cleanup()


class Sidecar:
    """A running contextd process started from the built dist/."""

    def __init__(self, *args: str) -> None:
        main = REPO_ROOT / "dist" / "src" / "main.js"
        if not main.exists():
            raise RuntimeError("contextd is not built: run `npm run build` first")
        self.process = subprocess.Popen(
            ["node", str(main), "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=sys.stderr,
            text=True,
        )
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if entry.get("msg") == "contextd listening":
                self.address: str = entry["address"]
                break
        else:
            raise RuntimeError(f"contextd exited with {self.process.wait()} before listening")
        threading.Thread(target=self.process.stdout.read, daemon=True).start()

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=15)


@pytest.fixture(scope="module")
def redis() -> Iterator[Redis]:
    running = Redis()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def sidecar(redis: Redis) -> Iterator[Sidecar]:
    """A contextd storing conversations in a real Redis, shared by the tests of one module."""
    extra = os.environ.get("CONTEXTD_TEST_ARGS", "").split()
    running = Sidecar("--redis-url", redis.url, *extra)
    yield running
    running.stop()
