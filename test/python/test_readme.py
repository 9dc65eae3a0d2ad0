"""The packages the tests import, as a user gets them. (The README's and docs' Python snippets run in
test/docs-snippets.test.ts, in a venv their own install line fills.)"""

from __future__ import annotations

import os
import pathlib

import contextd.client
import contextd.v1

from conftest import REPO_ROOT


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
