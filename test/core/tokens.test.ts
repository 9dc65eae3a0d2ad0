import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { EstimatorKind, EstimatorSchema, TokenizerEncoding } from "#gen/contextd/v1/compile_pb";
import { ImageDetail, MessageSchema, PartSchema, Provider, Role, type Message } from "#gen/contextd/v1/message_pb";
import { ToolDefinitionSchema } from "#gen/contextd/v1/state_pb";
import { createEstimator } from "../../src/core/tokens/estimator.js";
import { TextCountTable, sampleHash } from "../../src/core/tokens/text-count-table.js";
import { TokenCountCache } from "../../src/core/tokens/token-count-cache.js";
import { assistant, call, message, result, text, user } from "./messages.js";

const tokenizer = (provider: Provider, encoding = TokenizerEncoding.O200K_BASE, cache?: TokenCountCache) =>
  createEstimator(create(EstimatorSchema, { kind: EstimatorKind.TOKENIZER, provider, encoding }), Provider.UNSPECIFIED, "estimator", cache);

const image = (detail: ImageDetail) => create(PartSchema, { kind: { case: "image", value: { url: "https://example.com/a.png", detail } } });
const file = create(PartSchema, { kind: { case: "file", value: { mimeType: "application/pdf", uri: "gs://bucket/a.pdf" } } });
const named = (name: string, text: string): Message => create(MessageSchema, { id: "n", role: Role.USER, senderName: name, parts: [{ kind: { case: "text", value: { text } } }] });
const weatherTool = create(ToolDefinitionSchema, { name: "get_weather", description: "Weather for a city", parameters: '{"type":"object"}' });

// o200k_base: "hello world" 2, "get_weather" 2, '{"city":"Paris"}' 5, "sunny" 2, "Weather for a city" 4,
// '{"type":"object"}' 5 tokens.
describe("TOKENIZER framing per provider (framing.ts formula)", () => {
  // [provider, per name, low image, high image, file]
  const cases: [string, Provider, number, number, number, number][] = [
    ["openai chat", Provider.OPENAI_CHAT, 1, 85, 765, 85],
    ["openai responses", Provider.OPENAI_RESPONSES, 1, 85, 765, 85],
    ["anthropic messages", Provider.ANTHROPIC_MESSAGES, 0, 1_600, 1_600, 1_600],
    ["gemini", Provider.GEMINI, 0, 258, 258, 258],
  ];
  it.each(cases)("%s: exact counts of small known messages", async (_name, provider, perName, low, high, perFile) => {
    const estimator = await tokenizer(provider);
    expect(estimator.perRequest).toBe(3);
    // 3 per message + text.
    expect(estimator.countMessage(user("u", "hello world"))).toBe(5);
    expect(estimator.countMessage(named("ann", "hello world"))).toBe(5 + perName);
    // Tool call: 3 + (3 + name 2 + arguments 5); tool result: 3 + (3 + name 2 + plain text 2).
    expect(estimator.countMessage(message(Role.ASSISTANT, "a", call("c1", "get_weather", '{"city":"Paris"}')))).toBe(13);
    expect(estimator.countMessage(message(Role.TOOL, "t", result("c1", "sunny", "get_weather")))).toBe(10);
    // Images by detail (AUTO and UNSPECIFIED count as high), files flat.
    expect(estimator.countMessage(message(Role.USER, "i1", image(ImageDetail.LOW)))).toBe(3 + low);
    expect(estimator.countMessage(message(Role.USER, "i2", image(ImageDetail.HIGH)))).toBe(3 + high);
    expect(estimator.countMessage(message(Role.USER, "i3", image(ImageDetail.AUTO)))).toBe(3 + high);
    expect(estimator.countMessage(message(Role.USER, "f", file))).toBe(3 + perFile);
    expect(estimator.countMessage(message(Role.USER, "m", "hello world", image(ImageDetail.LOW)))).toBe(3 + 2 + low);
    // Tool definitions: 12 once + per definition 8 + name 2 + description 4 + parameters 5.
    expect(estimator.countToolDefinitions([weatherTool])).toBe(31);
    expect(estimator.countToolDefinitions([weatherTool, weatherTool])).toBe(12 + 2 * 19);
    expect(estimator.countToolDefinitions([])).toBe(0);
  });

  it("takes the render provider's framing when the estimator names none, else OpenAI Chat's", async () => {
    const options = create(EstimatorSchema, { kind: EstimatorKind.TOKENIZER });
    const anthropic = await createEstimator(options, Provider.ANTHROPIC_MESSAGES, "estimator");
    const unspecified = await createEstimator(options, Provider.UNSPECIFIED, "estimator");
    expect(anthropic.countMessage(message(Role.USER, "i", image(ImageDetail.LOW)))).toBe(1_603);
    expect(unspecified.countMessage(message(Role.USER, "i", image(ImageDetail.LOW)))).toBe(88);
    expect(unspecified.countMessage(named("ann", "hello world"))).toBe(6);
  });
});

