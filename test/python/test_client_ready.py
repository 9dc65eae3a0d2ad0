"""The clients against a real sidecar: readiness."""

import asyncio

import pytest

from conftest import free_port
from contextd.client import AsyncClient, Client, DeadlineExceeded, RetryPolicy


def test_sync_client_waits_until_ready(sidecar):
    with Client(sidecar.address) as client:
        client.wait_ready(timeout=10)


def test_async_client_waits_until_ready(sidecar):
    async def main() -> None:
        async with AsyncClient(sidecar.address) as client:
            await client.wait_ready(timeout=10)

    asyncio.run(main())


def test_wait_ready_gives_up_after_its_timeout():
    fast = RetryPolicy(initial_backoff=0.02, max_backoff=0.05)
    with Client(f"127.0.0.1:{free_port()}", retry=fast) as client:
        with pytest.raises(DeadlineExceeded, match="not ready"):
            client.wait_ready(timeout=0.3)

