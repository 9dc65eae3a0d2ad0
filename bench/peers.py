"""`npm run bench:peers`: an agent turn with contextd beside what a Python agent would use instead.

A turn appends one ~1 KB user message and gets the budgeted context for the next model call as an
OpenAI Chat messages list (budget 8,000 tokens), on conversations of 100, 1,000 and 10,000 stored
~1 KB messages, plain ("chat") and with a tool round whose result is 4 KB every 8 messages
("tools"). In one run, round-robin per turn:

- contextd, in-memory and Redis store: one RPC (`Client.turn`: Compile with `commit.deltas`),
  CHAR_FALLBACK estimator (4 characters per token plus framing), rendered for OpenAI Chat;
- LangChain `trim_messages` over an in-process list (`start_on="human"`, `include_system`,
  `count_tokens_approximately`: 4 characters per token + 3 per message), then
  `convert_to_openai_messages`;
- LangChain over a Redis list: RPUSH the new message, LRANGE the list, `messages_from_dict`, then as
  above (what `RedisChatMessageHistory` does);
- OpenAI Agents SDK `SQLiteSession` (":memory:"): `add_items`, `get_items()`, trimmed from the end
  to the budget with the same 4-characters-per-token count;
- OpenAI Agents SDK `RedisSession`: `add_items`, `get_items(limit=40)`, trimmed likewise.

Needs redis-server on PATH and the packages in bench/requirements-peers.txt (the npm script
installs them into .venv). Prints p50 / p99 per system and size, and the issue's targets.
"""

import asyncio
import json
import os
import statistics
import sys
import time

import redis
from agents import SQLiteSession
from agents.extensions.memory.redis_session import RedisSession
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage, convert_to_openai_messages, messages_from_dict, messages_to_dict, trim_messages
from langchain_core.messages.utils import count_tokens_approximately

from bench_processes import start_redis, start_sidecar
from contextd.client import Client, ToolRound, append_assistant, append_user, text_payload, tool_call, user_text
from contextd.v1 import compile_pb2, message_pb2, state_pb2
from contextd.v1 import conversation_service_pb2 as conversation_pb2

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUDGET = 8000
SIZES = [int(size) for size in os.environ.get("BENCH_PEERS_SIZES", "100,1000,10000").split(",")]
KB = ("The agent reads the repository, plans the change, runs the tests and reports what it found. " * 12)[:1000]
RESULT_4KB = ("line of tool output: file.py:42 passed in 0.01 s; " * 90)[:4000]
SYSTEM = "You are a careful coding agent."


def conversation(count: int, tools: bool) -> list[dict]:
    """`count` messages as role dicts: user/assistant ~1 KB each, a tool round every 8 with `tools`."""
    messages: list[dict] = []
    index = 0
    while len(messages) < count:
        if tools and index % 8 == 7:
            call_id = f"call_{index}"
            messages.append({"role": "assistant", "content": "", "call": {"id": call_id, "name": "run_tests", "arguments": '{"path":"."}'}})
            messages.append({"role": "tool", "content": RESULT_4KB, "call_id": call_id})
        else:
            messages.append({"role": "user" if len(messages) % 2 == 0 else "assistant", "content": f"{index} {KB}"})
        index += 1
    # End on an assistant answer, so the next turn is a user message.
    while messages[-1]["role"] != "assistant" or "call" in messages[-1]:
        messages.pop()
    return messages


def approximate_tokens(item: dict) -> int:
    return len(json.dumps(item)) // 4 + 3


def trim_to_budget(items: list) -> list:
    """Newest first until the budget is spent, then starting on a user message (the SDK has no trimming)."""
    kept, total = [], approximate_tokens({"role": "system", "content": SYSTEM})
    for item in reversed(items):
        total += approximate_tokens(item)
        if total > BUDGET:
            break
        kept.append(item)
    kept.reverse()
    while kept and kept[0].get("role") != "user":
        kept.pop(0)
    return [{"role": "system", "content": SYSTEM}] + kept


def langchain_messages(messages: list[dict]) -> list:
    converted = []
    for message in messages:
        if message["role"] == "user":
            converted.append(HumanMessage(message["content"]))
        elif message["role"] == "tool":
            converted.append(ToolMessage(message["content"], tool_call_id=message["call_id"]))
        elif "call" in message:
            call = message["call"]
            converted.append(AIMessage("", tool_calls=[{"id": call["id"], "name": call["name"], "args": json.loads(call["arguments"])}]))
        else:
            converted.append(AIMessage(message["content"]))
    return converted


