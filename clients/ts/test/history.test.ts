// The client against a real sidecar on a real port, over both protocols: Fork, getState at a past
// version and Rewind (docs/history.md).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Client, Code, ContextdError, VersionConflictError, appendUser } from "@contextd/client";
import { freshId, startSidecar, type Sidecar } from "./sidecar.ts";

let sidecar: Sidecar;
const clients: Client[] = [];

before(async () => {
  sidecar = await startSidecar();
});
after(async () => {
  for (const client of clients) client.close();
  await sidecar.stop();
});

for (const protocol of ["grpc", "connect"] as const) {
  describe(`over ${protocol}`, () => {
    test("forks at a past version, reads it with atVersion, and rewinds to it", async () => {
      const client = new Client({ address: sidecar.address, protocol });
      clients.push(client);
      const conversationId = freshId("ts-history");
      for (const [version, text] of ["plan a trip", "to Oslo", "no, to Tokyo"].entries()) {
        await client.commit({ conversationId, expectedVersion: BigInt(version), deltas: [appendUser(text)] });
      }
      const past = (await client.getState({ conversationId, atVersion: 2n })).state!;
      assert.deepEqual([past.version, past.history.length], [2n, 2]);

      const forked = await client.fork({ conversationId, atVersion: 2n, newConversationId: `${conversationId}-branch` });
      assert.deepEqual([forked.version, forked.forkedFrom?.conversationId, forked.forkedFrom?.version], [1n, conversationId, 2n]);
      const branch = (await client.getState({ conversationId: `${conversationId}-branch` })).state!;
      assert.deepEqual(branch.history.map((message) => message.id), past.history.map((message) => message.id));
      await assert.rejects(client.fork({ conversationId, newConversationId: `${conversationId}-branch` }), (error: unknown) => error instanceof ContextdError && error.code === Code.AlreadyExists);

      const rewound = await client.rewind({ conversationId, toVersion: 2n, expectedVersion: 3n });
      assert.deepEqual([rewound.version, rewound.replayed], [4n, false]);
      assert.deepEqual((await client.getState({ conversationId })).state!.history.map((message) => message.id), past.history.map((message) => message.id));
      await assert.rejects(client.rewind({ conversationId, toVersion: 1n, expectedVersion: 3n }), VersionConflictError);
      await assert.rejects(client.getState({ conversationId, atVersion: 9n }), (error: unknown) => error instanceof ContextdError && error.code === Code.OutOfRange);
    });
  });
}
