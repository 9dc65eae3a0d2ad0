import { create, equals, fromBinary, toBinary, type DescMessage } from "@bufbuild/protobuf";
import { reflect } from "@bufbuild/protobuf/reflect";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { describe, expect, it } from "vitest";
import { CompileRequestSchema } from "#gen/contextd/v1/compile_pb";
import { CommitRequestSchema } from "#gen/contextd/v1/conversation_service_pb";
import { MessageSchema, Role } from "#gen/contextd/v1/message_pb";
import { SetMetadataSchema } from "#gen/contextd/v1/state_pb";
import { contractSchemas, fill, randomSource } from "../support/random-messages.js";
import { Codec } from "../../src/codec/codec.js";

// One codec for this file, as one server has one.
const codec = new Codec();

/**
 * Everything observable about a decoded value, in property order: `toStrictEqual` ignores key
 * order and `equals` ignores `$unknown`, so this catches what they would let through.
 */
function shape(value: unknown): unknown {
  if (typeof value === "bigint") return `${value}n`;
  if (value instanceof Uint8Array) return { bytes: Array.from(value) };
  if (Array.isArray(value)) return value.map(shape);
  if (typeof value === "number" && Number.isNaN(value)) return "NaN";
  if (Object.is(value, -0)) return "-0";
  if (value !== null && typeof value === "object") {
    expect(Object.getPrototypeOf(value)).toBe(Object.prototype);
    return Object.entries(value).map(([key, entry]) => [key, shape(entry)]);
  }
  return value;
}

/** Decodes with both decoders: the same message, or both throw. */
function expectSameDecoding(schema: DescMessage, bytes: Uint8Array, label: string): "decoded" | "threw" {
  let expected: unknown;
  let expectedError: unknown;
  try {
    expected = fromBinary(schema, bytes);
  } catch (error) {
    expectedError = error;
  }
  if (expectedError !== undefined) {
    expect(() => codec.decode(schema, bytes), `${label}: fromBinary threw ${String(expectedError)}`).toThrow();
    return "threw";
  }
  const actual = codec.decode(schema, bytes);
  // `equals` is false for NaN fields even between two fromBinary results, so it is held to that.
  const selfEqual = equals(schema, expected as never, fromBinary(schema, bytes));
  expect(equals(schema, actual, expected as never), label).toBe(selfEqual);
  expect(actual, label).toStrictEqual(expected);
  expect(shape(actual), label).toStrictEqual(shape(expected));
  return "decoded";
}

