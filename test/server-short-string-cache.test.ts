import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { reflect } from "@bufbuild/protobuf/reflect";
import { describe, expect, it } from "vitest";
import { CompileRequestSchema } from "../gen/ts/contextd/v1/compile_pb.js";
import { MessageSchema, Role } from "../gen/ts/contextd/v1/message_pb.js";
import { decodeMessage } from "../src/server/protobuf-decoder.js";
import { ShortStringCache } from "../src/server/short-string-cache.js";
import { contractSchemas, fill, randomSource } from "./support/random-messages.js";

const utf8 = new TextEncoder();

/** `text` as bytes with unrelated bytes around it, as a string sits inside a request. */
function embedded(text: string): { bytes: Uint8Array; start: number; end: number } {
  const inner = utf8.encode(text);
  const bytes = new Uint8Array(inner.length + 6);
  bytes.fill(0x7a);
  bytes.set(inner, 3);
  return { bytes, start: 3, end: 3 + inner.length };
}

function lookup(cache: ShortStringCache, text: string): string | undefined {
  const { bytes, start, end } = embedded(text);
  return cache.lookup(bytes, start, end);
}

function store(cache: ShortStringCache, text: string): void {
  const { bytes, start, end } = embedded(text);
  cache.store(bytes, start, end, text);
}

// The cache's hash, written out independently, to find two strings it cannot tell apart by hash.
function fnv1a(text: string): number {
  let hash = 0x811c9dc5 | 0;
  for (let index = 0; index < text.length; index++) hash = Math.imul(hash ^ text.charCodeAt(index), 0x01000193);
  return hash;
}

function hashCollision(): [string, string] {
  const seen = new Map<number, string>();
  for (let index = 0; ; index++) {
    const text = `id_${index.toString(36)}`;
    const other = seen.get(fnv1a(text));
    if (other !== undefined) return [other, text];
    seen.set(fnv1a(text), text);
  }
}

describe("short string cache", () => {
  it("returns a stored string only for the same bytes", () => {
    const cache = new ShortStringCache(16);
    expect(lookup(cache, "msg_1")).toBeUndefined();
    store(cache, "msg_1");
    expect(lookup(cache, "msg_1")).toBe("msg_1");
    expect(lookup(cache, "msg_2")).toBeUndefined();
    expect(lookup(cache, "msg_")).toBeUndefined();
    expect(lookup(cache, "msg_10")).toBeUndefined();
    store(cache, "");
    expect(lookup(cache, "")).toBe("");
  });

  it("confirms a hit by content, not by hash", () => {
    const [first, second] = hashCollision();
    expect(first).not.toBe(second);
    expect(fnv1a(first)).toBe(fnv1a(second));
    const cache = new ShortStringCache(1);
    store(cache, first);
    expect(lookup(cache, second)).toBeUndefined();
    store(cache, second);
    expect(lookup(cache, first)).toBe(first);
    expect(lookup(cache, second)).toBe(second);
  });

  it("caches neither non-ASCII nor long strings", () => {
    const cache = new ShortStringCache(16);
    const long = "x".repeat(ShortStringCache.maxBytes + 1);
    const atLimit = "y".repeat(ShortStringCache.maxBytes);
    for (const text of ["héllo", "\u{1f600}", long, atLimit]) store(cache, text);
    expect(lookup(cache, "héllo")).toBeUndefined();
    expect(lookup(cache, "\u{1f600}")).toBeUndefined();
    expect(lookup(cache, long)).toBeUndefined();
    expect(lookup(cache, atLimit)).toBe(atLimit);
  });

  it("keeps the two most recently used strings per set", () => {
    const cache = new ShortStringCache(1);
    store(cache, "a");
    store(cache, "b");
    expect(lookup(cache, "a")).toBe("a"); // a is now the most recent
    store(cache, "c"); // evicts b
    expect(lookup(cache, "b")).toBeUndefined();
    expect(lookup(cache, "a")).toBe("a");
    expect(lookup(cache, "c")).toBe("c");
  });

  it("rejects a set count that is not a power of two", () => {
    expect(() => new ShortStringCache(3)).toThrow(/power of two/);
    expect(() => new ShortStringCache(0)).toThrow(/power of two/);
  });
});

describe("protobuf decoder with the short string cache", () => {
  it("decodes re-sent and changed requests exactly as fromBinary does", () => {
    const request = (ids: string[]) =>
      toBinary(
        CompileRequestSchema,
        create(CompileRequestSchema, {
          conversationId: "conv",
          history: { messages: ids.map((id) => ({ id, role: Role.USER, parts: [{ kind: { case: "text" as const, value: { text: `text of ${id}` } } }] })) },
        }),
      );
    const ids = ["u1", "a1", "t1", "é1", "x".repeat(80), "", "u2"];
    const variants = [ids, ids, ids.map((id) => id.replace("1", "2")), ids.map((id) => id.toUpperCase()), ids];
    for (const [round, variant] of variants.entries()) {
      const bytes = request(variant);
      const decoded = decodeMessage(CompileRequestSchema, bytes);
      expect(decoded, `round ${round}`).toStrictEqual(fromBinary(CompileRequestSchema, bytes));
      expect(decoded.history!.messages.map((message) => message.id)).toEqual(variant);
    }
  });

  it("still rejects invalid UTF-8 and truncated strings after the same field decoded fine", () => {
    // Message.id is field 1, a string.
    expect(decodeMessage(MessageSchema, new Uint8Array([0x0a, 0x02, 0x61, 0x62])).id).toBe("ab");
    expect(() => decodeMessage(MessageSchema, new Uint8Array([0x0a, 0x02, 0x61, 0xff]))).toThrow();
    expect(() => fromBinary(MessageSchema, new Uint8Array([0x0a, 0x02, 0x61, 0xff]))).toThrow();
    expect(() => decodeMessage(MessageSchema, new Uint8Array([0x0a, 0x03, 0x61, 0x62]))).toThrow(/premature EOF/);
    expect(() => fromBinary(MessageSchema, new Uint8Array([0x0a, 0x03, 0x61, 0x62]))).toThrow(/premature EOF/);
  });

  it("decodes random messages of every contract type, each twice, exactly as fromBinary does", () => {
    const random = randomSource(4321);
    let checked = 0;
    for (const schema of contractSchemas) {
      for (let round = 0; round < 20; round++) {
        const message = reflect(schema);
        fill(message, random, 0);
        const bytes = toBinary(schema, message.message);
        const expected = fromBinary(schema, bytes);
        // The second decode finds the short strings of the first in the cache.
        expect(decodeMessage(schema, bytes), `${schema.typeName} round ${round}`).toStrictEqual(expected);
        expect(decodeMessage(schema, bytes), `${schema.typeName} round ${round} again`).toStrictEqual(expected);
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(300);
  });
});