def langchain_context(history: list) -> list:
    trimmed = trim_messages([SystemMessage(SYSTEM)] + history, max_tokens=BUDGET, token_counter=count_tokens_approximately, strategy="last", start_on="human", include_system=True)
    return convert_to_openai_messages(trimmed)


def sdk_items(messages: list[dict]) -> list[dict]:
    items = []
    for message in messages:
        if message["role"] == "tool":
            items.append({"type": "function_call_output", "call_id": message["call_id"], "output": message["content"]})
        elif "call" in message:
            call = message["call"]
            items.append({"type": "function_call", "call_id": call["id"], "name": call["name"], "arguments": call["arguments"]})
        else:
            items.append({"role": message["role"], "content": message["content"]})
    return items


def contextd_deltas(messages: list[dict]) -> list[state_pb2.Delta]:
    deltas, index = [], 0
    while index < len(messages):
        message = messages[index]
        if "call" in message:
            call = message["call"]
            round_ = ToolRound("", tool_call(call["id"], call["name"], call["arguments"])).answer(call["id"], text_payload(messages[index + 1]["content"]))
            deltas.append(round_.delta())
            index += 2
            continue
        deltas.append(append_user(user_text(message["content"])) if message["role"] == "user" else append_assistant(message["content"]))
        index += 1
    return deltas


class ContextdSystem:
    def __init__(self, name: str, address: str, conversation_id: str, messages: list[dict]) -> None:
        self.name = name
        self.client = Client(address)
        self.client.wait_ready()
        self.conversation_id = conversation_id
        system = conversation_pb2.CommitRequest(conversation_id=conversation_id, deltas=[state_pb2.Delta(append_messages=state_pb2.AppendMessages(segment=state_pb2.SEGMENT_SYSTEM, messages=[message_pb2.Message(role=message_pb2.ROLE_SYSTEM, parts=[message_pb2.Part(text=message_pb2.TextPart(text=SYSTEM))])]))])
        self.version = self.client.commit(system).version
        deltas = contextd_deltas(messages)
        for start in range(0, len(deltas), 400):
            self.version = self.client.commit(conversation_pb2.CommitRequest(conversation_id=conversation_id, expected_version=self.version, deltas=deltas[start : start + 400])).version
        self.request = compile_pb2.CompileRequest(
            conversation_id=conversation_id,
            budget=compile_pb2.Budget(max_tokens=BUDGET, estimator=compile_pb2.Estimator(kind=compile_pb2.ESTIMATOR_KIND_CHAR_FALLBACK)),
            render=compile_pb2.RenderOptions(provider=message_pb2.PROVIDER_OPENAI_CHAT, model="gpt-4o"),
        )

    async def turn(self, text: str) -> list:
        compiled = self.client.turn(self.request, self.version, [append_user(user_text(text))])
        self.version = compiled.committed_version
        return json.loads(compiled.rendered.json)["messages"]


class LangChainListSystem:
    name = "LangChain trim_messages, in-process list"

    def __init__(self, messages: list[dict]) -> None:
        self.history = langchain_messages(messages)

    async def turn(self, text: str) -> list:
        self.history.append(HumanMessage(text))
        return langchain_context(self.history)


class LangChainRedisSystem:
    name = "LangChain trim_messages over a Redis list"

    def __init__(self, client: redis.Redis, key: str, messages: list[dict]) -> None:
        self.redis, self.key = client, key
        self.redis.delete(key)
        pipeline = self.redis.pipeline()
        for entry in messages_to_dict(langchain_messages(messages)):
            pipeline.rpush(key, json.dumps(entry))
        pipeline.execute()

    async def turn(self, text: str) -> list:
        self.redis.rpush(self.key, json.dumps(messages_to_dict([HumanMessage(text)])[0]))
        history = messages_from_dict([json.loads(raw) for raw in self.redis.lrange(self.key, 0, -1)])
        return langchain_context(history)


class SdkSystem:
    def __init__(self, name: str, session, limit: int | None) -> None:
        self.name, self.session, self.limit = name, session, limit

    async def fill(self, messages: list[dict]) -> None:
        await self.session.clear_session()
        items = sdk_items(messages)
        for start in range(0, len(items), 500):
            await self.session.add_items(items[start : start + 500])

    async def turn(self, text: str) -> list:
        await self.session.add_items([{"role": "user", "content": text}])
        return trim_to_budget(await self.session.get_items(limit=self.limit))


