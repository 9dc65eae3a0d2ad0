"""Provider golden vectors (test/golden/providers, format in its README) through a real stateless
Compile with render options: the body the sidecar returns equals the shared expected JSON."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Tuple

import pytest
from google.protobuf import json_format

from conftest import REPO_ROOT
from contextd.client import Client
from contextd.v1 import compile_pb2, message_pb2


def _cases() -> List[Tuple[str, Dict[str, Any], str]]:
    paths = sorted((REPO_ROOT / "test" / "golden" / "providers").glob("*.json"))
    assert paths, "no golden vectors found"
    cases = []
    for path in paths:
        golden = json.loads(path.read_text())
        cases += [(golden["name"], golden, provider) for provider in golden["expected"]]
    return cases


@pytest.mark.parametrize(("name", "golden", "provider"), _cases(), ids=lambda value: value if isinstance(value, str) else "")
def test_rendered_body_matches_golden(sidecar, name: str, golden: Dict[str, Any], provider: str):
    payload = json_format.ParseDict(golden["input"], compile_pb2.CompiledPayload())
    request = compile_pb2.CompileRequest(
        system=compile_pb2.MessageList(messages=payload.system),
        history=compile_pb2.MessageList(messages=payload.history),
        memory=compile_pb2.MessageList(messages=payload.memory),
        tools=compile_pb2.MessageList(messages=payload.tools),
        scratch=payload.scratch,
        tool_definitions=compile_pb2.ToolDefinitionList(tool_definitions=payload.tool_definitions),
        render=compile_pb2.RenderOptions(
            provider=message_pb2.Provider.Value("PROVIDER_" + provider), model=golden["render"]["model"]
        ),
    )
    with Client(sidecar.address) as client:
        rendered = client.compile(request).result.rendered
    assert json.loads(rendered.json) == golden["expected"][provider], name
