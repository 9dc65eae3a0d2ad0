import { Code, ConnectError } from "@connectrpc/connect";
import { RE2JS } from "re2js";
import {
  RedactionPattern,
  TransformationAction,
  TransformationReason,
  type RedactionHook,
} from "#gen/contextd/v1/compile_pb";
import type { Message, Part } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { segmentEnumerationOrder, segmentField } from "../model/segments.js";
import { analyzeToolRounds } from "../model/tool-rounds.js";
import type { RegexSearch } from "./compile-context.js";
import { setRecord, type CompileWork } from "./working-set.js";

/**
 * One compiled pattern: a name for the replacement token, how it replaces every match (`replacer`
 * gets the match and returns its replacement), an optional check of each match.
 */
interface Redactor {
  name: string;
  replaceAll: (text: string, replacer: (match: string) => string) => string;
  accept?: (match: string) => boolean;
  /** A pattern from the request (re2js): the request path that names it, for `maxCustomPatternText`. */
  customPath?: string;
  /** A built-in pattern's regex, which a `RegexSearch` may run off the event loop. */
  regex?: RegExp;
}

/**
 * Most characters of one text a custom pattern may scan: about 20 ms of re2js (6 to 7 MB/s on
 * `(a+)+$`, 2.6 s over 16 MiB in one call). One scan cannot be interrupted, RE2 does not say how
 * long a match can be (so a text cannot be cut into slices that match the same), and a longer
 * text would hold the event loop from every other caller. Longer texts are RESOURCE_EXHAUSTED
 * naming the pattern, the message and this limit; built-in patterns have no such limit.
 */
export const maxCustomPatternText = 131_072;

/** Texts longer than this are redacted one pattern at a time, with turns of the event loop between. */
const pacedRedactLength = 65_536;

/**
 * A built-in pattern on the JavaScript engine (backtracking, and far faster than re2js: all five
 * over 16 MiB of hex take 124 ms, one re2js pattern over 16 MiB 2.6 s). Each is
 * linear: every repetition is bounded or its match can start only where the run it scans starts
 * (the lookbehinds), and what follows an unbounded repetition cannot be matched by it, so a failed
 * start costs at most its run once. test/core/redaction-linear.test.ts runs each over 400 KB of
 * the texts that make such patterns quadratic.
 */
function builtIn(name: string, pattern: RegExp, accept?: (match: string) => boolean): Redactor {
  return { name, replaceAll: (text, replacer) => text.replace(pattern, replacer), accept, regex: pattern };
}

