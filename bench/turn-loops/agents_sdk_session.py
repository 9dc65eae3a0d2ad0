"""The 20-turn agent loop of docs/responses-and-clients.md ("Lines per agent loop") with the OpenAI
Agents SDK's `Session` (SQLiteSession) keeping the conversation. The SDK keeps items but does not
trim them to a token budget, keep tool calls with their outputs, or render Chat messages for a
model of your own, so the loop does those by hand. Needs bench/requirements-peers.txt; the stub
model of stub_model.py stands in for the LLM: `python bench/turn-loops/agents_sdk_session.py`."""

import asyncio
import json
import uuid

from agents import SQLiteSession
from agents.models.chatcmpl_converter import Converter

from stub_model import BUDGET_TOKENS, SYSTEM, TURNS, lookup, stub_model, user_message


async def main() -> None:
    # loop:start
    def tokens(item) -> int:  # the same estimate LangChain's count_tokens_approximately makes
        return len(json.dumps(item)) // 4 + 3

    def trimmed(items: list) -> list:  # newest first until the budget; never start inside a tool round
        kept, total = [], tokens({"role": "system", "content": SYSTEM})
        for item in reversed(items):
            if total + tokens(item) > BUDGET_TOKENS:
                break
            kept.insert(0, item)
            total += tokens(item)
        while kept and kept[0].get("role") != "user":
            kept.pop(0)
        return kept

    session = SQLiteSession("turn-loop-" + uuid.uuid4().hex)
    for turn in range(TURNS):
        await session.add_items([{"role": "user", "content": user_message(turn)}])
        while True:
            messages = [{"role": "system", "content": SYSTEM}, *Converter.items_to_messages(trimmed(await session.get_items()))]
            reply = stub_model(messages)["choices"][0]["message"]
            calls = reply.get("tool_calls") or []
            if not calls:
                await session.add_items([{"role": "assistant", "content": reply["content"]}])
                break
            for call in calls:
                await session.add_items([
                    {"type": "function_call", "call_id": call["id"], "name": call["function"]["name"], "arguments": call["function"]["arguments"]},
                    {"type": "function_call_output", "call_id": call["id"], "output": lookup(call["function"]["arguments"])},
                ])
    # loop:end
    print(f"{TURNS} turns; the last prompt, trimmed to a {BUDGET_TOKENS}-token budget, held {len(messages)} messages")


asyncio.run(main())
