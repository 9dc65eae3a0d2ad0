// How long one compile or count at the documented limits (16 MiB request, 10,000 messages) holds
// the event loop, without a deadline and with a 100 ms one: the wall time of the call, and the
// longest the event loop went without a turn meanwhile (the longest gap between the ticks of a 1 ms
// interval timer: what a health check arriving at the worst moment waits). The compile is given the yield a server
// gives it (`setImmediate`). Run with `npm run bench:event-loop`; to measure another build, copy
// dist/bench/event-loop-block.js into its dist/bench and run it there.
import { setImmediate as nextTurn } from "node:timers/promises";
import { create } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import { Code } from "@connectrpc/connect";
import { CompileRequestSchema, EstimatorKind, RedactionPattern, type CompileRequest } from "#gen/contextd/v1/compile_pb";
import { MessageSchema, Provider, Role, type Message } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { compile } from "../src/core/compile/compile.js";
import type { CompileContext } from "../src/core/compile/compile-context.js";
import { DeadlineCheck } from "../src/core/compile/deadline.js";
import { createEstimator } from "../src/core/tokens/estimator.js";
import { RegexSearchThread } from "../src/application/regex-search-thread.js";
import { TokenCountCache } from "../src/core/tokens/token-count-cache.js";

const limit = 16 * 1024 * 1024;
let counter = 0;
const message = (role: Role, text: string, id = `m${++counter}`): Message => create(MessageSchema, { id, role, parts: [{ kind: { case: "text", value: { text } } }] });
const user = (text: string) => message(Role.USER, text);

function letters(length: number, seed: number): string {
  const bytes = Buffer.alloc(length);
  let state = seed;
  for (let index = 0; index < length; index++) bytes[index] = 97 + (((state = (Math.imul(state, 1103515245) + 12345) >>> 0) >>> 8) % 26);
  return bytes.toString("latin1");
}
const hex = (length: number) => Buffer.from(Buffer.alloc(length / 2).map((_, index) => (index * 37 + 11) & 0xff)).toString("hex");
const prose = (length: number, seed: number) => {
  const words = ["the", "agent", "called", "a", "tool", "and", "read", "context", "windows", "of", "long", "documents"];
  let state = seed;
  const out: string[] = [];
  let size = 0;
  while (size < length) {
    const word = words[(state = (Math.imul(state, 1103515245) + 12345) >>> 0) % words.length]!;
    out.push(word);
    size += word.length + 1;
  }
  return out.join(" ");
};
const history = (messages: Message[]) => ({ messages });
const tokenizer = { kind: EstimatorKind.TOKENIZER };

type Case = { name: string; run: (context: CompileContext) => Promise<unknown> };
const inPlace = (item: Case): Case => ({ name: item.name, run: (context) => item.run({ ...context, searchRegexOffThread: undefined }) });
const compileCase = (name: string, request: () => CompileRequest): Case => {
  let built: CompileRequest | undefined;
  return { name, run: (context) => compile((built ??= request()), context) };
};
const cases: Case[] = [
  compileCase("28 doubling templates over 1 KB", () =>
    create(CompileRequestSchema, {
      system: history([message(Role.SYSTEM, "x".repeat(1_000))]),
      formatters: Array.from({ length: 28 }, () => ({ segment: Segment.SYSTEM, kind: { case: "template" as const, value: { template: "{{content}}{{content}}" } } })),
    }),
  ),
  compileCase("{{v}} x 3.3M, 400-char value", () =>
    create(CompileRequestSchema, { deferredBlocks: [{ segment: Segment.MEMORY, messages: [user("{{v}}".repeat(limit / 5))] }], resolveVars: { v: "y".repeat(400) } }),
  ),
  compileCase("{{v}} x 3.3M, 1-char value", () => create(CompileRequestSchema, { deferredBlocks: [{ segment: Segment.MEMORY, messages: [user("{{v}}".repeat(limit / 5))] }], resolveVars: { v: "y" } })),
  compileCase("custom (a+)+$ over 16 MiB of a", () =>
    create(CompileRequestSchema, { history: history([user("a".repeat(limit))]), hooks: [{ kind: { case: "redaction", value: { customPatterns: [{ name: "x", regex: "(a+)+$" }] } } }] }),
  ),
  compileCase("5 built-ins over 16 MiB of hex", () =>
    create(CompileRequestSchema, {
      history: history([user(hex(limit))]),
      hooks: [{ kind: { case: "redaction", value: { patterns: [RedactionPattern.API_KEY, RedactionPattern.EMAIL, RedactionPattern.CARD_NUMBER, RedactionPattern.IP_ADDRESS, RedactionPattern.PHONE] } } }],
    }),
  ),
  // The same without the search thread: the patterns run on the event loop, one call each.
  inPlace(
    compileCase("  (the same, searched in place)", () =>
      create(CompileRequestSchema, {
        history: history([user(hex(limit))]),
        hooks: [{ kind: { case: "redaction", value: { patterns: [RedactionPattern.API_KEY, RedactionPattern.EMAIL, RedactionPattern.CARD_NUMBER, RedactionPattern.IP_ADDRESS, RedactionPattern.PHONE] } } }],
      }),
    ),
  ),
  compileCase("5 built-ins over 16 MiB, an email every 64 B", () =>
    create(CompileRequestSchema, {
      history: history([user(prose(limit, 5).replaceAll("context", "ab@example.com"))]),
      hooks: [{ kind: { case: "redaction", value: { patterns: [RedactionPattern.API_KEY, RedactionPattern.EMAIL, RedactionPattern.CARD_NUMBER, RedactionPattern.IP_ADDRESS, RedactionPattern.PHONE] } } }],
    }),
  ),
  compileCase("5 built-ins, 10,000 x 1.6 KB prose", () =>
    create(CompileRequestSchema, {
      history: history(Array.from({ length: 10_000 }, (_, index) => user(prose(1_600, index + 1)))),
      hooks: [{ kind: { case: "redaction", value: { patterns: [RedactionPattern.API_KEY, RedactionPattern.EMAIL, RedactionPattern.CARD_NUMBER, RedactionPattern.IP_ADDRESS, RedactionPattern.PHONE] } } }],
    }),
  ),
  compileCase("TOKENIZER, 16 MiB of =", () => create(CompileRequestSchema, { history: history([user("=".repeat(limit))]), budget: { estimator: tokenizer } })),
  compileCase("TOKENIZER, 16 MiB of random letters", () => create(CompileRequestSchema, { history: history([user(letters(limit, 3))]), budget: { estimator: tokenizer } })),
  compileCase("TOKENIZER, 10,000 x 1.6 KB prose", () =>
    create(CompileRequestSchema, { history: history(Array.from({ length: 10_000 }, (_, index) => user(prose(1_600, index + 7)))), budget: { estimator: tokenizer } }),
  ),
  compileCase("xml_tag + OpenAI render, 10,000 x 1.6 KB", () =>
    create(CompileRequestSchema, {
      history: history(Array.from({ length: 10_000 }, (_, index) => user(prose(1_600, index + 11)))),
      formatters: [{ segment: Segment.HISTORY, kind: { case: "xmlTag", value: { tag: "turn" } } }],
      render: { provider: Provider.OPENAI_CHAT, model: "m" },
    }),
  ),
  compileCase("tool arguments 8M deep", () =>
    create(CompileRequestSchema, {
      history: history([create(MessageSchema, { id: "a1", role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: "c1", name: "f", arguments: { data: "[".repeat(limit / 2) + "]".repeat(limit / 2) } } } }] })]),
    }),
  ),
  {
    name: "CountTokens, 16 MiB of random letters",
    async run(context) {
      // What the CountTokens service does.
      const clock = new DeadlineCheck(context.deadline, context.now, context.yieldToEventLoop);
      const estimator = await createEstimator(create(CompileRequestSchema, { budget: { estimator: tokenizer } }).budget!.estimator, Provider.UNSPECIFIED, "estimator", context.tokenCounts, "", clock);
      return context.tokenCounts.countAll(estimator, [user(letters(limit, 5))], clock);
    },
  },
];

