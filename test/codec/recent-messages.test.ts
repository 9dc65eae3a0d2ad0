import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CompileRequestSchema } from "#gen/contextd/v1/compile_pb";
import { Role } from "#gen/contextd/v1/message_pb";
import { entryOverheadBytes, RecentMessages } from "../../src/codec/recent-messages.js";
import { Codec } from "../../src/codec/codec.js";

// One codec for this file, as one server has one.
const codec = new Codec();

const request = (texts: string[]) =>
  toBinary(
    CompileRequestSchema,
    create(CompileRequestSchema, {
      history: { messages: texts.map((text, index) => ({ id: `m${index}`, role: Role.USER, parts: [{ kind: { case: "text" as const, value: { text } } }] })) },
    }),
  );

describe("RecentMessages", () => {
  it("hands out the object decoded from the same bytes, frozen, and nothing for other bytes", () => {
    const recent = new RecentMessages<object>(1 << 20);
    const bytes = new Uint8Array([9, 1, 2, 3, 4, 5, 9]);
    const message = { parts: [{ text: "a" }], raw: new Uint8Array([1, 2]) };
    expect(recent.store(bytes, 1, 6, message)).toBe(message);
    expect(recent.lookup(new Uint8Array([1, 2, 3, 4, 5]), 0, 5)).toBe(message);
    expect(recent.lookup(new Uint8Array([1, 2, 3, 4, 6]), 0, 5)).toBeUndefined();
    expect(recent.lookup(new Uint8Array([1, 2, 3, 4]), 0, 4)).toBeUndefined();
    expect(Object.isFrozen(message)).toBe(true);
    expect(Object.isFrozen(message.parts[0])).toBe(true);
    expect(() => {
      (message.parts as { text: string }[]).push({ text: "b" });
    }).toThrow(TypeError);
  });

  it("confirms a hit by every byte, not by the sampled hash", () => {
    const recent = new RecentMessages<object>(1 << 20);
    // 640 bytes are sampled every 20th byte: these two runs differ only between samples.
    const first = new Uint8Array(640).fill(7);
    const second = first.slice();
    second[5] = 8;
    const message = {};
    recent.store(first, 0, first.length, message);
    expect(recent.lookup(first, 0, first.length)).toBe(message);
    expect(recent.lookup(second, 0, second.length)).toBeUndefined();
  });

  it("keeps a copy of the bytes, not a view of the caller's buffer", () => {
    const recent = new RecentMessages<object>(1 << 20);
    const buffer = Buffer.from([1, 2, 3]);
    const message = {};
    recent.store(buffer, 0, 3, message);
    buffer[0] = 9;
    expect(recent.lookup(new Uint8Array([1, 2, 3]), 0, 3)).toBe(message);
  });

  it("forgets everything once more than maxBytes are kept, counting each entry's objects too", () => {
    // Room for one five-byte entry, not two.
    const recent = new RecentMessages<object>(2 * (5 + entryOverheadBytes) - 1);
    const a = {};
    const b = {};
    recent.store(new Uint8Array([1, 1, 1, 1, 1]), 0, 5, a);
    expect(recent.keptBytes).toBe(5 + entryOverheadBytes);
    recent.store(new Uint8Array([2, 2, 2, 2, 2]), 0, 5, b);
    expect(recent.keptBytes).toBe(5 + entryOverheadBytes);
    expect(recent.lookup(new Uint8Array([1, 1, 1, 1, 1]), 0, 5)).toBeUndefined();
    expect(recent.lookup(new Uint8Array([2, 2, 2, 2, 2]), 0, 5)).toBe(b);
    // A run larger than the whole budget is never kept.
    const huge = new Uint8Array(2 * entryOverheadBytes);
    recent.store(huge, 0, huge.length, {});
    expect(recent.lookup(huge, 0, huge.length)).toBeUndefined();
  });
});

describe("the request decoder reuses conversation messages across requests", () => {
  it("returns the same frozen message objects for unchanged messages, equal to fromBinary", () => {
    const first = request(["hello", "world"]);
    const second = request(["hello", "world", "again"]);
    const one = codec.decode(CompileRequestSchema, first);
    const two = codec.decode(CompileRequestSchema, second);
    expect(two.history!.messages[0]).toBe(one.history!.messages[0]);
    expect(two.history!.messages[1]).toBe(one.history!.messages[1]);
    expect(two.history!.messages).not.toBe(one.history!.messages);
    expect(Object.isFrozen(two.history!.messages[2])).toBe(true);
    expect(two).toEqual(fromBinary(CompileRequestSchema, second));
    // The containers around the messages are the request's own, free to change.
    expect(Object.isFrozen(two.history!.messages)).toBe(false);
  });
});