const builtIns: Record<number, Redactor> = {
  [RedactionPattern.API_KEY]: builtIn(
    "api_key",
    /\b(?:sk-[A-Za-z0-9_-]{16,}|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{20,}|xox[abposr]-[A-Za-z0-9-]{10,})\b|\bBearer\s+[A-Za-z0-9._~+/-]{16,}=*/g,
  ),
  // Starts only where a run of local-part characters starts: without the lookbehind, 100 KB of hex
  // (no "@") was scanned again from each of its characters, 13 s.
  [RedactionPattern.EMAIL]: builtIn("email", /(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}/g),
  [RedactionPattern.CARD_NUMBER]: builtIn("card_number", /\b\d(?:[ -]?\d){12,18}\b/g, passesLuhn),
  [RedactionPattern.IP_ADDRESS]: builtIn(
    "ip_address",
    /\b(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)\b|(?<![\w:])(?:(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}|(?:[0-9A-Fa-f]{1,4}(?::[0-9A-Fa-f]{1,4})*)?::(?:[0-9A-Fa-f]{1,4}(?::[0-9A-Fa-f]{1,4})*)?)(?![\w:])/g,
    (match) => match !== "::",
  ),
  [RedactionPattern.PHONE]: builtIn(
    "phone",
    /(?<![\w+])(?:\+\d{1,3}[ .-]?)?(?:\(\d{2,4}\)[ .-]?|\d{2,4}[ .-])\d{3,4}[ .-]?\d{3,4}\b|(?<![\w+])\+\d{7,14}\b/g,
    (match) => match.replace(/\D/g, "").length >= 10,
  ),
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

/**
 * Custom patterns come from the request, so they run on re2js (RE2's automata in plain
 * JavaScript): time linear in the text whatever the pattern. `(a+)+$` over 30 "a" + "!" took 16 s
 * on the JavaScript engine, doubling per character; re2js answers in under a millisecond. RE2
 * syntax has no backreferences or lookaround: such patterns are INVALID_ARGUMENT naming the
 * pattern. (The native `re2` binding needs a compiler or a downloaded binary at install and a
 * native module in the image; re2-wasm has not been released since 2021; V8's own linear engine
 * is behind an experimental flag.)
 */
function customRedactor(name: string, regex: string, where: string): Redactor {
  let pattern: RE2JS;
  try {
    pattern = RE2JS.compile(regex);
  } catch (error) {
    throw new ConnectError(
      `${where}.regex is not a valid regular expression for RE2, which has no backreferences or lookaround: ${JSON.stringify(regex)}: ${(error as Error).message}`,
      Code.InvalidArgument,
    );
  }
  if (pattern.test("")) throw new ConnectError(`${where}.regex matches the empty string: ${JSON.stringify(regex)}`, Code.InvalidArgument);
  return { name, replaceAll: (text, replacer) => pattern.matcher(text).replaceAll((match: string) => replacer(match)), customPath: where };
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
    if (custom.regex === "") throw new ConnectError(`${where}.regex matches the empty string`, Code.InvalidArgument);
    redactors.push(customRedactor(custom.name, custom.regex, where));
  });
  if (redactors.length === 0) throw new ConnectError(`${path}: no patterns given`, Code.InvalidArgument);
  return redactors;
}

/** `redactText` over one pattern; `message` names the text's message in a refusal. */
function redactWith(text: string, redactor: Redactor, replacement: string, work: CompileWork, message: Message): string {
  if (redactor.customPath !== undefined && text.length > maxCustomPatternText) {
    throw new ConnectError(
      `${redactor.customPath} ("${redactor.name}") (message "${message.id}"): a custom pattern scans at most ${maxCustomPatternText} characters of one text, this text has ${text.length}`,
      Code.ResourceExhausted,
    );
  }
  work.deadline.check("hooks", 1 + (text.length >> 10));
  const token = replacement.replaceAll("{kind}", redactor.name);
  const where = `hooks (redaction ${redactor.name})`;
  // A replacement longer than its match grows the text. The engines keep the pieces of the
  // result as references until the end, so refusing from the replacer comes before the big
  // string is built.
  let length = text.length;
  const result = redactor.replaceAll(text, (match) => {
    if (redactor.accept && !redactor.accept(match)) return match;
    length += token.length - match.length;
    work.textAllowance.assertFits(length, where);
    return token;
  });
  if (result !== text) work.textAllowance.charge(result.length, where);
  return result;
}

function redactText(text: string, redactors: readonly Redactor[], replacement: string, work: CompileWork, message: Message): string {
  let result = text;
  for (const redactor of redactors) result = redactWith(result, redactor, replacement, work, message);
  return result;
}

/**
 * `redactWith` for a built-in pattern whose matches `search` finds off the event loop: the same
 * result, replacement by replacement, with turns of the event loop while the result is built.
 */
async function redactSearched(text: string, redactor: Redactor & { regex: RegExp }, replacement: string, work: CompileWork, search: RegexSearch): Promise<string> {
  work.deadline.checkNow("hooks");
  const token = replacement.replaceAll("{kind}", redactor.name);
  const where = `hooks (redaction ${redactor.name})`;
  const positions = await search(redactor.regex, text);
  // The search took its time elsewhere: the call may be over by now.
  work.deadline.checkNow("hooks");
  const chunks: string[] = [];
  let pieces: string[] = [];
  let length = text.length;
  let copiedTo = 0;
  let replaced = 0;
  for (let index = 0; index < positions.length; index += 2) {
    const start = positions[index]!;
    const end = positions[index + 1]!;
    const match = text.slice(start, end);
    if (redactor.accept && !redactor.accept(match)) continue;
    length += token.length - match.length;
    work.textAllowance.assertFits(length, where);
    pieces.push(text.slice(copiedTo, start), token);
    copiedTo = end;
    replaced++;
    if (work.deadline.check("hooks")) {
      chunks.push(pieces.join(""));
      pieces = [];
      await work.deadline.pause("hooks");
    }
  }
  if (replaced === 0) return text;
  pieces.push(text.slice(copiedTo));
  chunks.push(pieces.join(""));
  const result = chunks.join("");
  work.textAllowance.charge(result.length, where);
  return result;
}

