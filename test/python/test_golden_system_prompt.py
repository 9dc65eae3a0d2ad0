"""System-prompt golden vectors (test/golden/system-prompt, format in its README) through a real
stateless Compile: the system segment, the introduced blocks, their records and each provider's
body equal the shared expected JSON."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Tuple

import pytest
from google.protobuf import json_format

from conftest import REPO_ROOT
from contextd.client import Client
from contextd.v1 import compile_pb2, message_pb2


def _goldens() -> List[Dict[str, Any]]:
    paths = sorted((REPO_ROOT / "test" / "golden" / "system-prompt").glob("*.json"))
    assert paths, "no system-prompt golden vectors found"
    return [json.loads(path.read_text()) for path in paths]


def _renders() -> List[Tuple[str, Dict[str, Any], str]]:
    return [(golden["name"], golden, provider) for golden in _goldens() for provider in golden["expected"]]


def _request(golden: Dict[str, Any]) -> compile_pb2.CompileRequest:
    return json_format.ParseDict(golden["request"], compile_pb2.CompileRequest())


@pytest.mark.parametrize("golden", _goldens(), ids=lambda golden: golden["name"])
def test_system_segment_matches_golden(sidecar, golden: Dict[str, Any]):
    with Client(sidecar.address) as client:
        result = client.compile(_request(golden)).result
    assert [json_format.MessageToDict(message) for message in result.payload.system] == golden["expected_system"]
    assert [introduced.message.id for introduced in result.introduced] == golden["expected_introduced"]
    assembly = compile_pb2.TRANSFORMATION_REASON_SYSTEM_PROMPT_ASSEMBLY
    records = {
        message_id: {
            "action": compile_pb2.TransformationAction.Name(record.action),
            "reason": compile_pb2.TransformationReason.Name(record.reason),
        }
        for message_id, record in result.transformations.items()
        if record.reason == assembly
    }
    assert records == golden["expected_transformations"]


@pytest.mark.parametrize(("name", "golden", "provider"), _renders(), ids=lambda value: value if isinstance(value, str) else "")
def test_rendered_body_matches_golden(sidecar, name: str, golden: Dict[str, Any], provider: str):
    request = _request(golden)
    request.render.CopyFrom(
        compile_pb2.RenderOptions(provider=message_pb2.Provider.Value("PROVIDER_" + provider), model=golden["render"]["model"])
    )
    with Client(sidecar.address) as client:
        rendered = client.compile(request).result.rendered
    assert json.loads(rendered.json) == golden["expected"][provider], name
