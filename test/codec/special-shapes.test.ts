import { toBinary, create } from "@bufbuild/protobuf";
import { StructSchema, ValueSchema } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { CompileResultSchema } from "#gen/contextd/v1/compile_pb";
import { reachesSpecialShape } from "../../src/codec/special-shapes.js";
import { contractSchemas } from "../support/random-messages.js";
import { Codec } from "../../src/codec/codec.js";

describe("special shapes", () => {
  it("finds a special in-memory shape a schema reaches, and none in the contextd contract", () => {
    expect(reachesSpecialShape(StructSchema)).toBe(true);
    expect(reachesSpecialShape(ValueSchema)).toBe(true);
    expect(contractSchemas.filter((schema) => reachesSpecialShape(schema)).map((schema) => schema.typeName)).toEqual([]);
    expect(reachesSpecialShape(CompileResultSchema)).toBe(false);
  });

  it("leaves such a schema to protobuf-es, so its bytes are toBinary's", () => {
    const struct = create(StructSchema, { fields: { a: create(ValueSchema, { kind: { case: "stringValue", value: "b" } }) } });
    expect(Buffer.from(new Codec().encode(StructSchema, struct)).equals(Buffer.from(toBinary(StructSchema, struct)))).toBe(true);
  });
});
