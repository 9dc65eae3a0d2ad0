"""The Python client against a real sidecar: usage reports recorded once per report id, read back per conversation and per tenant."""

import asyncio
import uuid

from contextd.client import Client
from contextd.client.aio import AsyncClient
from contextd.v1 import compile_pb2, context_service_pb2, message_pb2, usage_ledger_pb2


def report(conversation_id: str, n: int) -> context_service_pb2.ReportUsageRequest:
    return context_service_pb2.ReportUsageRequest(
        conversation_id=conversation_id,
        turn_id=f"turn-{n}",
        report_id=f"response-{n}",
        provider=message_pb2.PROVIDER_GEMINI,
        model="gemini-2.5-pro",
        estimator=compile_pb2.ESTIMATOR_KIND_CHAR_FALLBACK,
        estimated_tokens=400 * n,
        actual_input_tokens=420 * n,
        cached_input_tokens=100 * n,
        output_tokens=30 * n,
    )


def test_usage_ledger_counts_a_report_once_and_reads_it_per_conversation_and_tenant(sidecar):
    tenant = "py-ledger-" + uuid.uuid4().hex
    conversation = tenant + "/chat"
    with Client(sidecar.address) as client:
        client.wait_ready(timeout=10)
        first = client.report_usage(report(conversation, 1))
        assert not first.duplicate and first.conversation_totals.reports == 1
        client.report_usage(report(conversation, 2))
        retry = client.report_usage(report(conversation, 2))
        assert retry.duplicate and retry.conversation_totals.reports == 2
        ledger = client.get_usage(conversation)
        page = client.list_tenant_usage(usage_ledger_pb2.ListTenantUsageRequest(tenant=tenant))
    assert (ledger.totals.reports, ledger.totals.input_tokens, ledger.totals.cached_input_tokens, ledger.totals.output_tokens, ledger.totals.compiled_tokens) == (2, 1260, 300, 90, 1200)
    assert [(entry.turn_id, entry.report_id, entry.model) for entry in ledger.entries] == [("turn-1", "response-1", "gemini-2.5-pro"), ("turn-2", "response-2", "gemini-2.5-pro")]
    assert page.tenant == tenant and page.totals.reports == 2
    assert [entry.conversation_id for entry in page.conversations] == [conversation]

    async def read_async():
        async with AsyncClient(sidecar.address) as aclient:
            await aclient.wait_ready(timeout=10)
            await aclient.report_usage(report(conversation, 3))
            return await aclient.get_usage(conversation)

    assert asyncio.run(read_async()).totals.reports == 3
