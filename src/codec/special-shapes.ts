import type { DescMessage } from "@bufbuild/protobuf";

/**
 * Types whose in-memory shape protobuf-es special-cases (unboxed wrappers, JSON Struct and Value):
 * the codec's own decoder and encoder handle only the plain shape and leave a schema that reaches
 * one of these to protobuf-es. None is in the contextd contract.
 */
export const specialShapeTypes: ReadonlySet<string> = new Set([
  "google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue",
  "google.protobuf.DoubleValue", "google.protobuf.FloatValue", "google.protobuf.Int64Value", "google.protobuf.UInt64Value",
  "google.protobuf.Int32Value", "google.protobuf.UInt32Value", "google.protobuf.BoolValue", "google.protobuf.StringValue",
  "google.protobuf.BytesValue",
]);

// Derived from descriptors only: code, not a data cache (like protobuf-es's per-descriptor caches).
const reachesSpecialShapeCache = new WeakMap<DescMessage, boolean>();

/** Whether `schema` or a type it reaches has a special shape. */
export function reachesSpecialShape(schema: DescMessage, visiting = new Set<DescMessage>()): boolean {
  const cached = reachesSpecialShapeCache.get(schema);
  if (cached !== undefined) return cached;
  if (visiting.has(schema)) return false;
  visiting.add(schema);
  const reaches = schema.fields.some((field) => {
    const child = field.message;
    return child !== undefined && (specialShapeTypes.has(child.typeName) || reachesSpecialShape(child, visiting));
  });
  visiting.delete(schema);
  if (visiting.size === 0) reachesSpecialShapeCache.set(schema, reaches);
  return reaches;
}
