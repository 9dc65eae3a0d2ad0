// waitReady against a real sidecar whose Redis does not listen: the timeout names the cause the
// sidecar gives in its health answer, over both protocols.
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { after, before, test } from "node:test";
import { Client, Code, ContextdError, DEFAULT_RETRY_POLICY } from "@contextd/client";
import { startSidecar, type Sidecar } from "./sidecar.ts";

let sidecar: Sidecar;
before(async () => {
  const port = await new Promise<number>((resolve) => {
    const server = createServer().listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
  sidecar = await startSidecar(["--redis-url", `redis://127.0.0.1:${port}`, "--health-interval-ms", "100"]);
});
after(async () => {
  await sidecar.stop();
});

for (const protocol of ["grpc", "connect"] as const) {
  test(`over ${protocol}: waitReady's timeout says why health is NOT_SERVING`, async () => {
    const client = new Client({ address: sidecar.address, protocol, retry: { ...DEFAULT_RETRY_POLICY, initialBackoffMs: 20, maxBackoffMs: 50 } });
    try {
      const failure = await client.waitReady(500).catch((thrown: unknown) => thrown);
      assert.ok(failure instanceof ContextdError, String(failure));
      assert.equal(failure.code, Code.DeadlineExceeded);
      assert.match(failure.message, /health is NOT_SERVING: .*(ECONNREFUSED|connect|unavailable)/i);
    } finally {
      client.close();
    }
  });
}
