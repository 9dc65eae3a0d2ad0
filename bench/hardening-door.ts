// npm run bench:hardening-door: health latency while a client does what issue 29 #8, #9 and #10
// did to a sidecar on a 512 MB heap. One sidecar process (`--max-old-space-size=512`); a worker
// thread asks Health/Check every 10 ms on its own connection (bench/health-prober.ts) and records
// how long each answer took, while this thread runs the attack. Prints, per attack, the outcome codes and the health latencies (median, worst) meanwhile.
// The tests (test/server/services/*-load.test.ts, ingestion-limits.test.ts) assert the outcomes
// and that health is answered; the figures are measured here, not asserted.
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { MessageSchema, Provider, Role } from "#gen/contextd/v1/message_pb";
import { DeltaSchema, Segment } from "#gen/contextd/v1/state_pb";
import { startBuiltSidecar } from "./bench-processes.js";

const sidecar = await startBuiltSidecar([], ["--max-old-space-size=512"]);
const transport = () => createGrpcTransport({ baseUrl: sidecar.url, readMaxBytes: 64 * 1024 * 1024, writeMaxBytes: 64 * 1024 * 1024 });
const attacker = { conversations: createClient(ConversationService, transport()), contexts: createClient(ContextService, transport()) };

const prober = new Worker(fileURLToPath(new URL("./health-prober.js", import.meta.url)), { workerData: { url: sidecar.url } });

async function withHealthProbe(run: () => Promise<string[]>): Promise<{ outcomes: string[]; medianMs: number; worstMs: number; checks: number }> {
  prober.postMessage("start");
  const outcomes = await run();
  prober.postMessage("stop");
  const [latencies] = (await once(prober, "message")) as [number[]];
  const sorted = [...latencies].sort((a, b) => a - b);
  return { outcomes, medianMs: sorted[Math.floor(sorted.length / 2)] ?? 0, worstMs: sorted.at(-1) ?? 0, checks: sorted.length };
}

const codeOf = (promise: Promise<unknown>) =>
  promise.then(
    () => "OK",
    (error: unknown) => Code[ConnectError.from(error).code]!,
  );
const summary = (outcomes: string[]) => [...new Set(outcomes)].map((code) => `${code} ×${outcomes.filter((entry) => entry === code).length}`).join(", ");

const rows: [string, Awaited<ReturnType<typeof withHealthProbe>>][] = [];

// #8: 8 readers of 16-byte slices of a 12 MB pretty-printed tool result.
const table = JSON.stringify(Array.from({ length: 135_000 }, (_, index) => ({ id: index, name: `row ${index}`, tags: ["a", "é"] })), null, 2);
await attacker.conversations.commit({
  conversationId: "bench/big",
  deltas: [
    create(DeltaSchema, {
      operation: {
        case: "appendMessages",
        value: {
          segment: Segment.HISTORY,
          messages: [
            create(MessageSchema, { id: "a0", role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: "call-1", name: "dump", arguments: { data: "{}" } } } }] }),
            create(MessageSchema, { id: "t0", role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: "call-1", name: "dump", payload: { data: table } } } }] }),
          ],
        },
      },
    }),
  ],
});
rows.push([
  "#8 ReadToolResult: 8 readers × 25 reads of 16 bytes, 12 MB result",
  await withHealthProbe(async () =>
    (
      await Promise.all(
        Array.from({ length: 8 }, async (_, reader) => {
          const codes: string[] = [];
          for (let read = 0; read < 25; read++) codes.push(await codeOf(attacker.conversations.readToolResult({ conversationId: "bench/big", toolCallId: "call-1", offset: BigInt(reader * 7 + read * 480_000), maxBytes: 16 })));
          return codes;
        }),
      )
    ).flat(),
  ),
]);

// #9: 9 deltas × 12,000 stream events in one commit (108,000 together), three times; then 5M tiny strings.
const event = new TextEncoder().encode('{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}');
const streams = Array.from({ length: 9 }, () =>
  create(DeltaSchema, { operation: { case: "appendProviderStream", value: { provider: Provider.OPENAI_CHAT, events: Array.from({ length: 12_000 }, () => event), interrupted: true } } }),
);
rows.push([
  "#9 commit of 9 × 12,000 stream events, 3 times",
  await withHealthProbe(async () => Promise.all(Array.from({ length: 3 }, () => codeOf(attacker.conversations.commit({ conversationId: "bench/stream", deltas: streams }))))),
]);
const tiny = Array.from({ length: 5_000_000 }, () => "a");
rows.push([
  "#9 commit of 5,000,000 one-byte ids",
  await withHealthProbe(async () => [await codeOf(attacker.conversations.commit({ conversationId: "bench/tiny", deltas: [create(DeltaSchema, { operation: { case: "removeMessages", value: { ids: tiny } } })] }))]),
]);

// #10: 6,000 tools × 20 practices with the tool guidance block, with a 300 ms deadline and without.
const toolDefinitions = Array.from({ length: 6_000 }, (_, tool) => ({
  name: `tool_${tool}`,
  description: `Does thing ${tool}.`,
  bestPractices: Array.from({ length: 20 }, (_, practice) => `Practice ${practice} of tool ${tool}: check the input first.`),
}));
const guided = { toolDefinitions: { toolDefinitions }, systemPrompt: { toolGuidance: true } };
rows.push(["#10 compile, 6,000 tools × 20 practices, no deadline", await withHealthProbe(async () => [await codeOf(attacker.contexts.compile(guided))])]);
rows.push(["#10 the same with a 300 ms deadline", await withHealthProbe(async () => [await codeOf(attacker.contexts.compile(guided, { timeoutMs: 300 }))])]);

console.log("| attack | outcome | health checks | health median | health worst |");
console.log("| --- | --- | ---: | ---: | ---: |");
for (const [name, row] of rows) console.log(`| ${name} | ${summary(row.outcomes)} | ${row.checks} | ${row.medianMs.toFixed(1)} ms | ${row.worstMs.toFixed(1)} ms |`);
console.log(`sidecar RSS at the end: ${(sidecar.rssBytes() / 1024 / 1024).toFixed(0)} MB`);
await prober.terminate();
await sidecar.stop();
