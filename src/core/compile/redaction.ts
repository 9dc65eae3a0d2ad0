import { Code, ConnectError } from "@connectrpc/connect";
import {
  RedactionPattern,
  TransformationAction,
  TransformationReason,
  type RedactionHook,
} from "../../../gen/ts/contextd/v1/compile_pb.js";
import type { Message, Part } from "../../../gen/ts/contextd/v1/message_pb.js";
import { Segment } from "../../../gen/ts/contextd/v1/state_pb.js";
import { segmentEnumerationOrder, segmentField } from "../model/segments.js";
import { analyzeToolRounds } from "../model/tool-rounds.js";
import { setRecord, type CompileWork } from "./working-set.js";

/** One compiled pattern: a name for the replacement token, a global regex, an optional check of each match. */
interface Redactor {
  name: string;
  pattern: RegExp;
  accept?: (match: string) => boolean;
}

const builtIns: Record<number, Redactor> = {
  [RedactionPattern.API_KEY]: {
    name: "api_key",
    pattern: /\b(?:sk-[A-Za-z0-9_-]{16,}|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{20,}|xox[abposr]-[A-Za-z0-9-]{10,})\b|\bBearer\s+[A-Za-z0-9._~+/-]{16,}=*/g,
  },
  [RedactionPattern.EMAIL]: { name: "email", pattern: /[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}/g },
  [RedactionPattern.CARD_NUMBER]: { name: "card_number", pattern: /\b\d(?:[ -]?\d){12,18}\b/g, accept: passesLuhn },
  [RedactionPattern.IP_ADDRESS]: {
    name: "ip_address",
    pattern:
      /\b(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)\b|(?<![\w:])(?:(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}|(?:[0-9A-Fa-f]{1,4}(?::[0-9A-Fa-f]{1,4})*)?::(?:[0-9A-Fa-f]{1,4}(?::[0-9A-Fa-f]{1,4})*)?)(?![\w:])/g,
    accept: (match) => match !== "::",
  },
  [RedactionPattern.PHONE]: {
    name: "phone",
    pattern: /(?<![\w+])(?:\+\d{1,3}[ .-]?)?(?:\(\d{2,4}\)[ .-]?|\d{2,4}[ .-])\d{3,4}[ .-]?\d{3,4}\b|(?<![\w+])\+\d{7,14}\b/g,
    accept: (match) => match.replace(/\D/g, "").length >= 10,
  },
};

// Card and IP shapes before phone, so their digits are not taken for a phone number.
const builtInOrder = [RedactionPattern.API_KEY, RedactionPattern.EMAIL, RedactionPattern.CARD_NUMBER, RedactionPattern.IP_ADDRESS, RedactionPattern.PHONE];

function passesLuhn(match: string): boolean {
  const digits = match.replace(/\D/g, "");
  if (digits.length < 13 || digits.length > 19) return false;
  let sum = 0;
  for (let index = 0; index < digits.length; index++) {
    let digit = digits.charCodeAt(digits.length - 1 - index) - 48;
    if (index % 2 === 1) {
      digit *= 2;
      if (digit > 9) digit -= 9;
    }
    sum += digit;
  }
  return sum % 10 === 0;
}

/** Compiles a hook's patterns; invalid or empty-matching custom regexes are INVALID_ARGUMENT. */
function compileRedactors(hook: RedactionHook, path: string): Redactor[] {
  const redactors: Redactor[] = [];
  hook.patterns.forEach((pattern, index) => {
    if (!builtIns[pattern]) throw new ConnectError(`${path}.patterns[${index}]: unknown redaction pattern ${pattern}`, Code.InvalidArgument);
  });
  for (const pattern of builtInOrder) if (hook.patterns.includes(pattern)) redactors.push(builtIns[pattern]!);
  hook.customPatterns.forEach((custom, index) => {
    const where = `${path}.custom_patterns[${index}]`;
    if (custom.name === "") throw new ConnectError(`${where}.name is required`, Code.InvalidArgument);
    let pattern: RegExp;
    try {
      pattern = new RegExp(custom.regex, "g");
    } catch (error) {
      throw new ConnectError(`${where}.regex is not a valid regular expression: ${(error as Error).message}`, Code.InvalidArgument);
    }
    if (custom.regex === "" || pattern.test("")) {
      throw new ConnectError(`${where}.regex matches the empty string`, Code.InvalidArgument);
    }
    pattern.lastIndex = 0;
    redactors.push({ name: custom.name, pattern });
  });
  if (redactors.length === 0) throw new ConnectError(`${path}: no patterns given`, Code.InvalidArgument);
  return redactors;
}

