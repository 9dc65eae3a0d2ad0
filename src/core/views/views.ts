import { Code, ConnectError } from "@connectrpc/connect";
import { Role, type Message, type Part } from "#gen/contextd/v1/message_pb";
import { toolPayloadText } from "../model/payload-text.js";

/** The built-in view names. */
export const viewNames = ["llm_xml", "flat_classifier"] as const;
export type ViewName = (typeof viewNames)[number];

export function isViewName(name: string): name is ViewName {
  return (viewNames as readonly string[]).includes(name);
}

/**
 * Renders messages as a built-in view (semantics §3): `llm_xml` as `<role>content</role>\n` with
 * the content XML-escaped, `flat_classifier` as `role: content\n`. Parts render as their text,
 * `[image:URL]`, `[tool_call:NAME]`, `[tool_result:PLAIN]`, `[file:NAME]`, joined by "\n";
 * reasoning is private to the model and left out. Reads its input only.
 */
export function renderView(view: string, messages: readonly Message[], fieldPath: string): string {
  if (!isViewName(view)) {
    throw new ConnectError(`${fieldPath}: unknown view "${view}" (known: ${viewNames.join(", ")})`, Code.InvalidArgument);
  }
  let text = "";
  for (const message of messages) {
    const role = roleName(message.role);
    const content = messageContent(message);
    text += view === "llm_xml" ? `<${role}>${escapeXml(content)}</${role}>\n` : `${role}: ${content}\n`;
  }
  return text;
}

function roleName(role: Role): string {
  return (Role[role] ?? "unspecified").toLowerCase();
}

function messageContent(message: Message): string {
  const pieces: string[] = [];
  for (const part of message.parts) {
    const piece = partContent(part);
    if (piece !== undefined) pieces.push(piece);
  }
  return pieces.join("\n");
}

function partContent(part: Part): string | undefined {
  const kind = part.kind;
  switch (kind.case) {
    case "text":
      return kind.value.text;
    case "image":
      return `[image:${kind.value.url !== "" ? kind.value.url : `data:${kind.value.mimeType}`}]`;
    case "toolCall":
      return `[tool_call:${kind.value.name}]`;
    case "toolResult":
      return `[tool_result:${toolPayloadText(kind.value.payload)}]`;
    case "file":
      return `[file:${kind.value.name !== "" ? kind.value.name : kind.value.uri}]`;
    default:
      return undefined;
  }
}

function escapeXml(text: string): string {
  return text.replace(/[&<>"']/g, (char) => `&${{ "&": "amp", "<": "lt", ">": "gt", '"': "quot", "'": "apos" }[char]};`);
}
