// The worker of bench/encryption-thread.ts: opens chunks of sealed values with the store's own
// cipher (AtRestCipher.opener) and sends their plaintexts back as one buffer and its end offsets.
import { parentPort, workerData } from "node:worker_threads";
import { AtRestCipher, type AtRestKey } from "../src/store/at-rest-encryption.js";

/** A chunk of sealed values of one conversation: one buffer, value `index` from offsets[index] to offsets[index + 1]. */
export interface SealedChunk {
  id: number;
  conversationId: string;
  bytes: ArrayBuffer;
  offsets: Uint32Array;
}

const cipher = new AtRestCipher((workerData as { keys: AtRestKey[] }).keys.map((key) => ({ ...key, key: Buffer.from(key.key) })));
parentPort!.on("message", ({ id, conversationId, bytes, offsets }: SealedChunk) => {
  const input = Buffer.from(bytes);
  const open = cipher.opener(conversationId, "message");
  const plaintexts: Buffer[] = [];
  for (let index = 0; index + 1 < offsets.length; index++) plaintexts.push(open(input.subarray(offsets[index], offsets[index + 1]), () => `value ${index} of chunk ${id}`));
  const ends = new Uint32Array(plaintexts.length);
  const out = Buffer.allocUnsafeSlow(plaintexts.reduce((sum, plaintext) => sum + plaintext.length, 0));
  let at = 0;
  plaintexts.forEach((plaintext, index) => {
    at += plaintext.copy(out, at);
    ends[index] = at;
  });
  parentPort!.postMessage({ id, bytes: out.buffer, ends }, [out.buffer, ends.buffer]);
});
