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


def _run_example(sidecar, name: str) -> str:
    completed = subprocess.run(
        [sys.executable, str(REPO_ROOT / "examples" / "python" / name)],
        env={**os.environ, "CONTEXTD_ADDRESS": sidecar.address},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def test_example_stream_ingestion_runs(sidecar):
    stdout = _run_example(sidecar, "stream_ingestion.py")
    assert stdout.endswith(
        "reasoning: They want the weather. (signature EqQB+stub==)\ntext: Let me check.\ntool call: weather {\"city\":\"Oslo\"}\n"
    ), stdout


def test_example_openai_agents_session_runs(sidecar):
    stdout = _run_example(sidecar, "openai_agents_session.py")
    assert stdout == (
        "user: What's the weather in Oslo?\nassistant: It is 4°C and light rain in Oslo.\n"
        "user: Thanks!\nassistant: You have said 2 things so far.\nitems stored: 6\n"
    ), stdout


def test_example_langchain_history_runs(sidecar):
    stdout = _run_example(sidecar, "langchain_history.py")
    assert stdout == (
        "user: Hi, I'm Ana.\nassistant: Nice to meet you, Ana.\nuser: Who am I?\nassistant: You are Ana.\nmessages stored: 4\n"
    ), stdout
