/** Random messages of the contextd contract types, for equivalence tests against protobuf-es. */
import { ScalarType, type DescField, type DescMessage } from "@bufbuild/protobuf";
import { reflect, type ReflectMessage } from "@bufbuild/protobuf/reflect";
import { file_contextd_v1_context_service } from "#gen/contextd/v1/context_service_pb";
import { file_contextd_v1_conversation_service } from "#gen/contextd/v1/conversation_service_pb";
import { file_contextd_v1_telemetry_service } from "#gen/contextd/v1/telemetry_service_pb";

// A small deterministic generator, so a failure reproduces.
export function randomSource(seed: number) {
  let state = seed >>> 0;
  return () => {
    state = (state * 1664525 + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

// With strings at and past the request string limits (core/model/string-limits.ts: names and
// models 256 bytes, ids and keys 1,024), so fuzzed requests meet them on every field.
const texts = ["", "a", "héllo wörld", "emoji 🎉 and \u{1F600}", "x".repeat(300), "<|endoftext|>", "n".repeat(256), "i".repeat(1_024), "é".repeat(513)];

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

export function fill(message: ReflectMessage, random: () => number, depth: number): void {
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

/** Every message type of the contract, with the types its files import. */
export const contractSchemas: DescMessage[] = [
  file_contextd_v1_context_service,
  file_contextd_v1_conversation_service,
  file_contextd_v1_telemetry_service,
].flatMap((file) => [...file.dependencies.flatMap((dependency) => dependency.messages), ...file.messages]);