async def run_size(size: int, profile: str, redis_address: str, sidecars: dict[str, str], redis_client: redis.Redis) -> list[tuple[str, float, float]]:
    messages = conversation(size, profile == "tools")
    tag = f"peers-{profile}-{size}-{os.getpid()}"
    systems = [
        ContextdSystem("contextd, in-memory store (one RPC)", sidecars["memory"], f"{tag}-memory", messages),
        ContextdSystem("contextd, Redis store (one RPC)", sidecars["redis"], f"{tag}-redis", messages),
        LangChainListSystem(messages),
        LangChainRedisSystem(redis_client, f"{tag}-langchain", messages),
        SdkSystem("Agents SDK SQLiteSession (:memory:)", SQLiteSession(tag), None),
        SdkSystem("Agents SDK RedisSession (get_items limit 40)", RedisSession(tag, redis_client=__import__("redis.asyncio", fromlist=["Redis"]).Redis.from_url(f"redis://{redis_address}")), 40),
    ]
    for system in systems:
        if isinstance(system, SdkSystem):
            await system.fill(messages)
    iterations = 40 if size >= 10_000 else 150
    samples: dict[str, list[float]] = {system.name: [] for system in systems}
    for iteration in range(iterations + 10):
        for system in systems:
            text = f"turn {iteration}: {KB}"
            started = time.perf_counter()
            context = await system.turn(text)
            elapsed = (time.perf_counter() - started) * 1000
            if not context:
                raise RuntimeError(f"{system.name}: empty context")
            if iteration >= 10:
                samples[system.name].append(elapsed)
    # The same turns again, each system in a block of its own (back to back): round-robin leaves
    # every system idle while the others run, and a call after an idle gap costs more
    # (bench:idle-gap), more so for a process that touches more code per call.
    blocks: dict[str, list[float]] = {system.name: [] for system in systems}
    for system in systems:
        for iteration in range(iterations + 10):
            started = time.perf_counter()
            context = await system.turn(f"block turn {iteration}: {KB}")
            elapsed = (time.perf_counter() - started) * 1000
            if not context:
                raise RuntimeError(f"{system.name}: empty context")
            if iteration >= 10:
                blocks[system.name].append(elapsed)
    rows = []
    for name, values in samples.items():
        values.sort()
        rows.append((name, statistics.median(values), values[int(len(values) * 0.99)], statistics.median(blocks[name])))
    for system in systems:
        if isinstance(system, ContextdSystem):
            system.client.close()
    return rows


async def main() -> None:
    redis_server, port = start_redis("contextd-peers-")
    redis_address = f"127.0.0.1:{port}"
    main_js = os.path.join(ROOT, "dist/src/main.js")
    processes = [redis_server]
    try:
        memory, memory_address = start_sidecar(main_js, "--max-messages", "100000")
        on_redis, redis_sidecar = start_sidecar(main_js, "--max-messages", "100000", "--redis-url", f"redis://{redis_address}")
        processes += [memory, on_redis]
        sidecars = {"memory": memory_address, "redis": redis_sidecar}
        client = redis.Redis(host="127.0.0.1", port=port)
        print(f"agent turn (append one ~1 KB user message, context for the next call, budget {BUDGET} tokens); load average {os.getloadavg()[0]:.2f}")
        results: dict[tuple[str, int], dict[str, tuple[float, float]]] = {}
        for profile in ["chat", "tools"]:
            for size in SIZES:
                rows = await run_size(size, profile, redis_address, sidecars, client)
                results[(profile, size)] = {name: (p50, p99, block_p50) for name, p50, p99, block_p50 in rows}
                print(f"\n{profile}, {size:,} stored messages (round-robin p50 / p99; back to back p50)")
                for name, p50, p99, block_p50 in rows:
                    print(f"  {name:48s} p50 {p50:8.3f} ms  p99 {p99:8.3f} ms  back to back p50 {block_p50:8.3f} ms")
        for mode, column in [("round-robin", 0), ("back to back", 2)]:
            print(f"\ntargets (issue 14), {mode}: contextd p50 <= Agents SDK RedisSession p50 at every size; <= LangChain in-process from 1,000 messages on")
            for (profile, size), table in results.items():
                sdk = table["Agents SDK RedisSession (get_items limit 40)"][column]
                langchain = table["LangChain trim_messages, in-process list"][column]
                for store in ["in-memory", "Redis"]:
                    ours = table[f"contextd, {store} store (one RPC)"][column]
                    verdict_sdk = "met" if ours <= sdk else "not met"
                    verdict_lc = "-" if size < 1000 else ("met" if ours <= langchain else "not met")
                    print(f"  {profile:5s} {size:>6,} {store:9s}: {ours:.3f} ms vs RedisSession {sdk:.3f} ms ({verdict_sdk}); vs LangChain in-process {langchain:.3f} ms ({verdict_lc})")
    finally:
        for process in processes:
            process.terminate()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
