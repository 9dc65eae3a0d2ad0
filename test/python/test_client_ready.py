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



def test_wait_ready_names_why_the_sidecar_is_not_serving():
    # A sidecar whose Redis does not listen: its health answer says why, and the clients' readiness
    # timeout quotes it instead of a bare NOT_SERVING.
    from conftest import Sidecar

    unreachable = Sidecar("--redis-url", f"redis://127.0.0.1:{free_port()}", "--health-interval-ms", "100")
    fast = RetryPolicy(initial_backoff=0.02, max_backoff=0.05)
    try:
        with Client(unreachable.address, retry=fast) as client:
            with pytest.raises(DeadlineExceeded, match=r"health is NOT_SERVING: .*(ECONNREFUSED|connect|unavailable)"):
                client.wait_ready(timeout=0.5)

        async def main() -> None:
            async with AsyncClient(unreachable.address, retry=fast) as client:
                with pytest.raises(DeadlineExceeded, match=r"health is NOT_SERVING: .*(ECONNREFUSED|connect|unavailable)"):
                    await client.wait_ready(timeout=0.5)

        asyncio.run(main())
    finally:
        unreachable.stop()
