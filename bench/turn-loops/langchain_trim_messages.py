"""The 20-turn agent loop of docs/responses-and-clients.md ("Lines per agent loop") with LangChain:
the conversation as a list of messages, `trim_messages` to the budget (keeping the system message
and starting on a human turn, so no tool round is cut), `convert_to_openai_messages` to render
Chat messages. Needs bench/requirements-peers.txt; the stub model of stub_model.py stands in for
the LLM: `python bench/turn-loops/langchain_trim_messages.py`."""

import json

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage, convert_to_openai_messages, trim_messages
from langchain_core.messages.utils import count_tokens_approximately

from stub_model import BUDGET_TOKENS, SYSTEM, TURNS, lookup, stub_model, user_message

# loop:start
history = [SystemMessage(SYSTEM)]
for turn in range(TURNS):
    history.append(HumanMessage(user_message(turn)))
    while True:
        context = trim_messages(history, max_tokens=BUDGET_TOKENS, strategy="last", token_counter=count_tokens_approximately,
                                include_system=True, start_on="human")
        messages = convert_to_openai_messages(context)
        reply = stub_model(messages)["choices"][0]["message"]
        calls = reply.get("tool_calls") or []
        history.append(AIMessage(reply["content"] or "", tool_calls=[
            {"id": call["id"], "name": call["function"]["name"], "args": json.loads(call["function"]["arguments"])} for call in calls]))
        history += [ToolMessage(lookup(call["function"]["arguments"]), tool_call_id=call["id"]) for call in calls]
        if not calls:
            break
# loop:end
print(f"{TURNS} turns; the last prompt, trimmed to a {BUDGET_TOKENS}-token budget, held {len(messages)} messages")