describe("special-token text", () => {
  const encodings: [string, TokenizerEncoding, number, number][] = [
    // [name, encoding, tokens of "<|endoftext|>", of "a <|endoftext|> b <|im_start|>"]
    ["o200k_base", TokenizerEncoding.O200K_BASE, 7, 15],
    ["cl100k_base", TokenizerEncoding.CL100K_BASE, 7, 13],
    ["o200k_harmony", TokenizerEncoding.O200K_HARMONY, 7, 15],
    ["unspecified (o200k_base)", TokenizerEncoding.UNSPECIFIED, 7, 15],
  ];
  it.each(encodings)("%s counts special-token strings as plain text, never throwing", async (_name, encoding, endOfText, mixed) => {
    // A special token would be one token; as plain text each is several.
    const cache = new TokenCountCache();
    for (const estimator of [await tokenizer(Provider.OPENAI_CHAT, encoding), await tokenizer(Provider.OPENAI_CHAT, encoding, cache)]) {
      expect(estimator.countMessage(user("u", "<|endoftext|>"))).toBe(3 + endOfText);
      expect(estimator.countMessage(user("u", "<|im_start|>"))).toBe(3 + 6);
      expect(estimator.countMessage(user("u", "a <|endoftext|> b <|im_start|>"))).toBe(3 + mixed);
      expect(estimator.countMessage(message(Role.TOOL, "t", result("c", "<|endoftext|>")))).toBe(3 + 3 + 1 + endOfText);
    }
  });

  it("counts special-token text with every other estimator too", async () => {
    for (const kind of [EstimatorKind.CHARS, EstimatorKind.CHAR_FALLBACK, EstimatorKind.FIXED]) {
      const estimator = await createEstimator(create(EstimatorSchema, { kind, fixedPerMessage: 1n }), Provider.UNSPECIFIED, "estimator");
      expect(() => estimator.countMessage(user("u", "<|endoftext|><|im_start|>"))).not.toThrow();
    }
  });
});