function redactText(text: string, redactors: readonly Redactor[], replacement: string): string {
  let result = text;
  for (const redactor of redactors) {
    redactor.pattern.lastIndex = 0;
    const token = replacement.replaceAll("{kind}", redactor.name);
    result = result.replace(redactor.pattern, (match) => (redactor.accept && !redactor.accept(match) ? match : token));
  }
  return result;
}

/** Redacts text parts and tool-result texts; returns the same object when nothing matched. */
function redactMessage(message: Message, redactors: readonly Redactor[], replacement: string): Message {
  let changed = false;
  const parts = message.parts.map((part): Part => {
    const kind = part.kind;
    if (kind.case === "text") {
      const text = redactText(kind.value.text, redactors, replacement);
      if (text === kind.value.text) return part;
      changed = true;
      return { ...part, kind: { case: "text", value: { ...kind.value, text } } };
    }
    if (kind.case === "toolResult" && kind.value.payload && kind.value.payload.text !== "") {
      const text = redactText(kind.value.payload.text, redactors, replacement);
      if (text === kind.value.payload.text) return part;
      changed = true;
      return { ...part, kind: { case: "toolResult", value: { ...kind.value, payload: { ...kind.value.payload, text } } } };
    }
    return part;
  });
  return changed ? { ...message, parts } : message;
}

/**
 * Stage 5: hooks in order, on the segments only (pending and the current turn join the payload
 * later, untouched). A changed message is `formatted/transform_hook`; with `remove_message` a
 * matching message is dropped, `formatted/replaced_by_hook` — in history together with its whole
 * tool round, so no call loses its result. The originals stay in `source` and persistence.
 */
export function applyHooks(work: CompileWork): void {
  work.request.hooks.forEach((hook, hookIndex) => {
    const path = `hooks[${hookIndex}]`;
    if (hook.kind.case !== "redaction") throw new ConnectError(`${path}: no hook variant set`, Code.InvalidArgument);
    const redaction = hook.kind.value;
    const redactors = compileRedactors(redaction, `${path}.redaction`);
    const replacement = redaction.replacement === "" ? "[REDACTED:{kind}]" : redaction.replacement;
    redaction.segments.forEach((segment, index) => segmentField(segment, `${path}.redaction.segments[${index}]`));
    const segments = redaction.segments.length === 0 ? segmentEnumerationOrder : redaction.segments;
    for (const segment of segments) {
      const field = segmentField(segment, `${path}.redaction.segments`);
      const messages = work.segments[field];
      const redacted = messages.map((message) => redactMessage(message, redactors, replacement));
      if (redacted.every((message, index) => message === messages[index])) continue;
      if (!redaction.removeMessage) {
        redacted.forEach((message, index) => {
          if (message !== messages[index]) setRecord(work, message.id, TransformationAction.FORMATTED, TransformationReason.TRANSFORM_HOOK, segment);
        });
        work.segments = { ...work.segments, [field]: redacted };
        continue;
      }
      const remove = new Array<boolean>(messages.length).fill(false);
      const units = segment === Segment.HISTORY ? analyzeToolRounds(messages, { allowOpenTail: true }).units : undefined;
      redacted.forEach((message, index) => {
        if (message === messages[index]) return;
        const unit = units?.find((candidate) => candidate.start <= index && index < candidate.end);
        for (let at = unit ? unit.start : index; at < (unit ? unit.end : index + 1); at++) remove[at] = true;
      });
      const kept: Message[] = [];
      messages.forEach((message, index) => {
        if (remove[index]) setRecord(work, message.id, TransformationAction.FORMATTED, TransformationReason.REPLACED_BY_HOOK, segment);
        else kept.push(message);
      });
      work.segments = { ...work.segments, [field]: kept };
    }
  });
}
