"""`npm run bench:get-items`: the Agents SDK session read `get_items(limit=10)` on a session of
1,000 stored items, contextd's `ContextdSession` (in-memory and Redis store) beside the SDK's own
`SQLiteSession` (":memory:") and `RedisSession`, and the RPC floor it is measured against.

Each item is a ~1 KB user or assistant message. Per system: fill the session, 20 warm-up reads,
then BENCH_GET_ITEMS_READS reads (default 300) back to back; p50 and p99 in ms. Printed beside:

- the RPC floor: the smallest contextd round trip from the same client, `get_state` of a
  conversation never written (one unary gRPC call, nothing to read), and the same call through
  `asyncio.to_thread`, the hop every `ContextdSession` call takes (as `SQLiteSession`'s do);
- `get_items()` without a limit (every item: the history in pages), what `limit=10` used to cost
  when every read fetched the whole state;
- the target of issue 28: `get_items(limit=10)` within the floor (with the thread hop) + 1 ms.

Needs redis-server on PATH and bench/requirements-peers.txt (the npm script installs them).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
import uuid

import redis
import redis.asyncio
from agents import SQLiteSession
from agents.extensions.memory.redis_session import RedisSession

from bench_processes import start_redis, start_sidecar
from contextd.client import Client
from contextd.client.openai_agents import ContextdSession
from contextd.v1 import conversation_service_pb2 as conversation_pb2

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ITEMS = int(os.environ.get("BENCH_GET_ITEMS_SIZE", "1000"))
READS = int(os.environ.get("BENCH_GET_ITEMS_READS", "300"))
WARMUP = 20
KB = ("The agent reads the repository, plans the change, runs the tests and reports what it found. " * 12)[:1000]


def items() -> list[dict]:
    return [{"role": "user" if index % 2 == 0 else "assistant", "content": f"{index} {KB}"} for index in range(ITEMS)]


async def measure(read, reads: int = READS) -> tuple[float, float]:
    for _ in range(WARMUP):
        await read()
    samples = []
    for _ in range(reads):
        started = time.perf_counter()
        await read()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.99))]


async def fill(session) -> None:
    await session.clear_session()
    stored = items()
    for start in range(0, len(stored), 250):
        await session.add_items(stored[start : start + 250])


async def main() -> None:
    redis_server, port = start_redis("contextd-get-items-")
    main_js = os.path.join(ROOT, "dist/src/main.js")
    processes = [redis_server]
    try:
        memory, memory_address = start_sidecar(main_js)
        on_redis, redis_address = start_sidecar(main_js, "--redis-url", f"redis://127.0.0.1:{port}")
        processes += [memory, on_redis]
        print(f"get_items(limit=10) on a session of {ITEMS:,} items of ~1 KB, {READS} reads back to back; load average {os.getloadavg()[0]:.2f}")
        rows: list[tuple[str, float, float]] = []
        floors: dict[str, float] = {}
        for store, address in [("in-memory", memory_address), ("Redis", redis_address)]:
            with Client(address) as client:
                client.wait_ready()
                empty = conversation_pb2.GetStateRequest(conversation_id=f"never-written-{uuid.uuid4().hex}")

                async def floor_direct() -> None:
                    client.get_state(empty)

                async def floor_thread() -> None:
                    await asyncio.to_thread(client.get_state, empty)

                p50, p99 = await measure(floor_direct)
                rows.append((f"RPC floor, {store} store: get_state of an empty conversation", p50, p99))
                p50, p99 = await measure(floor_thread)
                floors[store] = p50
                rows.append((f"RPC floor, {store} store, through asyncio.to_thread", p50, p99))
                session = ContextdSession(f"get-items-{uuid.uuid4().hex}", client)
                await fill(session)
                assert len(await session.get_items(limit=10)) == 10
                p50, p99 = await measure(lambda: session.get_items(limit=10))
                rows.append((f"ContextdSession, {store} store: get_items(limit=10)", p50, p99))
                p50, p99 = await measure(lambda: session.get_items(), reads=max(20, READS // 10))
                rows.append((f"ContextdSession, {store} store: get_items() (all {ITEMS:,})", p50, p99))
        sqlite = SQLiteSession(f"bench-{uuid.uuid4().hex}")
        await fill(sqlite)
        p50, p99 = await measure(lambda: sqlite.get_items(limit=10))
        rows.append(("Agents SDK SQLiteSession (:memory:): get_items(limit=10)", p50, p99))
        redis_session = RedisSession(f"bench-{uuid.uuid4().hex}", redis_client=redis.asyncio.Redis.from_url(f"redis://127.0.0.1:{port}"))
        await fill(redis_session)
        p50, p99 = await measure(lambda: redis_session.get_items(limit=10))
        rows.append(("Agents SDK RedisSession: get_items(limit=10)", p50, p99))
        for name, p50, p99 in rows:
            print(f"  {name:66s} p50 {p50:7.3f} ms  p99 {p99:7.3f} ms")
        table = {name: p50 for name, p50, _ in rows}
        print("\ntarget (issue 28): get_items(limit=10) within the RPC floor (through the thread hop) + 1 ms")
        for store in ["in-memory", "Redis"]:
            ours = table[f"ContextdSession, {store} store: get_items(limit=10)"]
            print(f"  {store:9s}: {ours:.3f} ms vs floor {floors[store]:.3f} + 1 ms ({'met' if ours <= floors[store] + 1 else 'not met'})")
    finally:
        for process in processes:
            process.terminate()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
