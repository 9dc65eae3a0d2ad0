"""The 20-turn agent loop of docs/responses-and-clients.md ("Lines per agent loop") with contextd:
one `turn` call per model call commits what happened and returns the trimmed OpenAI Chat body.
A stub stands in for the model. Run a sidecar, then `python examples/python/turn_loop.py`
(CONTEXTD_ADDRESS overrides 127.0.0.1:7420)."""

import json
import os
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "turn-loops"))
from stub_model import BUDGET_TOKENS, SYSTEM, TURNS, lookup, stub_model, user_message  # noqa: E402

from contextd.client import Client, append_messages, append_provider_response, append_tool_result, append_user, system_text, text_payload, user_text  # noqa: E402
from contextd.v1 import compile_pb2, conversation_service_pb2 as conversation_pb2, message_pb2, state_pb2  # noqa: E402

# loop:start
request = compile_pb2.CompileRequest(
    conversation_id="turn-loop-" + uuid.uuid4().hex,
    budget=compile_pb2.Budget(max_tokens=BUDGET_TOKENS),
    render=compile_pb2.RenderOptions(provider=message_pb2.PROVIDER_OPENAI_CHAT, model="gpt-4o"))
with Client(os.environ.get("CONTEXTD_ADDRESS", "127.0.0.1:7420")) as client:
    client.wait_ready()
    version, produced = 0, [append_messages(state_pb2.SEGMENT_SYSTEM, system_text(SYSTEM))]
    for turn in range(TURNS):
        produced.append(append_user(user_text(user_message(turn))))
        while True:
            result = client.turn(request, version, produced)  # commit what happened, compile the next prompt
            version, response = result.committed_version, stub_model(json.loads(result.rendered.json)["messages"])
            produced = [append_provider_response(message_pb2.PROVIDER_OPENAI_CHAT, json.dumps(response))]
            calls = response["choices"][0]["message"].get("tool_calls") or []
            produced += [append_tool_result(c["id"], "lookup", text_payload(lookup(c["function"]["arguments"]))) for c in calls]
            if not calls:
                break
    client.commit(conversation_pb2.CommitRequest(conversation_id=request.conversation_id, expected_version=version, deltas=produced))
# loop:end
print(f"{TURNS} turns; the last prompt, trimmed to a {BUDGET_TOKENS}-token budget, held {len(json.loads(result.rendered.json)['messages'])} messages")
