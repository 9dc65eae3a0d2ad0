"""The README points users at examples/python; it must keep running against a real sidecar."""

import os
import subprocess
import sys

from conftest import REPO_ROOT


def test_example_agent_loop_runs(sidecar):
    completed = subprocess.run(
        [sys.executable, str(REPO_ROOT / "examples" / "python" / "agent_loop.py")],
        env={**os.environ, "CONTEXTD_ADDRESS": sidecar.address},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    assert (
        "user: What's the weather in Oslo right now?\nassistant: Here is what I found: 4°C, light rain; 09:30\n"
        in completed.stdout
    )
