"""Provider golden vectors (test/golden/providers, format in its README) through a real stateless
Compile with render options: the body the sidecar returns equals the shared expected JSON."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Tuple

import pytest
from google.protobuf import json_format

from conftest import REPO_ROOT
from contextd.client import Client
from contextd.client.errors import ContextdError
from contextd.v1 import compile_pb2, message_pb2


def _cases(key: str) -> List[Tuple[str, Dict[str, Any], str]]:
    paths = sorted((REPO_ROOT / "test" / "golden" / "providers").glob("*.json"))
    assert paths, "no golden vectors found"
    cases = []
    for path in paths:
        golden = json.loads(path.read_text())
        cases += [(golden["name"], golden, provider) for provider in golden.get(key, {})]
    return cases


def _request(golden: Dict[str, Any], provider: str) -> compile_pb2.CompileRequest:
    payload = json_format.ParseDict(golden["input"], compile_pb2.CompiledPayload())
    history = list(payload.history)
    current_turn = None
    # The only way a compile puts a message after an open round of history: the current turn.
    if golden.get("current_turn_id") and history and history[-1].id == golden["current_turn_id"]:
        current_turn = compile_pb2.CurrentTurn(raw=history.pop())
    return compile_pb2.CompileRequest(
        system=compile_pb2.MessageList(messages=payload.system),
        history=compile_pb2.MessageList(messages=history),
        current_turn=current_turn,
        memory=compile_pb2.MessageList(messages=payload.memory),
        tools=compile_pb2.MessageList(messages=payload.tools),
        scratch=payload.scratch,
        tool_definitions=compile_pb2.ToolDefinitionList(tool_definitions=payload.tool_definitions),
        render=compile_pb2.RenderOptions(
            provider=message_pb2.Provider.Value("PROVIDER_" + provider), model=golden["render"]["model"]
        ),
        # The vector's payload rendered as given: no tool-round repair (an open round before the
        # current turn is a vector of the renderers' refusal).
        repair=compile_pb2.TOOL_ROUND_REPAIR_REJECT,
    )


@pytest.mark.parametrize(("name", "golden", "provider"), _cases("expected"), ids=lambda value: value if isinstance(value, str) else "")
def test_rendered_body_matches_golden(sidecar, name: str, golden: Dict[str, Any], provider: str):
    with Client(sidecar.address) as client:
        rendered = client.compile(_request(golden, provider)).result.rendered
    assert json.loads(rendered.json) == golden["expected"][provider], name


@pytest.mark.parametrize(("name", "golden", "provider"), _cases("expected_errors"), ids=lambda value: value if isinstance(value, str) else "")
def test_refusal_matches_golden(sidecar, name: str, golden: Dict[str, Any], provider: str):
    expected = golden["expected_errors"][provider]
    with Client(sidecar.address) as client:
        with pytest.raises(ContextdError) as raised:
            client.compile(_request(golden, provider))
    assert raised.value.code.name == expected["code"], name
    assert raised.value.message.startswith(f'provider rule {expected["rule"]} violated at message "{expected["message_id"]}"'), raised.value.message
