"""Fixtures that start real contextd processes for the Python client tests."""

import json
import os
import pathlib
import signal
import subprocess
import sys
from typing import Iterator

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


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
                self.address = entry["address"]
                break
        else:
            raise RuntimeError(f"contextd exited with {self.process.wait()} before listening")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=15)


@pytest.fixture(scope="module")
def sidecar() -> Iterator[Sidecar]:
    running = Sidecar(*os.environ.get("CONTEXTD_TEST_ARGS", "").split())
    yield running
    running.stop()
