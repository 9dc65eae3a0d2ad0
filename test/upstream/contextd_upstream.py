"""A pytest plugin that runs a framework's own tests, unmodified, with contextd's adapter in place
of the framework's reference store (scripts/test-upstream.sh loads it with `-p`).

Before the test modules are imported it starts a real sidecar (memory store, or Redis with
CONTEXTD_UPSTREAM_STORE=redis) and swaps one factory:
  openai-agents:  `SQLiteSession(session_id, db_path, ..., session_settings)` makes a
                  `ContextdSession` (sessions of one SQLite file and id share a conversation, as
                  the file's rows would; every ":memory:" session is a conversation of its own).
  langchain-core: `InMemoryChatMessageHistory(messages=...)` makes a `ContextdChatMessageHistory`
                  holding those messages (equal when their messages are, as the pydantic model is).
Then it keeps the tests that use that store (their source names it) and deselects the rest, and
those that test the reference store's own storage rather than the Session / chat-history API:
RESERVED_TO_THE_REFERENCE (the SQLite database opened with `sqlite3`, or SQLiteSession's private
connections, locks and row writers), and the tests in DELIBERATE, each with its reason (among them
the compaction tests that need SQLiteSession's private `_get_compaction_snapshot`).

The Agents SDK's compaction tests replace `time.time` process-wide (`monkeypatch.setattr(
"cryptography.fernet.time.time", ...)`); the client's calls keep their deadlines on the real clock
regardless (`contextd.client._common.grpc_timeout`), so those tests run like any other.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import itertools
import os
import pathlib
import re
import uuid
from typing import Any, Dict, List, Optional

import pytest

REPO_ROOT = pathlib.Path(os.environ["CONTEXTD_REPO_ROOT"])
FRAMEWORK = os.environ["CONTEXTD_UPSTREAM_FRAMEWORK"]  # "openai-agents" or "langchain-core"

# What a test of SQLiteSession's storage touches: the database through sqlite3, or the session's
# private attributes (`session._connections`, `SQLiteSession._file_locks`, `backend._insert_items`).
RESERVED_TO_THE_REFERENCE = re.compile(r"\bsqlite3\.|\bSQLiteSession\._\w|\b(?:session|backend)\._[a-z]\w*")

# Tests of the reference store itself, by node id, with what they check.
_SNAPSHOT = (
    "needs SQLiteSession's private _get_compaction_snapshot (the atomic suffix replacement the SDK's "
    "compaction session calls on its native store only); ContextdSession does not implement that private hook"
)
DELIBERATE: Dict[str, str] = {
    "tests/unit_tests/chat_history/test_chat_history.py::test_chat_history_deprecated[InMemoryChatMessageHistory]":
        "checks the deprecation notice in InMemoryChatMessageHistory's docstring",
    "tests/memory/test_openai_responses_compaction_session.py::TestOpenAIResponsesCompactionSession::test_automatic_compaction_rollback_budget[True]": _SNAPSHOT,
    **{
        f"tests/memory/test_compaction_model_visibility.py::test_backend_read_limit_cannot_hide_retained_history_from_compaction[{encrypted}-{streamed}]": _SNAPSHOT
        for encrypted in ("False", "True")
        for streamed in ("False", "True")
    },
    **{f"tests/memory/test_compaction_model_visibility.py::test_expired_read_overhead_does_not_authorize_hidden_history[{flag}]": _SNAPSHOT for flag in ("False", "True")},
}

_processes = importlib.util.spec_from_file_location("contextd_test_processes", REPO_ROOT / "test" / "python" / "conftest.py")
assert _processes is not None and _processes.loader is not None
processes = importlib.util.module_from_spec(_processes)
_processes.loader.exec_module(processes)

_running: List[Any] = []
_store_name = "memory"
_swapped_name = ""
_reserved: List[str] = []
_made = [0]  # adapter sessions / histories the swapped factory made


def _start_sidecar() -> str:
    global _store_name
    args: List[str] = []
    if os.environ.get("CONTEXTD_UPSTREAM_STORE") == "redis":
        redis = processes.Redis()
        _running.append(redis)
        args = ["--redis-url", redis.url]
        _store_name = "redis"
    sidecar = processes.Sidecar(*args)
    _running.insert(0, sidecar)
    return sidecar.address


def _swap_agents(address: str) -> None:
    import agents
    import agents.memory
    from contextd.client import Client
    from contextd.client.openai_agents import EMPTY_SESSION_CONVERSATION_ID, ContextdSession

    client = Client(address)
    _running.insert(0, client)
    run = uuid.uuid4().hex[:8]
    memory_databases = itertools.count()

    class SQLiteSession(ContextdSession):  # the name the tests import (and subclass)
        """A ContextdSession taking SQLiteSession's arguments."""

        def __init__(
            self,
            session_id: str,
            db_path: Any = ":memory:",
            sessions_table: str = "agent_sessions",
            messages_table: str = "agent_messages",
            session_settings: Any = None,
        ) -> None:
            if str(db_path) == ":memory:":
                database = f"memory-{next(memory_databases)}"
            else:
                database = hashlib.sha256(f"{pathlib.Path(db_path).resolve()}|{sessions_table}|{messages_table}".encode()).hexdigest()[:16]
            conversation_id = f"upstream-{run}-{database}-{session_id or EMPTY_SESSION_CONVERSATION_ID}"
            super().__init__(session_id, client, conversation_id=conversation_id, session_settings=session_settings)
            _made[0] += 1

    agents.SQLiteSession = SQLiteSession  # type: ignore[assignment]
    agents.memory.SQLiteSession = SQLiteSession  # type: ignore[assignment]


