// The client's usage ledger calls against a real sidecar, over both protocols: a report recorded
// once per report id (a retry is answered as one), read back per conversation and per tenant.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Client } from "@contextd/client";
import { EstimatorKind, Provider } from "@contextd/client/v1";
import { freshId, startSidecar, type Sidecar } from "./sidecar.ts";

let sidecar: Sidecar;
before(async () => {
  sidecar = await startSidecar();
});
after(async () => {
  await sidecar.stop();
});

for (const protocol of ["grpc", "connect"] as const) {
  describe(`usage ledger over ${protocol}`, () => {
    test("counts a report once, reads its entries and totals, and the tenant's", async () => {
      const client = new Client({ address: sidecar.address, protocol });
      try {
        const tenant = freshId(`ts-ledger-${protocol}`).replaceAll("/", "-");
        const conversationId = `${tenant}/chat`;
        const report = (n: number) => ({
          conversationId,
          turnId: `turn-${n}`,
          reportId: `response-${n}`,
          provider: Provider.ANTHROPIC_MESSAGES,
          model: "claude-sonnet-4",
          estimator: EstimatorKind.TOKENIZER,
          estimatedTokens: BigInt(800 * n),
          actualInputTokens: BigInt(900 * n),
          cachedInputTokens: BigInt(600 * n),
          outputTokens: BigInt(40 * n),
        });
        assert.equal((await client.reportUsage(report(1))).duplicate, false);
        await client.reportUsage(report(2));
        const retry = await client.reportUsage(report(2));
        assert.equal(retry.duplicate, true);
        assert.equal(retry.conversationTotals?.reports, 2n);
        const ledger = await client.getUsage(conversationId);
        assert.deepEqual(
          [ledger.totals?.reports, ledger.totals?.inputTokens, ledger.totals?.cachedInputTokens, ledger.totals?.outputTokens, ledger.totals?.compiledTokens],
          [2n, 2700n, 1800n, 120n, 2400n],
        );
        assert.deepEqual(ledger.entries.map((entry) => entry.turnId), ["turn-1", "turn-2"]);
        const page = await client.listTenantUsage({ tenant });
        assert.equal(page.totals?.reports, 2n);
        assert.deepEqual(page.conversations.map((entry) => entry.conversationId), [conversationId]);
      } finally {
        client.close();
      }
    });
  });
}
