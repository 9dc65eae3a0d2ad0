"""The README's Python snippets, and the packages the tests import, as a user gets them."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import contextd.client
import contextd.v1

from conftest import REPO_ROOT


def python_blocks() -> list[str]:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"^```python[ \t]*\n(.*?)^```[ \t]*$", readme, flags=re.MULTILINE | re.DOTALL)


def test_every_readme_snippet_runs_twice(sidecar, tmp_path):
    """Each ```python block runs as a script against a real sidecar, twice: the second run finds
    the first one's conversations in the store, so a snippet must use fresh ids."""
    blocks = python_blocks()
    assert blocks, "README.md has no ```python block"
    for index, block in enumerate(blocks):
        script = tmp_path / f"readme_{index}.py"
        script.write_text(block, encoding="utf-8")
        for run in (1, 2):
            completed = subprocess.run(
                [sys.executable, str(script)],
                env={**os.environ, "CONTEXTD_ADDRESS": sidecar.address},
                capture_output=True, text=True, timeout=60, cwd=tmp_path,
            )
            assert completed.returncode == 0, f"README python block {index}, run {run}:\n{completed.stderr}"
            assert completed.stdout.strip(), f"README python block {index}, run {run} printed nothing"


def test_the_packages_come_from_where_the_suite_says():
    """In the test command (CONTEXTD_INSTALLED_VENV set) both distributions are the wheels in a
    venv outside the checkout; run from the checkout they are its editable sources."""
    client = pathlib.Path(contextd.client.__file__).resolve()
    api = pathlib.Path(contextd.v1.__file__).resolve()
    venv = os.environ.get("CONTEXTD_INSTALLED_VENV")
    if venv:
        site = pathlib.Path(venv).resolve()
        assert site in client.parents and site in api.parents, (client, api)
        assert REPO_ROOT.resolve() not in client.parents
        assert (client.parent / "py.typed").exists()
    else:
        assert client.is_relative_to(REPO_ROOT / "clients" / "python"), client
        assert api.is_relative_to(REPO_ROOT / "gen" / "python"), api