describe("TokenCountCache", () => {
  it("gives the counts of the estimator, across freshly built messages and lists", async () => {
    const cache = new TokenCountCache();
    const plain = await tokenizer(Provider.OPENAI_CHAT);
    const cached = await tokenizer(Provider.OPENAI_CHAT, TokenizerEncoding.O200K_BASE, cache);
    const build = () => [user("u", "hello world"), assistant("a", "sunny and warm"), message(Role.ASSISTANT, "c", call("c1", "get_weather", '{"city": "Paris"}'))];
    const expected = build().map((one) => plain.countMessage(one));
    expect(await cache.countAll(cached, build())).toEqual(expected);
    expect(await cache.countAll(cached, build())).toEqual(expected);
    const list = build();
    expect(await cache.countAll(cached, list)).toBe(await cache.countAll(cached, list));
    // Pretty-printed arguments count like compact ones.
    expect(expected[2]).toBe(13);
  });

  it("reuses the counts of a re-sent list only where the count inputs are unchanged", async () => {
    const estimators = [
      await tokenizer(Provider.OPENAI_CHAT, TokenizerEncoding.O200K_BASE, new TokenCountCache()),
      await createEstimator(create(EstimatorSchema, { kind: EstimatorKind.CHARS }), Provider.UNSPECIFIED, "estimator"),
      await createEstimator(create(EstimatorSchema, { kind: EstimatorKind.FIXED, fixedPerMessage: 3n, fixedPerPart: 5n, fixedPerToolCall: 7n }), Provider.UNSPECIFIED, "estimator"),
    ];
    const withPayload = (payload: object) =>
      message(Role.TOOL, "t2", create(PartSchema, { kind: { case: "toolResult", value: { toolCallId: "c1", name: "lookup", payload } } }));
    // Fresh objects per list, as after decoding; ids stay the same, count inputs change one at a time.
    const first = () => [user("u", "hello world"), named("a", "sunny"), message(Role.ASSISTANT, "c", call("c1", "get_weather", '{"city":"Paris"}')), message(Role.TOOL, "t", result("c1", "rain")), withPayload({ text: "x" })];
    const second = () => [
      user("u", "hello world, again"),
      named("ab", "sunny"),
      message(Role.ASSISTANT, "c", call("c10", "get_weather", '{"city": "Paris, France"}'), image(ImageDetail.LOW)),
      message(Role.TOOL, "t", create(PartSchema, { kind: { case: "toolResult", value: { toolCallId: "c1", name: "lookup", payload: { text: "rain" }, contentParts: [text("more")] } } })),
      withPayload({ text: "x", error: { code: "E", message: "failed" } }),
      user("u2", "one more"),
    ];
    for (const estimator of estimators) {
      const cache = new TokenCountCache();
      expect(await cache.countAll(estimator, first())).toEqual(first().map((one) => estimator.countMessage(one)));
      expect(await cache.countAll(estimator, first())).toEqual(first().map((one) => estimator.countMessage(one)));
      const expected = second().map((one) => estimator.countMessage(one));
      expect(await cache.countAll(estimator, second())).toEqual(expected);
      // A shorter list with the same start reuses the prefix it shares.
      expect(await cache.countAll(estimator, first().slice(0, 2))).toEqual(first().slice(0, 2).map((one) => estimator.countMessage(one)));
    }
    // Two estimators never share counts, even for lists with the same first id.
    const cache = new TokenCountCache();
    expect(await cache.countAll(estimators[1]!, first())).toEqual(first().map((one) => estimators[1]!.countMessage(one)));
    expect(await cache.countAll(estimators[2]!, first())).toEqual(first().map((one) => estimators[2]!.countMessage(one)));
  });

  it("keeps the last counted lists within --token-count-list-bytes: the oldest go, a list over the bound alone is not kept, counts stay exact", async () => {
    const bound = 64 * 1024;
    const cache = new TokenCountCache(200_000, undefined, undefined, bound);
    const chars = await createEstimator(create(EstimatorSchema, { kind: EstimatorKind.CHARS }), Provider.UNSPECIFIED, "estimator");
    // 40 conversations of 20 messages of ~200 characters: ~40 x 20 x (640 + 400) bytes, about 13 times the bound.
    const conversation = (index: number) => Array.from({ length: 20 }, (_, position) => user(`c${index}-m${position}`, `${index}:${position} ${"text ".repeat(40)}`));
    let largest = 0;
    for (let index = 0; index < 40; index++) {
      const list = conversation(index);
      expect(await cache.countAll(chars, list)).toEqual(list.map((one) => chars.countMessage(one)));
      largest = Math.max(largest, cache.keptLists.bytes);
      expect(cache.keptLists.bytes).toBeLessThanOrEqual(bound);
    }
    // Filled to the bound, not past it: some lists went, several are kept.
    expect(largest).toBeGreaterThan(bound / 2);
    expect(cache.keptLists.count).toBeGreaterThan(1);
    expect(cache.keptLists.count).toBeLessThan(40);
    // One list over the bound alone is counted and not kept; what was kept stays.
    const kept = cache.keptLists;
    const huge = Array.from({ length: 200 }, (_, position) => user(`huge-${position}`, "x".repeat(400)));
    expect(await cache.countAll(chars, huge)).toEqual(huge.map((one) => chars.countMessage(one)));
    expect(cache.keptLists).toEqual(kept);
    // A conversation whose list went is counted again, exactly.
    const first = conversation(0);
    expect(await cache.countAll(chars, first)).toEqual(first.map((one) => chars.countMessage(one)));
  });

  it("stays exact when its text table evicts", async () => {
    const cache = new TokenCountCache(20);
    const plain = await tokenizer(Provider.OPENAI_CHAT);
    const cached = await tokenizer(Provider.OPENAI_CHAT, TokenizerEncoding.O200K_BASE, cache);
    const messages = Array.from({ length: 100 }, (_, index) => user(`u${index}`, `message ${index}: ${"word ".repeat(index % 7)}`));
    for (let round = 0; round < 2; round++) {
      expect(messages.map((one) => cached.countMessage(one))).toEqual(messages.map((one) => plain.countMessage(one)));
    }
  });
});

