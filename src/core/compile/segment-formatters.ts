import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  IntroducedMessageSchema,
  TransformationAction,
  TransformationReason,
  type SegmentFormatter,
} from "#gen/contextd/v1/compile_pb";
import { MessageSchema, PartSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import type { Segment } from "#gen/contextd/v1/state_pb";
import { hasTextPart, mapTextParts, messageText } from "../model/message-text.js";
import { segmentField, segmentName, type SegmentHolder } from "../model/segments.js";
import { occurrences } from "./text-allowance.js";
import { recordPassed, setRecord, type CompileWork } from "./working-set.js";

const xmlName = /^[A-Za-z_][A-Za-z0-9._-]*$/;

/**
 * Applies built-in formatters in order to `segments` and records the outcome in `work` (stage 8;
 * targets call it with their own formatters and records). In-place changes (xml_tag, prefix,
 * template) are `formatted/segment_formatter`; join replaces the segment by one message, its
 * inputs `formatted/replaced_by_formatter`. Only text parts are formatted; join refuses segments
 * with non-text parts (tool calls cannot be joined into prose). The length of every output is
 * charged to the compile's text allowance before it is built.
 */
export async function applySegmentFormatters(work: CompileWork, formatters: readonly SegmentFormatter[], fieldPath: string): Promise<void> {
  for (const [index, formatter] of formatters.entries()) {
    const path = `${fieldPath}[${index}]`;
    const field = segmentField(formatter.segment, `${path}.segment`);
    const messages = work.segments[field];
    const formatted = await formatSegment(work, formatter, messages, path);
    work.segments = { ...work.segments, [field]: formatted } as SegmentHolder;
    if (work.deadline.checkNow("segment_formatters")) await work.deadline.pause("segment_formatters");
  }
}

async function formatSegment(work: CompileWork, formatter: SegmentFormatter, messages: Message[], path: string): Promise<Message[]> {
  const segment = formatter.segment;
  const kind = formatter.kind;
  switch (kind.case) {
    case "xmlTag": {
      if (!xmlName.test(kind.value.tag) || /^xml/i.test(kind.value.tag)) {
        throw new ConnectError(`${path}.xml_tag.tag: "${kind.value.tag}" is not a valid XML name`, Code.InvalidArgument);
      }
      const added = 2 * kind.value.tag.length + 5;
      return formatInPlace(work, messages, segment, path, (length) => length + added, (text) => `<${kind.value.tag}>${text}</${kind.value.tag}>`);
    }
    case "prefix":
      return formatInPlace(work, messages, segment, path, (length) => length + kind.value.text.length, (text) => kind.value.text + text);
    case "template": {
      const template = kind.value.template;
      if (!template.includes("{{content}}")) {
        throw new ConnectError(`${path}.template.template must contain {{content}}`, Code.InvalidArgument);
      }
      const copies = occurrences(template, "{{content}}");
      const fixed = template.length - copies * "{{content}}".length;
      return formatInPlace(work, messages, segment, path, (length) => fixed + copies * length, (text) => template.replaceAll("{{content}}", text));
    }
    case "join":
      return join(work, messages, segment, kind.value, path);
    default:
      throw new ConnectError(`${path}: no formatter variant set`, Code.InvalidArgument);
  }
}

async function formatInPlace(
  work: CompileWork,
  messages: Message[],
  segment: Segment,
  path: string,
  formattedLength: (length: number) => number,
  format: (text: string) => string,
): Promise<Message[]> {
  const formattedMessages = new Array<Message>(messages.length);
  for (let index = 0; index < messages.length; index++) {
    const message = messages[index]!;
    let length = 0;
    let textLength = 0;
    for (const part of message.parts) {
      if (part.kind.case !== "text") continue;
      length += formattedLength(part.kind.value.text.length);
      textLength += part.kind.value.text.length;
    }
    work.textAllowance.charge(length, `${path} (message "${message.id}")`);
    const due = work.deadline.check("segment_formatters", 1 + (textLength >> 10));
    // Each text part is formatted separately, so a message keeps its part structure.
    const formatted = mapTextParts(message, format);
    if (formatted !== message) setRecord(work, message.id, TransformationAction.FORMATTED, TransformationReason.SEGMENT_FORMATTER, segment);
    formattedMessages[index] = formatted;
    if (due) await work.deadline.pause("segment_formatters");
  }
  return formattedMessages;
}

function join(
  work: CompileWork,
  messages: Message[],
  segment: Segment,
  options: { separator: string; role: Role; id: string },
  path: string,
): Message[] {
  if (messages.length === 0) return messages;
  if (options.role !== Role.UNSPECIFIED && Role[options.role] === undefined) {
    throw new ConnectError(`${path}.join.role: unknown role ${options.role}`, Code.InvalidArgument);
  }
  const withOtherParts = messages.find((message) => message.parts.some((part) => part.kind.case !== "text"));
  if (withOtherParts) {
    throw new ConnectError(
      `${path}.join: message "${withOtherParts.id}" in ${segmentName(segment)} has non-text parts, which cannot be joined`,
      Code.InvalidArgument,
    );
  }
  const separator = options.separator === "" ? "\n\n" : options.separator;
  const texts = messages.filter(hasTextPart);
  let length = Math.max(0, texts.length - 1) * separator.length;
  for (const message of texts) {
    let parts = 0;
    for (const part of message.parts) if (part.kind.case === "text") length += (parts++ > 0 ? 1 : 0) + part.kind.value.text.length;
  }
  work.textAllowance.charge(length, `${path}.join (segment ${segmentName(segment)})`);
  work.deadline.checkNow("segment_formatters");
  const text = texts.map(messageText).join(separator);
  const joined = create(MessageSchema, {
    id: options.id === "" ? `joined:${segmentName(segment)}` : options.id,
    role: options.role === Role.UNSPECIFIED ? messages[0]!.role : options.role,
    parts: [create(PartSchema, { kind: { case: "text", value: { text } } })],
  });
  for (const message of messages) {
    if (message.id === joined.id) continue;
    setRecord(work, message.id, TransformationAction.FORMATTED, TransformationReason.REPLACED_BY_FORMATTER, segment);
  }
  work.introduced.push(create(IntroducedMessageSchema, { segment, message: joined }));
  recordPassed(work, [joined], segment);
  return [joined];
}