def _swap_langchain(address: str) -> None:
    import langchain_core.chat_history
    from contextd.client import Client
    from contextd.client.langchain_history import ContextdChatMessageHistory

    client = Client(address)
    _running.insert(0, client)

    class InMemoryChatMessageHistory(ContextdChatMessageHistory):  # the name the tests import
        """A ContextdChatMessageHistory in a new conversation, holding `messages`."""

        def __init__(self, messages: Optional[List[Any]] = None, **_ignored: Any) -> None:
            super().__init__(f"upstream-{uuid.uuid4().hex}", client)
            _made[0] += 1
            if messages:
                self.add_messages(messages)

        def __eq__(self, other: object) -> bool:
            return isinstance(other, ContextdChatMessageHistory) and self.messages == other.messages

        __hash__ = None  # type: ignore[assignment]

    langchain_core.chat_history.InMemoryChatMessageHistory = InMemoryChatMessageHistory  # type: ignore[misc]


def pytest_configure(config: pytest.Config) -> None:
    global _swapped_name
    address = _start_sidecar()
    if FRAMEWORK == "openai-agents":
        _swap_agents(address)
        _swapped_name = "SQLiteSession"
    else:
        _swap_langchain(address)
        _swapped_name = "InMemoryChatMessageHistory"


def pytest_unconfigure(config: pytest.Config) -> None:
    for running in _running:
        (running.close if hasattr(running, "close") else running.stop)()


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    global _reserved
    kept, dropped = [], []
    for item in items:
        function = getattr(item, "function", None)
        source = _source(function)
        # A helper of the test's module that it calls (one level) may be what makes the store.
        for name in _names(getattr(function, "__code__", None)):
            helper = getattr(item.module, name, None) if hasattr(item, "module") else None
            if inspect.isfunction(helper) and helper is not function:
                source += _source(helper)
        uses_store = _swapped_name in source or f"[{_swapped_name}" in item.nodeid
        reserved = item.nodeid in DELIBERATE or (FRAMEWORK == "openai-agents" and RESERVED_TO_THE_REFERENCE.search(source))
        (kept if uses_store and not reserved else dropped).append(item)
        if uses_store and reserved:
            _reserved.append(item.nodeid)
    items[:] = kept
    config.hook.pytest_deselected(items=dropped)


def _source(function: Any) -> str:
    try:
        return inspect.getsource(function) if function is not None else ""
    except (OSError, TypeError):
        return ""


def _names(code: Any) -> List[str]:
    """The global names a code object and the code nested in it use."""
    if code is None:
        return []
    names = list(code.co_names)
    for constant in code.co_consts:
        if inspect.iscode(constant):
            names += _names(constant)
    return names


def pytest_report_header(config: pytest.Config) -> str:
    return f"contextd upstream: {FRAMEWORK} tests that use {_swapped_name or 'the store'}, against a sidecar ({_store_name} store)"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    terminalreporter.write_line(f"contextd upstream: the tests made {_made[0]} adapter {'sessions' if FRAMEWORK == 'openai-agents' else 'histories'}")
    terminalreporter.write_line(f"contextd upstream: {len(_reserved)} tests that use the store deselected, each with its rule (the reference store's own storage, or the reason given):")
    for nodeid in _reserved:
        terminalreporter.write_line(f"  {nodeid}  ({DELIBERATE.get(nodeid, 'touches SQLite storage')})")
