import { ScalarType, protoInt64 } from "@bufbuild/protobuf";
import { WireType } from "@bufbuild/protobuf/wire";
import type { BackwardWriter } from "./backward-writer.js";

/**
 * Scalar and enum values as `toBinary` writes them (protobuf-es's to-binary.ts `writeScalar`),
 * back to front into a `BackwardWriter`: the value first, then the tag before it.
 */

export function writeScalar(writer: BackwardWriter, type: ScalarType, fieldNumber: number, value: unknown): void {
  writeScalarValue(writer, type, value);
  writer.tag(fieldNumber, wireTypeOf(type));
}


export function writeScalarValue(writer: BackwardWriter, type: ScalarType, value: unknown): void {
  switch (type) {
    case ScalarType.STRING:
      writer.string(value as string);
      return;
    case ScalarType.BYTES: {
      const bytes = value as Uint8Array;
      writer.bytes(bytes);
      writer.uint32(bytes.byteLength);
      return;
    }
    case ScalarType.BOOL:
      writer.uint32(value ? 1 : 0);
      return;
    case ScalarType.UINT32:
      writer.uint32(value as number);
      return;
    case ScalarType.INT32: {
      const number = value as number;
      if (number >= 0) writer.uint32(number);
      else writer.varint64(protoInt64.enc(number));
      return;
    }
    case ScalarType.SINT32: {
      const number = value as number;
      writer.uint32(((number << 1) ^ (number >> 31)) >>> 0);
      return;
    }
    case ScalarType.INT64:
      writer.varint64(protoInt64.enc(value as bigint | string));
      return;
    case ScalarType.UINT64:
      writer.varint64(protoInt64.uEnc(value as bigint | string));
      return;
    case ScalarType.SINT64: {
      const { lo, hi } = protoInt64.enc(value as bigint | string);
      // zig-zag over 64 bits, as protobuf-es does it
      const sign = hi >> 31;
      writer.varint64({ lo: ((lo << 1) ^ sign) | 0, hi: (((hi << 1) | (lo >>> 31)) ^ sign) | 0 });
      return;
    }
    case ScalarType.FIXED64:
      writer.fixed64(protoInt64.uEnc(value as bigint | string));
      return;
    case ScalarType.SFIXED64:
      writer.fixed64(protoInt64.enc(value as bigint | string));
      return;
    case ScalarType.FIXED32:
      writer.fixed32((value as number) >>> 0);
      return;
    case ScalarType.SFIXED32:
      writer.fixed32((value as number) | 0);
      return;
    case ScalarType.DOUBLE:
      writer.double(value as number);
      return;
    case ScalarType.FLOAT:
      writer.float(value as number);
      return;
  }
}

function wireTypeOf(type: ScalarType): WireType {
  switch (type) {
    case ScalarType.BYTES:
    case ScalarType.STRING:
      return WireType.LengthDelimited;
    case ScalarType.DOUBLE:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return WireType.Bit64;
    case ScalarType.FIXED32:
    case ScalarType.SFIXED32:
    case ScalarType.FLOAT:
      return WireType.Bit32;
    default:
      return WireType.Varint;
  }
}

/** A map key as protobuf-es holds it (an object property name, so a string) as a value of its scalar type. */
export function mapKey(type: ScalarType, key: string): unknown {
  switch (type) {
    case ScalarType.STRING:
      return key;
    case ScalarType.BOOL:
      return key === "true";
    case ScalarType.INT64:
    case ScalarType.UINT64:
    case ScalarType.SINT64:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return key;
    default:
      return Number(key);
  }
}