/**
 * `redactText` for a long text: built-in patterns searched off the event loop when the context
 * gives a `search`, and a turn of the event loop between patterns when one is due (in place, one
 * built-in pattern over 16 MiB holds the loop 25–90 ms).
 */
async function redactTextPaced(text: string, redactors: readonly Redactor[], replacement: string, work: CompileWork, message: Message, search: RegexSearch | undefined): Promise<string> {
  let result = text;
  for (const redactor of redactors) {
    const regex = redactor.regex;
    result = search && regex ? await redactSearched(result, { ...redactor, regex }, replacement, work, search) : redactWith(result, redactor, replacement, work, message);
    if (work.deadline.checkNow("hooks")) await work.deadline.pause("hooks");
  }
  return result;
}

/** The texts `redactMessage` redacts, in order. */
function redactedTexts(message: Message): string[] {
  const texts: string[] = [];
  for (const part of message.parts) {
    const kind = part.kind;
    if (kind.case === "text") texts.push(kind.value.text);
    else if (kind.case === "toolResult" && kind.value.payload && kind.value.payload.text !== "") texts.push(kind.value.payload.text);
  }
  return texts;
}

/** Redacts text parts and tool-result texts through `redact`; returns the same object when nothing matched. */
function redactMessage(message: Message, redact: (text: string) => string): Message {
  let changed = false;
  const parts = message.parts.map((part): Part => {
    const kind = part.kind;
    if (kind.case === "text") {
      const text = redact(kind.value.text);
      if (text === kind.value.text) return part;
      changed = true;
      return { ...part, kind: { case: "text", value: { ...kind.value, text } } };
    }
    if (kind.case === "toolResult" && kind.value.payload && kind.value.payload.text !== "") {
      const text = redact(kind.value.payload.text);
      if (text === kind.value.payload.text) return part;
      changed = true;
      return { ...part, kind: { case: "toolResult", value: { ...kind.value, payload: { ...kind.value.payload, text } } } };
    }
    return part;
  });
  return changed ? { ...message, parts } : message;
}

/** `redactMessage` with every redactor; long texts first, paced, then the rest as they come. */
function redactMessageAll(message: Message, redactors: readonly Redactor[], replacement: string, work: CompileWork, search: RegexSearch | undefined): Message | Promise<Message> {
  const long = redactedTexts(message).filter((text) => text.length > pacedRedactLength);
  const redact = (text: string) => redactText(text, redactors, replacement, work, message);
  if (long.length === 0) return redactMessage(message, redact);
  return (async () => {
    const done = new Map<string, string>();
    for (const text of long) if (!done.has(text)) done.set(text, await redactTextPaced(text, redactors, replacement, work, message, search));
    return redactMessage(message, (text) => done.get(text) ?? redact(text));
  })();
}

/**
 * Stage 6: hooks in order, on the segments only (pending and the current turn join the payload
 * later, untouched). A changed message is `formatted/transform_hook`; with `remove_message` a
 * matching message is dropped, `formatted/replaced_by_hook` — in history together with its whole
 * tool round, so no call loses its result. The originals stay in `source` and persistence. Texts
 * longer than `pacedRedactLength` are searched by `search` when given (off the event loop).
 */
export async function applyHooks(work: CompileWork, search?: RegexSearch): Promise<void> {
  for (const [hookIndex, hook] of work.request.hooks.entries()) {
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
      const redacted: Message[] = [];
      for (const message of messages) {
        const one = redactMessageAll(message, redactors, replacement, work, search);
        redacted.push(one instanceof Promise ? await one : one);
        if (work.deadline.check("hooks")) await work.deadline.pause("hooks");
      }
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
  }
}
