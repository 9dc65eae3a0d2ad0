import type { ToolPayload } from "#gen/contextd/v1/message_pb";

/**
 * The plain text of a tool payload (semantics §1): the first non-empty of `text`, `data` as compact
 * JSON, `error.message`, `progress.message`, `control.action`, "[N bytes]" for binary, else "".
 * Views, estimators and text-only providers all read a payload through this one function.
 */
export function toolPayloadText(payload: ToolPayload | undefined): string {
  if (!payload) return "";
  if (payload.text !== "") return payload.text;
  if (payload.data !== "") return compactJson(payload.data);
  if (payload.error && payload.error.message !== "") return payload.error.message;
  if (payload.progress && payload.progress.message !== "") return payload.progress.message;
  if (payload.control && payload.control.action !== "") return payload.control.action;
  if (payload.binary) return `[${payload.binary.data.length} bytes]`;
  return "";
}

/**
 * `data` is meant to be JSON text; hosts often send it pretty-printed. Compact form keeps token
 * counts and fingerprints independent of whitespace. Text that is not JSON is returned unchanged
 * rather than rejected: the payload is host data, not ours to validate here.
 */
function compactJson(data: string): string {
  // Without whitespace between tokens there is nothing to compact; skip the parse on this common
  // path (arguments whose strings hold prose would otherwise be re-parsed at every count).
  if (!hasWhitespaceOutsideStrings(data)) return data;
  try {
    return JSON.stringify(JSON.parse(data));
  } catch {
    return data;
  }
}

/** True when JSON-like text has whitespace outside its string literals. */
function hasWhitespaceOutsideStrings(data: string): boolean {
  let inString = false;
  for (let index = 0; index < data.length; index++) {
    const unit = data.charCodeAt(index);
    if (inString) {
      if (unit === 0x5c /* \\ */) index++;
      else if (unit === 0x22 /* " */) inString = false;
    } else if (unit === 0x22) inString = true;
    else if (unit === 0x20 || unit === 0x0a || unit === 0x0d || unit === 0x09) return true;
  }
  return false;
}
