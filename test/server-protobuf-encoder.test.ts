import { ScalarType, create, fromBinary, toBinary, type DescField, type DescMessage } from "@bufbuild/protobuf";
import { reflect, type ReflectMessage } from "@bufbuild/protobuf/reflect";
import { describe, expect, it } from "vitest";
import { file_contextd_v1_context_service, CompileResponseSchema, type CompileResponse } from "../gen/ts/contextd/v1/context_service_pb.js";
import { file_contextd_v1_conversation_service } from "../gen/ts/contextd/v1/conversation_service_pb.js";
import { file_contextd_v1_telemetry_service } from "../gen/ts/contextd/v1/telemetry_service_pb.js";
import { IntroducedMessageSchema, TransformationSchema } from "../gen/ts/contextd/v1/compile_pb.js";
import { MessageSchema, PartSchema } from "../gen/ts/contextd/v1/message_pb.js";
import { Segment } from "../gen/ts/contextd/v1/state_pb.js";
import { encodeMessage, encodeTopLevelFields } from "../src/server/protobuf-encoder.js";

// A small deterministic generator, so a failure reproduces.
function randomSource(seed: number) {
  let state = seed >>> 0;
  return () => {
    state = (state * 1664525 + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

const texts = ["", "a", "héllo wörld", "emoji 🎉 and \u{1F600}", "x".repeat(300), "<|endoftext|>"];

function randomScalar(type: ScalarType, random: () => number): unknown {
  const pick = <T>(values: T[]) => values[Math.floor(random() * values.length)]!;
  switch (type) {
    case ScalarType.STRING:
      return pick(texts);
    case ScalarType.BYTES:
      return new Uint8Array(Array.from({ length: Math.floor(random() * 40) }, () => Math.floor(random() * 256)));
    case ScalarType.BOOL:
      return random() < 0.5;
    case ScalarType.DOUBLE:
      return pick([0, 1.5, -2.25, 1e300, Number.NaN, -0, Math.PI]);
    case ScalarType.FLOAT:
      return pick([0, 1.5, -2.25, 3.4e38]);
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return pick([0, 1, -1, 127, 128, 2 ** 31 - 1, -(2 ** 31), 300]);
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return pick([0, 1, 127, 128, 16384, 2 ** 32 - 1]);
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
      return pick([0n, 1n, -1n, 2n ** 63n - 1n, -(2n ** 63n), 1_700_000_000_000n]);
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return pick([0n, 1n, 2n ** 64n - 1n, 1_700_000_000_000n]);
  }
}

function fill(message: ReflectMessage, random: () => number, depth: number): void {
  for (const field of message.fields) {
    if (random() < 0.4) continue;
    if (field.oneof && message.oneofCase(field.oneof) !== undefined) continue;
    setRandom(message, field, random, depth);
  }
  if (random() < 0.1) message.setUnknown([{ no: 999, wireType: 0, data: new Uint8Array([5]) }]);
}

function randomValue(field: DescField, kind: "scalar" | "enum" | "message", random: () => number, depth: number): unknown {
  if (kind === "message") {
    const child = reflect(field.message!);
    if (depth < 4) fill(child, random, depth + 1);
    return child;
  }
  if (kind === "enum") {
    const values = field.enum!.values.map((value) => value.number);
    return random() < 0.1 ? 77 : values[Math.floor(random() * values.length)];
  }
  return randomScalar(field.scalar!, random);
}

function setRandom(message: ReflectMessage, field: DescField, random: () => number, depth: number): void {
  switch (field.fieldKind) {
    case "scalar":
    case "enum":
    case "message":
      message.set(field, randomValue(field, field.fieldKind, random, depth) as never);
      return;
    case "list": {
      const list = message.get(field);
      const count = Math.floor(random() * 4);
      for (let i = 0; i < count; i++) list.add(randomValue(field, field.listKind, random, depth) as never);
      return;
    }
    case "map": {
      const map = message.get(field);
      const count = Math.floor(random() * 3);
      for (let i = 0; i < count; i++) {
        const key = randomScalar(field.mapKey, random);
        map.set(key as never, randomValue(field, field.mapKind, random, depth) as never);
      }
      return;
    }
  }
}

const schemas: DescMessage[] = [
  file_contextd_v1_context_service,
  file_contextd_v1_conversation_service,
  file_contextd_v1_telemetry_service,
].flatMap((file) => [...file.dependencies.flatMap((dependency) => dependency.messages), ...file.messages]);

describe("protobuf encoder", () => {
  it("produces exactly the bytes of toBinary for random messages of every contract type", () => {
    const random = randomSource(42);
    let checked = 0;
    for (const schema of schemas) {
      for (let round = 0; round < 30; round++) {
        const message = reflect(schema);
        fill(message, random, 0);
        const expected = toBinary(schema, message.message);
        expect(Buffer.from(encodeMessage(schema, message.message)).equals(Buffer.from(expected)), `${schema.typeName} round ${round}`).toBe(true);
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
      carrier.$unknown = encodeTopLevelFields(CompileResponseSchema, message);
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
    const bytes = encodeMessage(CompileResponseSchema, message);
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
      expect(Buffer.from(encodeMessage(CompileResponseSchema, message)).equals(Buffer.from(expected)), `${count} messages`).toBe(true);
    }
  });
});
