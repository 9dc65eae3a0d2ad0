"""A minimal agent loop on contextd, with a stub in place of the LLM.

Run a sidecar (`node dist/src/main.js`), then `python examples/python/agent_loop.py`.
CONTEXTD_ADDRESS overrides the default 127.0.0.1:7420.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any, Dict, List

from contextd.client import Client, ToolRound, append_assistant, append_user, text_payload, tool_call, user_text
from contextd.v1 import compile_pb2, conversation_service_pb2 as conversation_pb2, message_pb2, state_pb2


def stub_model(body: Dict[str, Any]) -> Dict[str, Any]:
    """STUB MODEL, NOT AN LLM: answers an OpenAI Chat request body with canned replies, so the
    loop runs without network or keys. Replace it with a call to your provider's API."""
    last = body["messages"][-1]
    if last["role"] == "user" and "weather" in str(last["content"]).lower():
        return {"tool_calls": [
            {"id": "call_" + uuid.uuid4().hex[:8], "type": "function", "function": {"name": "weather", "arguments": '{"city":"Oslo"}'}},
            {"id": "call_" + uuid.uuid4().hex[:8], "type": "function", "function": {"name": "clock", "arguments": '{"zone":"Europe/Oslo"}'}},
        ]}
    if last["role"] == "tool":
        results = [m["content"] for m in body["messages"] if m["role"] == "tool"][-2:]
        return {"content": "Here is what I found: " + "; ".join(results)}
    return {"content": "You said: " + str(last["content"])}


def run_tool(name: str, arguments: str) -> str:
    """Stub tools: canned results."""
    return {"weather": "4°C, light rain", "clock": "09:30"}.get(name, f"unknown tool {name}")


def main() -> None:
    conversation_id = "example-" + uuid.uuid4().hex[:8]
    request = compile_pb2.CompileRequest(
        conversation_id=conversation_id,
        budget=compile_pb2.Budget(max_tokens=8000),
        render=compile_pb2.RenderOptions(provider=message_pb2.PROVIDER_OPENAI_CHAT, model="stub"),
    )
    with Client(os.environ.get("CONTEXTD_ADDRESS", "127.0.0.1:7420")) as client:
        client.wait_ready()
        # One RPC per model call: each turn commits what happened since the last call (the previous
        # answer, a tool round, the next user message) and returns the context for the next one.
        version = 0
        produced: List[state_pb2.Delta] = []
        for text in ["Hi!", "What's the weather in Oslo right now?"]:
            produced.append(append_user(user_text(text)))
            while True:
                compiled = client.turn(request, version, produced)
                version = compiled.committed_version
                reply = stub_model(json.loads(compiled.rendered.json))
                calls: List[Dict[str, Any]] = reply.get("tool_calls", [])
                if not calls:
                    print(f"user: {text}\nassistant: {reply['content']}")
                    produced = [append_assistant(reply["content"])]
                    break
                round_ = ToolRound("", *(tool_call(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls))
                for c in calls:  # a real agent runs these in parallel
                    round_.answer(c["id"], text_payload(run_tool(c["function"]["name"], c["function"]["arguments"])))
                produced = [round_.delta()]
        # The last answer has no next model call to travel with.
        client.commit(conversation_pb2.CommitRequest(conversation_id=conversation_id, expected_version=version, deltas=produced))


if __name__ == "__main__":
    main()