describe("TextCountTable", () => {
  it("tells apart texts that differ only between sampled characters, beyond a bucket's chain", () => {
    // 1,000 characters: the sample reads 0-31, 968-999 and every 29th from 32; index 33 is not read.
    const base = "x".repeat(1_000);
    const texts = Array.from({ length: 20 }, (_, index) => base.slice(0, 33) + String.fromCharCode(65 + index) + base.slice(34));
    expect(new Set(texts.map(sampleHash)).size).toBe(1);
    const table = new TextCountTable();
    texts.forEach((text, index) => table.set(text, index));
    expect(table.size).toBe(20);
    texts.forEach((text, index) => expect(table.get(text)).toBe(index));
    expect(table.get(base)).toBeUndefined();
    // Freshly built equal strings are found by content.
    expect(table.get([...texts[19]!].join(""))).toBe(19);
    expect(table.evict(5)).toBeGreaterThanOrEqual(5);
  });

  it("keeps the text level within its byte bound, forgetting the oldest texts first, long ones included", async () => {
    const cache = new TokenCountCache(200_000, undefined, 64 * 1024);
    const estimator = await createEstimator(create(EstimatorSchema, { kind: EstimatorKind.TOKENIZER, encoding: TokenizerEncoding.O200K_BASE }), Provider.OPENAI_CHAT, "e", cache);
    for (let index = 0; index < 400; index++) estimator.countMessage(user(`u${index}`, `text number ${index} `.repeat(10)));
    expect(cache.keptTextBytes).toBeLessThanOrEqual(64 * 1024);
    expect(cache.keptTexts).toBeGreaterThan(50);
    const counted = cache.keptTexts;
    estimator.countMessage(user("long", "a long text ".repeat(3_000)));
    // One text of ~72 KB is over the bound alone: it goes too, and everything older with it.
    expect(cache.keptTextBytes).toBeLessThanOrEqual(64 * 1024);
    expect(cache.keptTexts).toBeLessThan(counted);
    // What it forgot it counts again, the same.
    expect(estimator.countMessage(user("u0", `text number 0 `.repeat(10)))).toBe((await createEstimator(create(EstimatorSchema, { kind: EstimatorKind.TOKENIZER, encoding: TokenizerEncoding.O200K_BASE }), Provider.OPENAI_CHAT, "e")).countMessage(user("u0", `text number 0 `.repeat(10))));
  });

  it("hashes short texts in full", () => {
    expect(sampleHash("abc")).not.toBe(sampleHash("abd"));
    expect(sampleHash("a".repeat(64))).not.toBe(sampleHash("a".repeat(63) + "b"));
  });
});