describe("protobuf decoder", () => {
  it("decodes random messages of every contract type exactly as fromBinary does", () => {
    const random = randomSource(1234);
    let checked = 0;
    for (const schema of contractSchemas) {
      for (let round = 0; round < 30; round++) {
        const message = reflect(schema);
        fill(message, random, 0);
        expectSameDecoding(schema, toBinary(schema, message.message), `${schema.typeName} round ${round}`);
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(500);
  });

  it("merges repeated occurrences (concatenated encodings) exactly as fromBinary does", () => {
    const random = randomSource(99);
    for (const schema of contractSchemas) {
      for (let round = 0; round < 10; round++) {
        const first = reflect(schema);
        const second = reflect(schema);
        fill(first, random, 0);
        fill(second, random, 0);
        const bytes = Buffer.concat([toBinary(schema, first.message), toBinary(schema, second.message)]);
        expectSameDecoding(schema, bytes, `${schema.typeName} merge ${round}`);
      }
    }
  });

  it("reads repeated scalars both packed and unpacked, and keeps unknown fields in order", () => {
    const writer = new BinaryWriter();
    writer.tag(1, WireType.Varint).int64(5n); // total
    writer.tag(2, WireType.Varint).int64(-7n); // per_message, unpacked
    writer.tag(2, WireType.LengthDelimited).fork().int64(1n).int64(2n).join(); // per_message, packed
    writer.tag(2, WireType.Varint).int64(9n);
    writer.tag(50, WireType.Bit32).fixed32(3);
    writer.tag(51, WireType.StartGroup).tag(1, WireType.Varint).int32(4).tag(51, WireType.EndGroup);
    writer.tag(52, WireType.Bit64).fixed64(8n);
    const bytes = writer.finish();
    const tokensSchema = contractSchemas
      .flatMap(function nested(schema): DescMessage[] { return [schema, ...schema.nestedMessages.flatMap(nested)]; })
      .find((schema) => schema.fields.some((field) => field.name === "per_message"));
    expect(tokensSchema).toBeDefined();
    expect(expectSameDecoding(tokensSchema!, bytes, "packed and unpacked")).toBe("decoded");
    const decoded = codec.decode(tokensSchema!, bytes) as unknown as { perMessage: bigint[]; $unknown: { no: number }[] };
    expect(decoded.perMessage).toEqual([-7n, 1n, 2n, 9n]);
    expect(decoded.$unknown.map((field) => field.no)).toEqual([50, 51, 52]);
  });

  it("sets proto3 optional fields only when present", () => {
    const absent = codec.decode(CommitRequestSchema, toBinary(CommitRequestSchema, create(CommitRequestSchema, { conversationId: "c" })));
    expect("expectedVersion" in absent).toBe(false);
    expectSameDecoding(CommitRequestSchema, toBinary(CommitRequestSchema, create(CommitRequestSchema, { expectedVersion: 0n })), "optional zero");
    expect(codec.decode(CommitRequestSchema, toBinary(CommitRequestSchema, create(CommitRequestSchema, { expectedVersion: 0n }))).expectedVersion).toBe(0n);
  });

  it("fails where fromBinary fails: truncation, bad wire types, bad tags, invalid UTF-8", () => {
    const valid = toBinary(
      CompileRequestSchema,
      create(CompileRequestSchema, { history: { messages: [{ id: "m1", role: Role.USER, parts: [{ kind: { case: "text", value: { text: "héllo" } } }] }] } }),
    );
    let threw = 0;
    // Every truncation of a valid message.
    for (let length = 0; length < valid.length; length++) {
      if (expectSameDecoding(CompileRequestSchema, valid.subarray(0, length), `truncated to ${length}`) === "threw") threw++;
    }
    expect(threw).toBeGreaterThan(0);
    const cases: [string, number[]][] = [
      ["wire type 6", [0x0e, 0x00]],
      ["wire type 7", [0x0f, 0x00]],
      ["field number 0", [0x02, 0x00]],
      ["tag varint overflow", [0x80, 0x80, 0x80, 0x80, 0x80, 0x01]],
      ["length past the end", [0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f]],
      ["unterminated group", [0xfb, 0x01]],
      ["mismatched end group", [0xfb, 0x01, 0xfc, 0x02]],
    ];
    for (const [label, bytes] of cases) {
      expect(expectSameDecoding(CompileRequestSchema, new Uint8Array(bytes), label), label).toBe("threw");
    }
    // id = "\xff" (field 1 of Message, a string).
    expect(expectSameDecoding(MessageSchema, new Uint8Array([0x0a, 0x01, 0xff]), "invalid UTF-8")).toBe("threw");
    expect(() => codec.decode(MessageSchema, new Uint8Array([0x0a, 0x02, 0xc3, 0x28]))).toThrow();
  });

  it("agrees with fromBinary on randomly corrupted bytes", () => {
    const random = randomSource(5);
    const outcomes = { decoded: 0, threw: 0 };
    for (const schema of contractSchemas) {
      for (let round = 0; round < 20; round++) {
        const message = reflect(schema);
        fill(message, random, 0);
        const bytes = toBinary(schema, message.message);
        if (bytes.length === 0) continue;
        const corrupted = Uint8Array.from(bytes);
        for (let flips = 1 + Math.floor(random() * 3); flips > 0; flips--) {
          corrupted[Math.floor(random() * corrupted.length)] = Math.floor(random() * 256);
        }
        outcomes[expectSameDecoding(schema, corrupted, `${schema.typeName} corrupted ${round}`)]++;
      }
    }
    // Both outcomes must occur, or the comparison proved little.
    expect(outcomes.decoded).toBeGreaterThan(20);
    expect(outcomes.threw).toBeGreaterThan(20);
  });

  it("keeps a map key \"__proto__\" as a key, and skips an unknown field inside a map entry, as fromBinary does", () => {
    const bytes = toBinary(SetMetadataSchema, create(SetMetadataSchema, { labels: Object.fromEntries([["__proto__", "x"], ["k", "v"]]) }));
    const decoded = codec.decode(SetMetadataSchema, bytes);
    expect(Object.hasOwn(decoded.labels, "__proto__")).toBe(true);
    expect(Object.getPrototypeOf(decoded.labels)).toBe(Object.prototype);
    expect(decoded.labels).toStrictEqual(fromBinary(SetMetadataSchema, bytes).labels);
    // Field 441 (labels), an entry of: field 3 varint 7, key "k", value "v".
    const withUnknown = new Uint8Array([0xca, 0x1b, 0x08, 0x18, 0x07, 0x0a, 0x01, 0x6b, 0x12, 0x01, 0x76]);
    expect(expectSameDecoding(SetMetadataSchema, withUnknown, "unknown entry field")).toBe("decoded");
    expect(codec.decode(SetMetadataSchema, withUnknown).labels).toEqual({ k: "v" });
  });

  it("nests no deeper than fromBinary's recursion limit", () => {
    // Unknown groups nested 120 deep: fromBinary refuses them, and so must we.
    const writer = new BinaryWriter();
    for (let i = 0; i < 120; i++) writer.tag(60, WireType.StartGroup);
    for (let i = 0; i < 120; i++) writer.tag(60, WireType.EndGroup);
    expect(expectSameDecoding(MessageSchema, writer.finish(), "deep groups")).toBe("threw");
  });
});
