"""Appending a streamed model response to a contextd conversation, as the events arrive from the
provider, with a stub in place of the LLM.

Run a sidecar (`node dist/src/main.js`), then `python examples/python/stream_ingestion.py`.
CONTEXTD_ADDRESS overrides the default 127.0.0.1:7420.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Iterator

from contextd.client import Client, append_provider_stream, append_user, user_text
from contextd.v1 import conversation_service_pb2 as conversation_pb2, message_pb2


def stub_anthropic_stream() -> Iterator[str]:
    """STUB MODEL, NOT AN LLM: the `data:` payloads of an Anthropic Messages stream that thinks,
    says something and calls a tool. With the real SDK, iterate the raw stream's events and pass
    each event's JSON (`event.to_json()`) instead."""
    yield json.dumps({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": []}})
    yield json.dumps({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}})
    yield json.dumps({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "They want the weather."}})
    yield json.dumps({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "EqQB+stub=="}})
    yield json.dumps({"type": "content_block_stop", "index": 0})
    yield json.dumps({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}})
    for piece in ["Let me ", "check."]:
        yield json.dumps({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": piece}})
    yield json.dumps({"type": "content_block_stop", "index": 1})
    yield json.dumps({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}}})
    for piece in ['{"city": ', '"Oslo"}']:
        yield json.dumps({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": piece}})
    yield json.dumps({"type": "content_block_stop", "index": 2})
    yield json.dumps({"type": "message_delta", "delta": {"stop_reason": "tool_use"}})
    yield json.dumps({"type": "message_stop"})


def main() -> None:
    conversation_id = "stream-example-" + uuid.uuid4().hex[:8]
    with Client(os.environ.get("CONTEXTD_ADDRESS", "127.0.0.1:7420")) as client:
        client.wait_ready()
        client.commit(conversation_pb2.CommitRequest(conversation_id=conversation_id, deltas=[append_user(user_text("Weather in Oslo?"))]))
        events = []
        for event in stub_anthropic_stream():
            print(event)  # show the text to the user as it arrives, keep the event
            events.append(event.encode())
        delta = append_provider_stream(message_pb2.PROVIDER_ANTHROPIC_MESSAGES, events)
        client.commit(conversation_pb2.CommitRequest(conversation_id=conversation_id, deltas=[delta]))
        state = client.get_state(conversation_pb2.GetStateRequest(conversation_id=conversation_id)).state
        for part in state.history[-1].parts:
            kind = part.WhichOneof("kind")
            if kind == "reasoning":
                print(f"reasoning: {part.reasoning.text} (signature {part.reasoning.signature})")
            elif kind == "text":
                print(f"text: {part.text.text}")
            elif kind == "tool_call":
                print(f"tool call: {part.tool_call.name} {part.tool_call.arguments.data}")


if __name__ == "__main__":
    main()
