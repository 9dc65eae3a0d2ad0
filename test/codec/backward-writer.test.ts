import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { describe, expect, it } from "vitest";
import { BackwardWriter, envelopeHeaderBytes } from "../../src/codec/backward-writer.js";

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex");
const kept = (size: number, fill: number) => new Uint8Array(size).fill(fill);

describe("BackwardWriter", () => {
  it("writes back to front what protobuf-es's BinaryWriter writes front to back, growing past its first buffer", () => {
    const writer = new BackwardWriter(4, undefined);
    // Last field first: a string, then a varint, then a fixed64, each preceded by its tag.
    writer.string("é and more than sixty-four characters of text, so the native UTF-8 write is used");
    writer.tag(3, WireType.LengthDelimited);
    writer.uint32(300);
    writer.tag(2, WireType.Varint);
    writer.fixed64({ lo: 1, hi: 2 });
    writer.tag(1, WireType.Bit64);
    const forward = new BinaryWriter()
      .tag(1, WireType.Bit64).fixed64(1n + (2n << 32n))
      .tag(2, WireType.Varint).uint32(300)
      .tag(3, WireType.LengthDelimited).string("é and more than sixty-four characters of text, so the native UTF-8 write is used")
      .finish();
    expect(hex(writer.finish())).toBe(hex(forward));
    expect(writer.length).toBe(forward.length);
  });

  it("copies bytes it wrote earlier, short and long, after the buffer grew", () => {
    const writer = new BackwardWriter(8, undefined);
    writer.bytes(kept(40, 7));
    const long = { start: writer.length, end: 0 };
    writer.bytes(kept(3, 9));
    const short = { start: writer.length, end: 40 };
    writer.copyRange(long.start, long.end);
    writer.copyRange(short.start, short.end);
    expect(hex(writer.finish())).toBe(hex(Buffer.concat([kept(3, 9), kept(40, 7), kept(3, 9), kept(40, 7)])));
  });

  it("writes the envelope prefix: flags 0, then the length big-endian", () => {
    const writer = new BackwardWriter(16, undefined);
    writer.bytes(kept(300, 1));
    writer.envelopeHeader(writer.length);
    const bytes = writer.finish();
    expect(hex(bytes.subarray(0, envelopeHeaderBytes))).toBe("000000012c");
    expect(bytes.length).toBe(305);
  });

  it("chunked, references long kept bytes instead of copying them, and a repeat of them too", () => {
    const large = kept(20_000, 5);
    const writer = new BackwardWriter(64, undefined, true);
    writer.bytes(kept(2, 1));
    writer.immutableBytes(large);
    const start = writer.length;
    writer.bytes(kept(2, 3));
    writer.copyRange(start, 2);
    const chunks = writer.chunks();
    // Front to back: the repeat of `large` (a reference), the 2 bytes of 3s, `large`, the 2 bytes of 1s.
    expect(chunks.map((chunk) => chunk.byteLength)).toEqual([20_000, 2, 20_000, 2]);
    expect(chunks[0]!.buffer).toBe(large.buffer);
    expect(chunks[2]).toBe(large);
    expect(writer.bufferedLength).toBe(4);
    expect(hex(writer.finish())).toBe(hex(Buffer.concat([large, kept(2, 3), large, kept(2, 1)])));
  });

  it("hands back what was written since a length, across referenced pieces", () => {
    const writer = new BackwardWriter(64, undefined, true);
    writer.bytes(kept(4, 8));
    const end = writer.length;
    writer.immutableBytes(kept(17_000, 6));
    writer.bytes(kept(3, 2));
    expect(hex(writer.writtenSince(end))).toBe(hex(Buffer.concat([kept(3, 2), kept(17_000, 6)])));
  });
});
