"""The processes the Python benches run beside the sidecar: a throwaway redis-server and contextd
itself from the built dist/, on free loopback ports (bench:peers, bench:get-items)."""

from __future__ import annotations

import json
import socket
import subprocess
import tempfile
import time

import redis


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_redis(prefix: str) -> tuple[subprocess.Popen, int]:
    """A redis-server without persistence in a temporary directory; returns once it answers PING."""
    port = free_port()
    directory = tempfile.mkdtemp(prefix=prefix)
    process = subprocess.Popen(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", directory], stdout=subprocess.DEVNULL)
    for _ in range(100):
        try:
            redis.Redis(host="127.0.0.1", port=port).ping()
            return process, port
        except redis.ConnectionError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("redis-server did not answer PING within 5 s")


def start_sidecar(main_js: str, *arguments: str) -> tuple[subprocess.Popen, str]:
    """contextd on a free port (`--log-level info`, so it announces its address); its process and address."""
    process = subprocess.Popen(["node", main_js, "--port", "0", "--log-level", "info", *arguments], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    for line in process.stdout:
        if "contextd listening" in line:
            return process, json.loads(line)["address"]
    raise RuntimeError("contextd did not start")
