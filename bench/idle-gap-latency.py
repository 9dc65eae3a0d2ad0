"""`npm run bench:idle-gap`: what a turn costs when the agent pauses between calls.

bench:peers runs its systems round-robin, so between two contextd turns the five other systems
run for several milliseconds, and contextd's turn at 100 stored messages came out at ~3.2 ms
there while the same turn back to back takes ~1.3 ms. This prints, in one run, the p50 of the
same Python grpcio turn (peers.ContextdSystem: one Compile with commit.deltas, 100 stored ~1 KB
messages, budget 8,000 tokens, rendered for OpenAI Chat) after idle gaps of 0, 1, 3 and 10 ms,
beside the do-nothing node:http2 responder answering a compile-sized (34.6 KB) message after the
same gaps: the part of the penalty any process on this machine pays for having slept.
"""

import asyncio
import os
import statistics
import sys
import time

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import importlib.util  # noqa: E402

import peers  # noqa: E402  (the bench's own ContextdSystem and conversation)

# The process starters of bench:python-health (a file name with dashes, so loaded by path).
_spec = importlib.util.spec_from_file_location("python_health_latency", os.path.join(os.path.dirname(os.path.abspath(__file__)), "python-health-latency.py"))
_health = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_health)
start_sidecar, start_do_nothing = _health.start_sidecar, _health.start_do_nothing

GAPS = [0.0, 0.001, 0.003, 0.010]
TURNS = int(os.environ.get("BENCH_IDLE_TURNS", "300"))


def p50_after_gaps(call) -> list[float]:
    for _ in range(100):
        call()
    results = []
    for gap in GAPS:
        samples = []
        for _ in range(TURNS):
            if gap:
                time.sleep(gap)
            started = time.perf_counter()
            call()
            samples.append((time.perf_counter() - started) * 1000)
        results.append(statistics.median(samples))
    return results


def main() -> None:
    sidecar, address = start_sidecar()
    responder, responder_address = start_do_nothing()
    try:
        system = peers.ContextdSystem("contextd", address, f"idle-gap-{time.time_ns()}", peers.conversation(100, False))
        turn = lambda: asyncio.run(system.turn(peers.KB))  # noqa: E731
        channel = grpc.insecure_channel(responder_address)
        sized = channel.unary_unary("/bench.Floor/bytes/35430", request_serializer=lambda body: body, response_deserializer=lambda body: body)
        bare = lambda: sized(b"x" * 1000)  # noqa: E731
        print(f"p50 after an idle gap (ms), {TURNS} calls each; load average {os.getloadavg()[0]:.2f}")
        print("gap            " + "".join(f"{gap * 1000:>8.0f} ms" for gap in GAPS))
        for name, call in (("contextd turn", turn), ("bare node:http2", bare)):
            print(f"{name:<15}" + "".join(f"{value:>8.3f} ms" for value in p50_after_gaps(call)))
        channel.close()
    finally:
        sidecar.terminate()
        responder.terminate()


if __name__ == "__main__":
    main()
