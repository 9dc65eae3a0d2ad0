import type { ToolPayload } from "../../../gen/ts/contextd/v1/message_pb.js";

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
  // Without whitespace there is nothing to compact; skip the parse on this common path.
  if (!/\s/.test(data)) return data;
  try {
    return JSON.stringify(JSON.parse(data));
  } catch {
    return data;
  }
}