// What a server gives every compile: built-in patterns over long texts are searched on this thread.
const regexSearch = new RegexSearchThread();

function context(deadlineMs?: number): CompileContext {
  return {
    searchRegexOffThread: regexSearch.search,
    randomId: () => `msg_${(++counter).toString(16).padStart(32, "0")}`,
    now: Date.now,
    monotonicNs: () => process.hrtime.bigint(),
    // A fresh cache: nothing is counted from an earlier run.
    tokenCounts: new TokenCountCache(),
    yieldToEventLoop: () => nextTurn(),
    deadline: deadlineMs === undefined ? undefined : { atMs: Date.now() + deadlineMs },
  };
}

/** The longest gap between two ticks of a 1 ms interval timer while `run` runs. */
async function timed(run: () => Promise<unknown>): Promise<{ ms: number; stallMs: number; outcome: string }> {
  let lastTick = 0;
  let longestGap = 0;
  const tick = () => {
    const now = performance.now();
    if (lastTick > 0) longestGap = Math.max(longestGap, now - lastTick);
    lastTick = now;
  };
  const timer = setInterval(tick, 1);
  // The first tick, so gaps are measured from before the run starts.
  while (lastTick === 0) await new Promise((resolve) => setTimeout(resolve, 1));
  longestGap = 0;
  const started = process.hrtime.bigint();
  let outcome = "ok";
  try {
    await run();
  } catch (error) {
    outcome = error instanceof ConnectError ? Code[error.code] : String(error);
  }
  const ms = Number(process.hrtime.bigint() - started) / 1e6;
  tick();
  clearInterval(timer);
  return { ms, stallMs: longestGap, outcome };
}

const figures = (run: { ms: number; stallMs: number; outcome: string }) => `${`${run.ms.toFixed(0)} ms`.padStart(10)}${`${run.stallMs.toFixed(0)} ms`.padStart(10)}  ${run.outcome.padEnd(19)}`;
console.log(`${"".padEnd(42)}${"no deadline".padEnd(41)}100 ms deadline`);
console.log(`${"case".padEnd(42)}${"call".padStart(10)}${"stall".padStart(10)}  ${"outcome".padEnd(19)}${"call".padStart(10)}${"stall".padStart(10)}  outcome`);
for (const item of cases) {
  // Built (and the encodings loaded) before timing: building a 16 MiB request is the caller's time.
  await timed(() => item.run(context(0))).catch(() => undefined);
  const free = await timed(() => item.run(context()));
  const bounded = await timed(() => item.run(context(100)));
  console.log(`${item.name.padEnd(42)}${figures(free)}${figures(bounded)}`);
}
await regexSearch.close();
