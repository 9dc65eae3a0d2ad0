"""`npm run bench:python-health`: what a Python grpcio client pays for one Health.Check.

Issue 14 asked why a Python grpcio client paid ~1.06 ms per health check against contextd while
the same client paid ~0.27 ms against a Python gRPC server and ~0.31 ms against a bare Node HTTP
server. This prints, in one run and from one client, the p50/p99 of sequential checks against:
the sidecar (a child process from dist/, in-memory store), a Python grpcio server in this process
(its own thread pool), and the do-nothing node:http2 responder (the floor under any Node sidecar).
"""

import json
import os
import statistics
import subprocess
import sys
import time
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKS = int(os.environ.get("BENCH_CHECKS", "3000"))


def measure(target: str) -> tuple[float, float]:
    channel = grpc.insecure_channel(target)
    stub = health_pb2_grpc.HealthStub(channel)
    request = health_pb2.HealthCheckRequest()
    for _ in range(300):
        stub.Check(request)
    samples = []
    for _ in range(CHECKS):
        started = time.perf_counter()
        stub.Check(request)
        samples.append((time.perf_counter() - started) * 1000)
    channel.close()
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99)]


def start_sidecar() -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        ["node", os.path.join(ROOT, "dist/src/main.js"), "--port", "0", "--log-level", "info"],
        stdout=subprocess.PIPE, text=True,
    )
    for line in process.stdout:
        entry = json.loads(line)
        if entry.get("msg") == "contextd listening":
            return process, entry["address"]
    raise RuntimeError("sidecar did not start")


def start_do_nothing() -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(["node", os.path.join(ROOT, "dist/bench/do-nothing-grpc-responder.js")], stdout=subprocess.PIPE, text=True)
    return process, f"127.0.0.1:{process.stdout.readline().strip()}"


def main() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    sidecar, sidecar_address = start_sidecar()
    floor, floor_address = start_do_nothing()
    try:
        print(f"Health.Check from a Python grpcio {grpc.__version__} client, {CHECKS} sequential calls, load average {os.getloadavg()[0]:.2f}")
        for name, target in [("contextd", sidecar_address), ("Python grpcio server", f"127.0.0.1:{port}"), ("do-nothing node:http2 responder", floor_address)]:
            p50, p99 = measure(target)
            print(f"  {name:34s} p50 {p50:.3f} ms  p99 {p99:.3f} ms")
    finally:
        sidecar.terminate()
        floor.terminate()
        server.stop(0)


if __name__ == "__main__":
    sys.exit(main())
