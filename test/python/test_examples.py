"""Every example in examples/python runs, twice, against a real sidecar (the README points users at them)."""

import os
import subprocess
import sys

from conftest import REPO_ROOT


def run_example(name: str, address: str) -> str:
    completed = subprocess.run(
        [sys.executable, str(REPO_ROOT / "examples" / "python" / name)],
        env={**os.environ, "CONTEXTD_ADDRESS": address},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, f"{name}:\n{completed.stderr}"
    return completed.stdout


def test_every_example_runs_twice(sidecar):
    examples = sorted(path.name for path in (REPO_ROOT / "examples" / "python").glob("*.py"))
    assert "agent_loop.py" in examples
    for name in examples:
        for _ in range(2):
            assert run_example(name, sidecar.address).strip(), f"{name} printed nothing"


def test_the_agent_loop_example_shows_its_tool_round(sidecar):
    assert (
        "user: What's the weather in Oslo right now?\nassistant: Here is what I found: 4°C, light rain; 09:30\n"
        in run_example("agent_loop.py", sidecar.address)
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


def test_example_langchain_middleware_budgets_each_model_call(sidecar):
    stdout = _run_example(sidecar, "langchain_middleware.py")
    # The agent's state keeps every message; the model is sent the system message and the newest
    # whole turns within 600 tokens.
    assert stdout == "".join(
        f"turn {turn}: {2 * turn} messages in the agent's state; I was sent {min(2 * turn, 6)} messages, the first human one: question {max(1, turn - 2)}\n"
        for turn in range(1, 7)
    ), stdout


def test_example_openai_agents_input_filter_budgets_each_model_call(sidecar):
    stdout = _run_example(sidecar, "openai_agents_input_filter.py")
    assert stdout == "".join(
        f"turn {turn}: {2 * turn} items in the session; I was sent {min(2 * turn - 1, 5)} items, the first user one: question {max(1, turn - 2)}\n"
        for turn in range(1, 7)
    ), stdout
