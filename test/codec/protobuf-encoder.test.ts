import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { reflect } from "@bufbuild/protobuf/reflect";
import { describe, expect, it } from "vitest";
import { CompileResponseSchema, type CompileResponse } from "#gen/contextd/v1/context_service_pb";
import { IntroducedMessageSchema, TransformationSchema } from "#gen/contextd/v1/compile_pb";
import { MessageSchema, PartSchema } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { contractSchemas as schemas, fill, randomSource } from "../support/random-messages.js";
import { Codec } from "../../src/codec/codec.js";

// One codec for this file, as one server has one.
const codec = new Codec();

describe("protobuf encoder", () => {
  it("produces exactly the bytes of toBinary for random messages of every contract type", () => {
    const random = randomSource(42);
    let checked = 0;
    for (const schema of schemas) {
      for (let round = 0; round < 30; round++) {
        const message = reflect(schema);
        fill(message, random, 0);
        const expected = toBinary(schema, message.message);
        expect(Buffer.from(codec.encode(schema, message.message)).equals(Buffer.from(expected)), `${schema.typeName} round ${round}`).toBe(true);
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(500);
  });

  it("splits top-level fields into pieces that toBinary writes back as the same bytes", () => {
    const random = randomSource(7);
    for (let round = 0; round < 50; round++) {
      const reflected = reflect(CompileResponseSchema);
      fill(reflected, random, 0);
      const message = reflected.message as CompileResponse;
      const expected = toBinary(CompileResponseSchema, message);
      const carrier = create(CompileResponseSchema);
      carrier.$unknown = codec.encodeTopLevelFields(CompileResponseSchema, message);
      const actual = toBinary(CompileResponseSchema, carrier);
      expect(Buffer.from(actual).equals(Buffer.from(expected))).toBe(true);
      expect(fromBinary(CompileResponseSchema, actual)).toEqual(fromBinary(CompileResponseSchema, expected));
    }
  });

  it("grows its buffer for a large message", () => {
    const text = "y".repeat(400);
    const message = create(CompileResponseSchema, {
      result: { payload: { history: Array.from({ length: 2000 }, (_, i) => ({ id: `m${i}`, parts: [{ kind: { case: "text" as const, value: { text } } }] })) } },
    });
    const bytes = codec.encode(CompileResponseSchema, message);
    expect(bytes.length).toBeGreaterThan(800_000);
    expect(Buffer.from(bytes).equals(Buffer.from(toBinary(CompileResponseSchema, message)))).toBe(true);
  });

  it("encodes message objects that occur many times (shared sub-messages) exactly as toBinary does", () => {
    const parts = Array.from({ length: 5 }, (_, i) => create(PartSchema, { kind: { case: "text", value: { text: `part ${i} ${"é".repeat(i * 40)}` } } }));
    const transformation = create(TransformationSchema, { segment: Segment.HISTORY });
    const build = (count: number) => {
      const messages = Array.from({ length: count }, (_, i) =>
        create(MessageSchema, { id: `m${i}`, parts: [parts[i % parts.length]!, parts[(i + 1) % parts.length]!] }),
      );
      // Share part objects between messages too, not only whole messages.
      for (let i = 1; i < messages.length; i += 2) messages[i]!.parts[0] = messages[i - 1]!.parts[1]!;
      // `create` copies what it is given, so the sharing is wired in afterwards.
      const response = create(CompileResponseSchema, {
        result: { payload: {}, source: { snapshot: {} }, normalizedSnapshot: {}, writeback: { snapshot: {} }, persistence: {} },
      });
      const result = response.result!;
      result.payload!.history = messages;
      result.payload!.system = messages.slice(0, 3);
      result.source!.snapshot!.history = messages;
      result.normalizedSnapshot!.history = messages;
      result.writeback!.snapshot = result.normalizedSnapshot;
      result.persistence!.history = messages;
      result.persistence!.system = [messages[0]!, messages[0]!];
      result.introduced = messages.slice(0, 4).map((message) => create(IntroducedMessageSchema, { segment: Segment.HISTORY, message }));
      result.introduced.forEach((introduced, i) => (introduced.message = messages[i]));
      result.transformations = Object.fromEntries(messages.slice(0, 3).map((message) => [message.id, transformation]));
      return response;
    };
    // A small one first, so the big one outgrows its buffer after its first messages are written.
    for (const count of [4, 40, 4000]) {
      const message = build(count);
      // The test is about shared objects: make sure they are shared.
      expect(message.result!.source!.snapshot!.history[1]).toBe(message.result!.payload!.history[1]);
      expect(message.result!.payload!.history[1]!.parts[0]).toBe(message.result!.payload!.history[0]!.parts[1]);
      const expected = toBinary(CompileResponseSchema, message);
      expect(Buffer.from(codec.encode(CompileResponseSchema, message)).equals(Buffer.from(expected)), `${count} messages`).toBe(true);
    }
  });
});
