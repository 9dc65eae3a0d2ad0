import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { BudgetStrategy, CompileRequestSchema, EstimatorKind, RenderOptionsSchema, type CompiledPayload, type CompileResult } from "#gen/contextd/v1/compile_pb";
import { SummarizeResponseSchema } from "#gen/contextd/v1/context_service_pb";
import { ImageDetail, Provider, Role, type Message, type Part } from "#gen/contextd/v1/message_pb";
import { analyzeToolRounds } from "../../src/core/model/tool-rounds.js";
import { compile } from "../../src/core/compile/compile.js";
import { renderRequest } from "../../src/core/providers/render.js";
import { responsesPairs } from "../../src/core/providers/openai-responses/reasoning-pairs.js";
import { testContext } from "../core/compile-context.js";
import { assistant, call, definition, developer, image, message, payload, reasoning, result, system, text, tool, user } from "./build-messages.js";

/** mulberry32: a tiny seeded PRNG, so every failure reproduces from its seed. */
function prng(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const providers = [Provider.OPENAI_CHAT, Provider.OPENAI_RESPONSES, Provider.ANTHROPIC_MESSAGES, Provider.GEMINI];
const reasoningProviders = [Provider.OPENAI_RESPONSES, Provider.ANTHROPIC_MESSAGES, Provider.GEMINI];
const tools = ["search", "read_file", "get_weather"];

/** A random valid conversation: parallel calls, images, reasoning, errors, trimming, open tails. */
function randomPayload(random: () => number, seed: number): CompiledPayload {
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
  let counter = 0;
  const id = (prefix: string) => `${prefix}${seed}_${counter++}`;
  const history: Message[] = [];
  const turns = 1 + Math.floor(random() * 8);
  for (let turn = 0; turn < turns; turn++) {
    const userParts: Part[] = [text(`question ${turn} <|endoftext|>`)];
    if (random() < 0.2) userParts.push(image({ url: "https://example.com/a.png", detail: ImageDetail.LOW }));
    history.push(user(id("u"), ...userParts));
    const rounds = Math.floor(random() * 3);
    for (let round = 0; round < rounds; round++) {
      const calls = 1 + Math.floor(random() * 3);
      const parts: Part[] = [];
      if (random() < 0.5) {
        const provider = pick(reasoningProviders);
        parts.push(reasoning(provider, { text: "thinking", signature: id("sig"), itemId: id("rs_"), redactedData: random() < 0.3 ? id("enc") : "" }));
      }
      if (random() < 0.4) parts.push(text("let me check", random() < 0.3 ? id("tsig") : ""));
      const callIds: string[] = [];
      const names = new Map<string, string>();
      for (let index = 0; index < calls; index++) {
        const callId = id("call_");
        callIds.push(callId);
        names.set(callId, pick(tools));
        parts.push(
          call(callId, names.get(callId)!, JSON.stringify({ q: `x${index}` }), {
            signature: random() < 0.3 ? id("gsig") : "",
            itemId: random() < 0.5 ? id("fc_") : "",
          }),
        );
      }
      history.push(assistant(id("a"), ...parts));
      // Results in one TOOL message or one per call, in a random order.
      const results = callIds
        .map((callId) =>
          result(
            callId,
            // Hosts often leave the result's name empty; Gemini then takes the call's.
            random() < 0.5 ? names.get(callId)! : "",
            random() < 0.5 ? { text: "ok" } : { data: '{"value": 1}' },
            { isError: random() < 0.2, contentParts: random() < 0.2 ? [image({ data: new Uint8Array([1, 2, 3]), mimeType: "image/png" })] : [] },
          ),
        )
        .sort(() => random() - 0.5);
      if (random() < 0.5) history.push(tool(id("t"), ...results));
      else for (const part of results) history.push(tool(id("t"), part));
    }
    if (random() < 0.7) history.push(assistant(id("a"), `answer ${turn}`));
  }
  // Trimmed history: drop a prefix of whole units, as the budget does.
  const units = analyzeToolRounds(history, { allowOpenTail: true }).units;
  const kept = random() < 0.4 ? history.slice(units[Math.floor(random() * units.length)]!.start) : history;
  // Open round at the tail: a new round with some results still missing.
  if (random() < 0.3) {
    const first = id("call_");
    const second = id("call_");
    kept.push(assistant(id("a"), call(first, "search"), call(second, "search")));
    if (random() < 0.5) kept.push(tool(id("t"), result(first, "search", { text: "partial" })));
  }
  return payload({
    system: random() < 0.8 ? [message(id("s"), Role.SYSTEM, [text("system prompt")], random() < 0.5 ? { cacheTtl: "5m" } : {}), ...(random() < 0.5 ? [developer(id("d"), "dev")] : [])] : [],
    history: kept,
    memory: random() < 0.4 ? [system(id("m"), "memory note")] : [],
    scratch: random() < 0.4 ? [system(id("x"), "time: now")] : [],
    toolDefinitions: tools.map((name) => definition(name, `${name} tool`, { type: "object", properties: {} })),
  });
}

/**
 * True when `error` is the documented refusal of a body whose first turn the provider does not
 * take: Anthropic's first turn must be the user's, Gemini's must not be a function call turn.
 */
function refusedFirstTurn(p: CompiledPayload, provider: Provider, error: unknown): boolean {
  const first = [...p.history, ...p.memory, ...p.scratch].find((m) => m.role !== Role.SYSTEM && m.role !== Role.DEVELOPER);
  const message = (error as Error).message;
  if (first?.role === Role.USER) return false;
  if (provider === Provider.ANTHROPIC_MESSAGES) return message.includes("provider rule anthropic.first_turn_user violated");
  if (provider === Provider.GEMINI) return message.includes("provider rule gemini.function_call_turn_position violated");
  return false;
}

function render(p: CompiledPayload, provider: Provider): string {
  return new TextDecoder().decode(renderRequest(p, create(RenderOptionsSchema, { provider, model: "m" })).json);
}

describe("fuzzed conversations", () => {
  it("always render to valid bodies for every provider", () => {
    for (let seed = 1; seed <= 300; seed++) {
      const p = randomPayload(prng(seed), seed);
      if (p.history.length === 0) continue;
      for (const provider of providers) {
        let body: string;
        try {
          body = render(p, provider);
        } catch (error) {
          // Trimmed at any unit (as HISTORY_START_ANY keeps it), history may start on the
          // assistant's turn: Anthropic refuses that body, Gemini one that starts on a call.
          if (refusedFirstTurn(p, provider, error)) continue;
          throw new Error(`seed ${seed}, ${Provider[provider]}: ${(error as Error).message}`);
        }
        // Every call id reaches the body (these ids are valid for every provider, so byte for
        // byte); text signatures only Gemini's, call item ids only the Responses body, and there
        // only beside the reasoning item of the same message (reasoning-pairs.ts).
        for (const m of p.history) {
          const pairs = responsesPairs(m);
          m.parts.forEach((part, index) => {
            const kind = part.kind;
            if (kind.case === "toolCall") {
              expect(body).toContain(JSON.stringify(kind.value.id));
              if (kind.value.itemId !== "") expect(body.includes(JSON.stringify(kind.value.itemId))).toBe(provider === Provider.OPENAI_RESPONSES && pairs.itemIds.has(index));
            }
            if (kind.case === "text" && kind.value.signature !== "") expect(body.includes(JSON.stringify(kind.value.signature))).toBe(provider === Provider.GEMINI);
          });
        }
      }
    }
  });

  it("reject the same conversations with a tool round broken (its assistant message removed)", () => {
    let broken = 0;
    for (let seed = 1; seed <= 150; seed++) {
      const p = randomPayload(prng(seed), seed);
      const roundStart = p.history.findIndex((m) => m.role === Role.ASSISTANT && m.parts.some((part) => part.kind.case === "toolCall") && p.history[p.history.indexOf(m) + 1]?.role === Role.TOOL);
      if (roundStart < 0) continue;
      broken++;
      const damaged = { ...p, history: p.history.filter((_, index) => index !== roundStart) };
      for (const provider of providers) {
        let error: ConnectError | undefined;
        try {
          render(damaged, provider);
        } catch (caught) {
          error = ConnectError.from(caught);
        }
        expect(error?.code, `seed ${seed}, ${Provider[provider]}`).toBe(Code.FailedPrecondition);
        expect(error?.rawMessage).toMatch(/provider rule \w+\.(call_result_pairing|tool_result_first|first_turn_user|function_call_turn_position) violated at message "/);
      }
    }
    expect(broken).toBeGreaterThan(20);
  });

  it("trimmed by the budget at every limit, render valid bodies that start on a user turn or a summary", async () => {
    const strategies = [BudgetStrategy.DROP_HEAD, BudgetStrategy.DROP_TAIL, BudgetStrategy.DROP, BudgetStrategy.SUMMARIZE];
    let rendered = 0;
    let trimmed = 0;
    let refused = 0;
    for (let seed = 1; seed <= 60; seed++) {
      const random = prng(seed);
      const p = randomPayload(random, seed);
      // Whole conversations: from the first user turn (randomPayload may cut a prefix).
      const firstUser = p.history.findIndex((m) => m.role === Role.USER);
      if (firstUser < 0) continue;
      const history = p.history.slice(firstUser);
      const openTail = analyzeToolRounds(history, { allowOpenTail: true }).openRound !== undefined;
      // After an open round only its results may follow, so only a closed conversation gets a turn.
      const currentTurn = !openTail && random() < 0.5 ? { raw: user(`now${seed}`, "the next question") } : undefined;
      const messages = history.length + (currentTurn ? 1 : 0) + p.system.length + p.memory.length + p.scratch.length;
      for (const strategy of strategies) {
        for (let limit = 10; limit <= messages * 10; limit += 10) {
          const context = testContext({
            summarize: async (summarizeRequest) => create(SummarizeResponseSchema, { requestId: summarizeRequest.requestId, summary: assistant("", "summary of earlier turns") }),
          });
          let result: CompileResult;
          try {
            result = await compile(
              create(CompileRequestSchema, {
                system: { messages: p.system },
                history: { messages: history },
                memory: { messages: p.memory },
                scratch: p.scratch,
                toolDefinitions: { toolDefinitions: p.toolDefinitions },
                currentTurn,
                budget: { maxTokens: BigInt(limit), strategy, estimator: { kind: EstimatorKind.FIXED, fixedPerMessage: 10n } },
              }),
              context,
            );
          } catch (caught) {
            // Only "the protected part alone does not fit" may refuse a compile.
            const error = ConnectError.from(caught);
            expect(error.code, `seed ${seed}, limit ${limit}: ${error.rawMessage}`).toBe(Code.ResourceExhausted);
            expect(error.rawMessage).toMatch(/^(budget exceeded|pending exceeds budget)/);
            refused++;
            continue;
          }
          const where = `seed ${seed}, ${BudgetStrategy[strategy]}, limit ${limit}`;
          expect(result.usage!.total, where).toBeLessThanOrEqual(BigInt(limit));
          const kept = result.payload!.history;
          if (kept.length < history.length + (currentTurn ? 1 : 0)) trimmed++;
          expect(kept.length, where).toBeGreaterThan(0);
          const first = kept[0]!;
          if (first.role !== Role.USER && first.provenance?.kind.case !== "summary") {
            throw new Error(`${where}: history starts with ${Role[first.role]} "${first.id}"; kept ${kept.map((m) => m.id).join(" ")}; warnings: ${result.warnings.map((w) => w.message).join("; ")}`);
          }
          for (const provider of providers) {
            let body: string;
            try {
              body = new TextDecoder().decode(renderRequest(result.payload!, create(RenderOptionsSchema, { provider, model: "m" })).json);
            } catch (error) {
              throw new Error(`${where}, ${Provider[provider]}: ${(error as Error).message}`);
            }
            rendered++;
            // The first turn of the conversation proper is the user's (a summary may be either role).
            if (first.role === Role.USER) expect(firstTurnRole(body, provider), `${where}, ${Provider[provider]}`).toBe("user");
          }
        }
      }
    }
    expect(trimmed).toBeGreaterThan(1000);
    expect(rendered).toBeGreaterThan(4000);
    expect(refused).toBeGreaterThan(0);
  });
});

/** The role of the first non-system turn of a rendered body. */
function firstTurnRole(body: string, provider: Provider): string | undefined {
  const parsed = JSON.parse(body) as { messages?: { role: string }[]; input?: { role?: string; type?: string }[]; contents?: { role: string }[] };
  switch (provider) {
    case Provider.OPENAI_CHAT:
      return parsed.messages!.find((m) => m.role !== "system" && m.role !== "developer")?.role;
    case Provider.OPENAI_RESPONSES:
      return parsed.input!.find((item) => item.role !== "system" && item.role !== "developer")?.role;
    case Provider.ANTHROPIC_MESSAGES:
      return parsed.messages![0]?.role;
    default:
      return parsed.contents![0]?.role;
  }
}
