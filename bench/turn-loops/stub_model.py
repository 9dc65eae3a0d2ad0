"""The model and the tool every 20-turn loop in this folder uses, so the loops differ only in how
they keep and trim the conversation (bench/turn-loops/count_lines.py counts those lines only).

STUB MODEL, NOT AN LLM: it answers an OpenAI Chat messages list with a Chat Completions response,
calling the `lookup` tool on every other user turn and answering in text otherwise.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Dict, List

SYSTEM = "You are a terse assistant. Use the lookup tool when asked to."
TURNS = 20
# Long enough that 20 turns overflow the budget and every loop has to trim.
PADDING = " Please be thorough." * 20
BUDGET_TOKENS = 1_000


def user_message(turn: int) -> str:
    return f"Question {turn}: {'look it up' if turn % 2 == 0 else 'just answer'}.{PADDING}"


def stub_model(messages: List[Dict[str, Any]]) -> Dict[str, Any]:
    last = messages[-1]
    if last["role"] == "user" and "look it up" in str(last["content"]):
        call_id = "call_" + uuid.uuid4().hex[:12]
        message = {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "lookup", "arguments": json.dumps({"q": str(last["content"])[:12]})}},
        ]}
    else:
        message = {"role": "assistant", "content": f"Answer after {len(messages)} messages."}
    return {"id": "stub", "object": "chat.completion", "model": "stub", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}


def lookup(arguments: str) -> str:
    return "found: " + json.loads(arguments)["q"]
