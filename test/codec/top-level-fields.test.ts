import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { describe, expect, it } from "vitest";
import { splitTopLevelFields } from "../../src/codec/top-level-fields.js";

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex");

describe("splitTopLevelFields", () => {
  it("cuts an encoding into (field number, wire type, payload after the tag), one per field", () => {
    const bytes = new BinaryWriter()
      .tag(1, WireType.Varint).uint64(2n ** 40n)
      .tag(2, WireType.Bit64).fixed64(7n)
      .tag(3, WireType.Bit32).fixed32(9)
      .tag(200_000, WireType.LengthDelimited).bytes(new Uint8Array(300).fill(4))
      .finish();
    const fields = splitTopLevelFields(bytes);
    expect(fields.map(({ no, wireType }) => [no, wireType])).toEqual([[1, WireType.Varint], [2, WireType.Bit64], [3, WireType.Bit32], [200_000, WireType.LengthDelimited]]);
    expect(hex(fields[0]!.data)).toBe(hex(new BinaryWriter().uint64(2n ** 40n).finish()));
    expect(fields[1]!.data.length).toBe(8);
    expect(fields[2]!.data.length).toBe(4);
    // The length prefix stays with the payload: it is what follows the tag.
    expect(fields[3]!.data.length).toBe(2 + 300);
  });

  it("keeps the rest as one piece from a group tag on (proto3 contracts have none)", () => {
    const bytes = new BinaryWriter().tag(1, WireType.Varint).uint32(1).tag(2, WireType.StartGroup).tag(2, WireType.EndGroup).finish();
    const fields = splitTopLevelFields(bytes);
    expect(fields.map(({ no, wireType }) => [no, wireType])).toEqual([[1, WireType.Varint], [2, WireType.StartGroup]]);
    expect(fields[1]!.data.length).toBe(1);
  });
});
