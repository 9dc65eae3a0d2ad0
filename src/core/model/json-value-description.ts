/**
 * What a parsed JSON value is, in JSON terms, for error messages: never JavaScript's own wording
 * (`typeof` gives "a undefined", "a object"), which a caller writing JSON or protobuf cannot map
 * back to what they sent.
 */
export function describeJsonValue(value: unknown): string {
  if (value === undefined) return "nothing (the field is absent)";
  if (value === null) return "null";
  if (Array.isArray(value)) return "a JSON array";
  if (typeof value === "object") return "a JSON object";
  if (typeof value === "boolean") return `the JSON boolean ${value}`;
  return `a JSON ${typeof value}`; // string or number: JSON.parse produces nothing else
}
