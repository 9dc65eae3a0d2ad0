import { WireType } from "@bufbuild/protobuf/wire";

/** One top-level field of an encoding: the shape of a `$unknown` entry. */
export interface TopLevelField {
  no: number;
  wireType: WireType;
  data: Uint8Array;
}

/**
 * Splits an encoding's "tag + payload" sequences back into (field number, wire type, payload):
 * the entries of `$unknown`, which protobuf-es writes back as the tag followed by the payload, so a
 * carrier message can hold an encoded message's fields without decoding them.
 */
export function splitTopLevelFields(bytes: Uint8Array): TopLevelField[] {
  const pieces: TopLevelField[] = [];
  let offset = 0;
  while (offset < bytes.length) {
    let tag = 0;
    let shift = 0;
    let byte: number;
    do {
      byte = bytes[offset++]!;
      tag += (byte & 0x7f) * 2 ** shift;
      shift += 7;
    } while (byte & 0x80);
    const wireType = (tag & 7) as WireType;
    const start = offset;
    switch (wireType) {
      case WireType.Varint:
        while (bytes[offset++]! & 0x80);
        break;
      case WireType.Bit64:
        offset += 8;
        break;
      case WireType.Bit32:
        offset += 4;
        break;
      case WireType.LengthDelimited: {
        let length = 0;
        let lengthShift = 0;
        do {
          byte = bytes[offset++]!;
          length += (byte & 0x7f) * 2 ** lengthShift;
          lengthShift += 7;
        } while (byte & 0x80);
        offset += length;
        break;
      }
      default:
        // Group-encoded fields do not occur in proto3 contracts; keep the rest as one opaque piece.
        pieces.push({ no: Math.floor(tag / 8), wireType, data: bytes.subarray(start) });
        return pieces;
    }
    pieces.push({ no: Math.floor(tag / 8), wireType, data: bytes.subarray(start, offset) });
  }
  return pieces;
}
