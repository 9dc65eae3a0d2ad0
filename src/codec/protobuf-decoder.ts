import { ScalarType, fromBinary, type DescField, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { scalarZeroValue } from "@bufbuild/protobuf/reflect";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";
import { streamEventsOverLimit } from "../core/deltas/apply-deltas.js";
import { maxRepeatedElements, repeatedElementsOverLimit } from "../core/model/decode-limits.js";
import { maxStreamEvents } from "../core/providers/stream-events.js";
import { RecentMessages } from "./recent-messages.js";
import { specialShapeTypes } from "./special-shapes.js";

/**
 * Protobuf binary decoding that yields exactly what `fromBinary(schema, bytes)` yields: the same
 * plain message objects (property for property, `$unknown` included) and an error wherever
 * `fromBinary` throws, but for two limits on what one request may hold (`maxRepeatedElements`,
 * `maxStreamEvents`), which are RESOURCE_EXHAUSTED as soon as the decode passes them.
 *
 * Why it exists: it can hand out the object decoded last time for a `contextd.v1.Message` list
 * element whose bytes it saw before (`RecentMessages`), which `fromBinary` cannot. Raw decoding no
 * longer wins: since @bufbuild/protobuf 2.14 `fromBinary` is as fast (bench:codec, 2.17: fresh
 * 1,000-message request 0.7 ms with `fromBinary`, 2.7 ms here, where every message is also
 * hashed, copied and frozen to be kept). The win is on resent history: 0.22 ms instead of 0.73 ms,
 * and a warm 1,000-message compile of 0.19 ms instead of 0.43–0.65 ms on fresh objects
 * (bench:engine), since token counts and encodings are found again by identity.
 *
 * The reading itself is protobuf-es's: the same `BinaryReader` (varints, bounds checks, strict
 * UTF-8) and the same loop structure as `readMessage` / `readField` / `readMapEntry` in
 * protobuf-es's from-binary.ts, quirks included (wire types of known fields are not checked; map
 * entries skip unexpected fields), so edge cases cannot diverge.
 */
export function decodeMessage<Desc extends DescMessage>(schema: Desc, bytes: Uint8Array, reuse?: DecodedObjectReuse): MessageShape<Desc> {
  const plan = planFor(schema);
  // Types whose in-memory shape protobuf-es special-cases are left to protobuf-es (see `supported`).
  if (plan === undefined) return fromBinary(schema, bytes);
  const reader = new Reader(bytes, reuse);
  const message = plan.zero();
  readMessage(plan, reader, message, bytes.byteLength, 1);
  return message as MessageShape<Desc>;
}

type UnknownField = { no: number; wireType: WireType; data: Uint8Array };
export type Fields = Record<string, unknown> & { $unknown?: UnknownField[] };

/**
 * What a decode may hand out again instead of decoding afresh: conversation messages decoded from
 * the same bytes before. Owned by the codec (one per server, bounded by its configuration); a
 * decode without it builds every object new.
 */
export interface DecodedObjectReuse {
  recentMessages: RecentMessages<Fields>;
}
type FieldReader = (reader: Reader, message: Fields, wireType: WireType, depth: number) => void;

interface DecodePlan {
  schema: DescMessage;
  /** A new zero message, the same object `create(schema)` returns. */
  zero: () => Fields;
  /** Readers indexed by field number; contract field numbers are small, so an array lookup. */
  readers: (FieldReader | undefined)[];
}

// protobuf-es's defaults for `fromBinary` (makeReadContext): same limit, same message.
const recursionLimit = 100;
// Plans are derived from descriptors only, never from decoded data, so one table serves every
// codec instance: like protobuf-es's own per-descriptor caches, it is code, not a data cache.
// FeatureSet_FieldPresence.IMPLICIT: the field has no presence and is always set on a zero message.
const IMPLICIT = 2;
const EDITION_PROTO3 = 999;

const plans = new WeakMap<DescMessage, DecodePlan | null>();

function planFor(schema: DescMessage): DecodePlan | undefined {
  let plan = plans.get(schema);
  if (plan === undefined) {
    plan = supported(schema, new Set()) ? buildPlan(schema) : null;
    plans.set(schema, plan);
  }
  return plan ?? undefined;
}

/**
 * Whether this type and every type it reaches decode the plain way: no special in-memory shapes,
 * no prototype-chain zero messages (proto2/editions presence), no groups, no closed enums (whose
 * unknown values protobuf-es moves to `$unknown`). The contextd contract is plain proto3; anything
 * else goes to `fromBinary`, so correctness never depends on this list being exhaustive for the
 * fast path's sake.
 */
function supported(schema: DescMessage, visiting: Set<DescMessage>): boolean {
  if (visiting.has(schema)) return true;
  visiting.add(schema);
  if (needsPrototypeChain(schema)) return false;
  return schema.fields.every((field) => {
    if ("delimitedEncoding" in field && field.delimitedEncoding) return false;
    if (field.enum !== undefined && !field.enum.open) return false;
    const child = field.message;
    return child === undefined || (!specialShapeTypes.has(child.typeName) && supported(child, visiting));
  });
}

// The same test as protobuf-es's create.ts: such types keep defaults on a shared prototype.
function needsPrototypeChain(schema: DescMessage): boolean {
  if (schema.file.edition === EDITION_PROTO3) return false;
  return schema.fields.some((field) => field.presence !== IMPLICIT && field.fieldKind !== "message" && field.oneof === undefined);
}

function buildPlan(schema: DescMessage): DecodePlan {
  const readers: (FieldReader | undefined)[] = [];
  const plan: DecodePlan = { schema, zero: zeroMessageFactory(schema), readers };
  // Registered before the readers are built, so recursive types find their own plan.
  plans.set(schema, plan);
  for (const field of schema.fields) readers[field.number] = fieldReader(field);
  return plan;
}

/** Builds what `createZeroMessage` builds for a proto3 type: same properties, same order. */
function zeroMessageFactory(schema: DescMessage): () => Fields {
  const typeName = schema.typeName;
  const members = schema.members.filter((member) => member.kind === "oneof" || member.presence === IMPLICIT);
  const names = members.map((member) => member.localName);
  const makers = members.map((member): (() => unknown) => {
    if (member.kind === "oneof") return () => ({ case: undefined });
    switch (member.fieldKind) {
      case "list":
        return () => [];
      case "map":
        return () => ({});
      case "enum": {
        const value = member.enum.values[0]!.number;
        return () => value;
      }
      case "scalar": {
        // Bytes zero values are fresh Uint8Arrays; every other zero value is a primitive.
        if (member.scalar === ScalarType.BYTES) return () => new Uint8Array(0);
        const value = scalarZeroValue(member.scalar, member.longAsString);
        return () => value;
      }
      case "message":
        throw new Error(`${member.name}: message fields have presence`);
    }
  });
  const count = names.length;
  return () => {
    const message: Fields = { $typeName: typeName };
    for (let i = 0; i < count; i++) message[names[i]!] = makers[i]!();
    return message;
  };
}

// protobuf-es's readMessage for a length-delimited (never group) message.
function readMessage(plan: DecodePlan, reader: Reader, message: Fields, length: number, depth: number): void {
  if (depth > recursionLimit) {
    throw new Error(`cannot decode ${plan.schema} from binary: maximum recursion depth of ${recursionLimit} reached`);
  }
  const end = reader.pos + length;
  const readers = plan.readers;
  let unknown = message.$unknown;
  while (reader.pos < end) {
    const tag = reader.tagNumber();
    const fieldNo = tag >>> 3;
    const wireType = (tag & 7) as WireType;
    const read = readers[fieldNo];
    if (read === undefined) {
      const data = reader.skip(wireType, fieldNo, recursionLimit - depth);
      (unknown ??= []).push({ no: fieldNo, wireType, data });
      continue;
    }
    read(reader, message, wireType, depth);
  }
  if (unknown !== undefined && unknown.length > 0) message.$unknown = unknown;
}

class Reader extends BinaryReader {
  /** Elements of every repeated field read so far (see `maxRepeatedElements`). */
  elements = 0;
  /** `AppendProviderStream.events` read so far, in all deltas together. */
  streamEvents = 0;

  constructor(
    /** The whole buffer being read (private in BinaryReader). */
    readonly wholeBuffer: Uint8Array,
    readonly reuse: DecodedObjectReuse | undefined,
  ) {
    super(wholeBuffer);
  }

  // BinaryReader.tag() without the [fieldNo, wireType] array per field; same checks, same errors.
  tagNumber(): number {
    const start = this.pos;
    const tag = this.uint32();
    const bytesRead = this.pos - start;
    if (bytesRead > 5 || (bytesRead === 5 && this.wholeBuffer[this.pos - 1]! > 0x0f)) {
      throw new Error("illegal tag: varint overflows uint32");
    }
    const fieldNo = tag >>> 3;
    const wireType = tag & 7;
    if (fieldNo <= 0 || wireType > 5) throw new Error("illegal tag: field no " + fieldNo + " wire type " + wireType);
    return tag;
  }
}

// A length-delimited sub-message into `target` (a zero message, or the one being merged into).
function readSubMessage(plan: DecodePlan, reader: Reader, target: Fields, depth: number): Fields {
  readMessage(plan, reader, target, reader.uint32(), depth + 1);
  return target;
}

function countElement(reader: Reader): void {
  if (++reader.elements > maxRepeatedElements) throw repeatedElementsOverLimit();
}

/** The field whose elements count against `maxStreamEvents` per request, as they are read. */
const streamEventsField = { typeName: "contextd.v1.AppendProviderStream", name: "events" };

// Conversation messages repeat from one request to the next (see RecentMessages), in lists.
const conversationMessageTypeName = "contextd.v1.Message";

// A list element of type contextd.v1.Message: the object decoded from the same bytes before, if
// any; a message that cannot be read is read the usual way, which throws the usual error.
function readRecentMessage(plan: DecodePlan, reader: Reader, depth: number): Fields {
  const recentMessages = reader.reuse?.recentMessages;
  if (recentMessages === undefined) return readSubMessage(plan, reader, plan.zero(), depth);
  const length = reader.uint32();
  const start = reader.pos;
  const end = start + length;
  if (end <= reader.len) {
    const recent = recentMessages.lookup(reader.wholeBuffer, start, end);
    if (recent !== undefined) {
      reader.pos = end;
      return recent;
    }
  }
  const message = plan.zero();
  readMessage(plan, reader, message, length, depth + 1);
  return recentMessages.store(reader.wholeBuffer, start, end, message);
}

type ScalarReader = (reader: Reader) => unknown;

// protobuf-es's readScalar, resolved once per field instead of switched on per value; 64-bit
// values become strings for `jstype = JS_STRING` fields, as reflection's longToLocal does.
function scalarReader(type: ScalarType, utf8Validation: boolean, longAsString: boolean): ScalarReader {
  const read = plainScalarReader(type, utf8Validation);
  return longAsString ? (reader) => String(read(reader)) : read;
}

function plainScalarReader(type: ScalarType, utf8Validation: boolean): ScalarReader {
  switch (type) {
    case ScalarType.STRING:
      return (reader) => reader.string(utf8Validation);
    case ScalarType.BOOL:
      return (reader) => reader.bool();
    case ScalarType.DOUBLE:
      return (reader) => reader.double();
    case ScalarType.FLOAT:
      return (reader) => reader.float();
    case ScalarType.INT32:
      return (reader) => reader.int32();
    case ScalarType.INT64:
      return (reader) => reader.int64();
    case ScalarType.UINT64:
      return (reader) => reader.uint64();
    case ScalarType.FIXED64:
      return (reader) => reader.fixed64();
    case ScalarType.BYTES:
      return (reader) => reader.bytes();
    case ScalarType.FIXED32:
      return (reader) => reader.fixed32();
    case ScalarType.SFIXED32:
      return (reader) => reader.sfixed32();
    case ScalarType.SFIXED64:
      return (reader) => reader.sfixed64();
    case ScalarType.SINT64:
      return (reader) => reader.sint64();
    case ScalarType.UINT32:
      return (reader) => reader.uint32();
    case ScalarType.SINT32:
      return (reader) => reader.sint32();
  }
}

// Only 64-bit integer types are affected by `longAsString`; the flag is absent on other fields.
function isLongAsString(field: DescField): boolean {
  return "longAsString" in field && field.longAsString === true;
}

// protobuf-es's readField + reflection's set for one field, as a closure over the field's names.
function fieldReader(field: DescField): FieldReader {
  const name = field.localName;
  const oneof = field.oneof?.localName;
  switch (field.fieldKind) {
    case "scalar":
    case "enum": {
      // Enums are read as int32; only open enums get here (see `supported`).
      const read =
        field.fieldKind === "enum" ? plainScalarReader(ScalarType.INT32, false) : scalarReader(field.scalar, field.utf8Validation, isLongAsString(field));
      if (oneof === undefined) {
        return (reader, message) => {
          message[name] = read(reader);
        };
      }
      return (reader, message) => {
        message[oneof] = { case: name, value: read(reader) };
      };
    }
    case "message": {
      const childSchema = field.message;
      let child: DecodePlan | undefined;
      // A second occurrence of a singular message field merges into the first, as in protobuf-es.
      if (oneof === undefined) {
        return (reader, message, _wireType, depth) => {
          child ??= planFor(childSchema)!;
          const existing = message[name] as Fields | undefined;
          message[name] = readSubMessage(child, reader, existing ?? child.zero(), depth);
        };
      }
      return (reader, message, _wireType, depth) => {
        child ??= planFor(childSchema)!;
        const current = message[oneof] as { case: string | undefined; value?: Fields };
        const existing = current.case === name ? current.value : undefined;
        message[oneof] = { case: name, value: readSubMessage(child, reader, existing ?? child.zero(), depth) };
      };
    }
    case "list": {
      if (field.listKind === "message") {
        const childSchema = field.message;
        let child: DecodePlan | undefined;
        if (childSchema.typeName === conversationMessageTypeName) {
          return (reader, message, _wireType, depth) => {
            child ??= planFor(childSchema)!;
            countElement(reader);
            (message[name] as unknown[]).push(readRecentMessage(child, reader, depth));
          };
        }
        return (reader, message, _wireType, depth) => {
          child ??= planFor(childSchema)!;
          countElement(reader);
          (message[name] as unknown[]).push(readSubMessage(child, reader, child.zero(), depth));
        };
      }
      const scalar = field.listKind === "enum" ? ScalarType.INT32 : field.scalar;
      const read = scalarReader(scalar, field.utf8Validation, isLongAsString(field));
      const packable = scalar !== ScalarType.STRING && scalar !== ScalarType.BYTES;
      if (field.parent.typeName === streamEventsField.typeName && field.name === streamEventsField.name) {
        return (reader, message) => {
          if (++reader.streamEvents > maxStreamEvents) throw streamEventsOverLimit(reader.streamEvents);
          countElement(reader);
          (message[name] as unknown[]).push(read(reader));
        };
      }
      // Either encoding is accepted whatever the field declares, as the protobuf spec requires.
      return (reader, message, wireType) => {
        const list = message[name] as unknown[];
        if (!(packable && wireType === WireType.LengthDelimited)) {
          countElement(reader);
          list.push(read(reader));
          return;
        }
        const end = reader.uint32() + reader.pos;
        while (reader.pos < end) {
          countElement(reader);
          list.push(read(reader));
        }
      };
    }
    case "map":
      return mapEntryReader(field);
  }
}

// protobuf-es's readMapEntry: key 1 and value 2, zero values for the ones missing.
function mapEntryReader(field: DescField & { fieldKind: "map" }): FieldReader {
  const name = field.localName;
  const readKey = plainScalarReader(field.mapKey, field.utf8Validation);
  const longValues = isLongAsString(field);
  const childSchema = field.mapKind === "message" ? field.message : undefined;
  let child: DecodePlan | undefined;
  const readValue: (reader: Reader, depth: number) => unknown =
    field.mapKind === "message"
      ? (reader, depth) => {
          child ??= planFor(childSchema!)!;
          return readSubMessage(child, reader, child.zero(), depth);
        }
      : field.mapKind === "enum"
        ? (reader) => reader.int32()
        : scalarReader(field.scalar, field.utf8Validation, longValues);
  const zeroKey = scalarZeroValue(field.mapKey, false);
  const zeroValue = (): unknown => {
    switch (field.mapKind) {
      case "message":
        child ??= planFor(childSchema!)!;
        return child.zero();
      case "enum":
        return field.enum.values[0]!.number;
      case "scalar":
        // scalarZeroValue(…, false) gives 0n for 64-bit types; reflection's set stringifies it
        // for `jstype = JS_STRING`.
        return longValues ? String(scalarZeroValue(field.scalar, false)) : scalarZeroValue(field.scalar, false);
    }
  };
  return (reader, message, _wireType, depth) => {
    let key: unknown;
    let value: unknown;
    const length = reader.uint32();
    const end = reader.pos + length;
    while (reader.pos < end) {
      // Like protobuf-es 2.17, an entry field other than 1 and 2 is skipped (an end-group tag
      // there is an error): the first map fields of the contract's random tests (SetMetadata's
      // labels) found the earlier "neither read nor skipped" diverging from fromBinary.
      const tag = reader.tagNumber();
      const fieldNo = tag >>> 3;
      if (fieldNo === 1) key = readKey(reader);
      else if (fieldNo === 2) value = readValue(reader, depth);
      else reader.skip((tag & 7) as WireType, fieldNo, recursionLimit - depth);
    }
    key ??= zeroKey;
    value ??= zeroValue();
    // Reflection's mapKeyToLocal: object keys are strings or numbers, the rest are stringified.
    const localKey = typeof key === "string" || typeof key === "number" ? key : String(key);
    // An own property, as protobuf-es's setOwn: a key "__proto__" (a label) is a key, not the prototype.
    Object.defineProperty(message[name] as object, localKey, { value, writable: true, enumerable: true, configurable: true });
  };
}
