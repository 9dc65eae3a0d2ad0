import { RE2JS } from "re2js";
import { SummaryFactKind, type SummaryFact, type SummaryTemplate } from "#gen/contextd/v1/context_service_pb";
import type { Message, Part } from "#gen/contextd/v1/message_pb";
import { toolPayloadText } from "../model/payload-text.js";

/**
 * Why it exists: summaries written from a bare list of messages keep the decisions and lose the
 * evidence (the file paths, commands and error messages they rest on). A SUMMARIZE compile's
 * request gives the caller's summarizer a structured template and the facts found in the range it
 * summarises, so a summary can keep them word for word. The facts are found by re2js patterns,
 * whose time is linear in the text, over at most `maxScannedCharactersPerText` of each text and
 * `maxScannedCharacters` in all, and at most `maxFacts` facts are kept: the cost of a request is
 * bounded whatever the messages hold.
 */

/** Most facts one summarize request carries. */
export const maxFacts = 256;
/** Longest fact, in UTF-16 code units (cut at a character boundary). */
export const maxFactCharacters = 512;
/** Most characters of the messages' text one request scans (1 MiB). */
export const maxScannedCharacters = 1024 * 1024;
/**
 * Most characters scanned of one text: a longer one (a large tool output) is scanned at its first
 * and its last half of this, where commands echo and errors and test summaries end up.
 */
export const maxScannedCharactersPerText = 64 * 1024;

const sections: Array<{ key: string; title: string; instruction: string }> = [
  { key: "goal", title: "Goal", instruction: "What the user wants done, in their words where the wording matters." },
  { key: "decisions", title: "Decisions", instruction: "What was decided or done and why, each with the file, command or error it rests on." },
  { key: "open_questions", title: "Open questions", instruction: "What is still unknown, unanswered or left to do." },
  { key: "files", title: "Files", instruction: "Every file path read, written or named, exactly as written." },
  { key: "commands", title: "Commands", instruction: "Every command run, exactly as written, and what it gave." },
  { key: "errors", title: "Errors", instruction: "Every error message met, exactly as written, and whether it was resolved." },
];

/** The one template every summarize request carries (a constant: it depends on nothing). */
export const summaryTemplate: SummaryTemplate = {
  $typeName: "contextd.v1.SummaryTemplate",
  sections: sections.map((section) => ({ $typeName: "contextd.v1.SummaryTemplateSection", ...section })),
  text: sections.map((section) => `## ${section.title}\n${section.instruction}`).join("\n\n"),
};

// The patterns are RE2 (linear time, no backtracking). `.` stops at a line end.
const urlPattern = RE2JS.compile("https?://[^\\s<>\"'`(){}\\[\\]]+");
const pathPattern = RE2JS.compile("(?:~/|\\.{1,2}/|/)?(?:[A-Za-z0-9_@+.-]+/)+[A-Za-z0-9_@+.-]+");
const promptLinePattern = RE2JS.compile("(?m)^[ \\t]*\\$ ([^\\n]+)$");
const inlineCodePattern = RE2JS.compile("`([^`\\n]{2,512})`");
const errorLinePattern = RE2JS.compile(
  "(?m)^[^\\n]*?(?:\\b[A-Z][A-Za-z]*(?:Error|Exception)|\\b(?:error|Error|ERROR|fatal|FATAL|panic))(?:\\[[^\\]\\n]*\\])?: [^\\n]*$|^[ \\t]*(?:FAIL|FAILED|Traceback)\\b[^\\n]*$",
);
const idPattern = RE2JS.compile(
  "\\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\\b|\\b[0-9a-f]{7,40}\\b|\\b[A-Z][A-Z0-9]{1,9}-[0-9]{1,7}\\b",
);

/** Programs whose inline code (`npm test`) is taken for a command. */
const commandPrograms = new Set([
  "bash", "bun", "cargo", "cat", "cd", "chmod", "cp", "curl", "deno", "docker", "find", "gh", "git", "go", "grep", "helm", "kubectl",
  "ls", "make", "mkdir", "mv", "node", "npm", "npx", "pip", "pnpm", "pytest", "python", "python3", "rg", "rm", "sed", "sh", "ssh",
  "sudo", "tar", "terraform", "uv", "wget", "yarn",
]);
/** Tool-call argument keys that hold a command line. */
const commandKeys = ["command", "cmd", "script"];

/** The facts of `messages` in the order they first appear, each once, and whether a bound cut them short. */
export function extractSummaryFacts(messages: readonly Message[]): { facts: SummaryFact[]; truncated: boolean } {
  const facts: SummaryFact[] = [];
  const seen = new Set<string>();
  let scanned = 0;
  let truncated = false;
  let messageId = "";
  const add = (kind: SummaryFactKind, raw: string) => {
    const text = cut(raw.trim());
    if (text === "") return;
    const key = `${kind}:${text}`;
    if (seen.has(key)) return;
    if (facts.length >= maxFacts) {
      truncated = true;
      return;
    }
    seen.add(key);
    facts.push({ $typeName: "contextd.v1.SummaryFact", kind, text, messageId });
  };
  /** The part of `text` the scan allowance still covers: its head, and its tail when it is long. */
  const allowance = (text: string): string[] => {
    let pieces = [text];
    if (text.length > maxScannedCharactersPerText) {
      const half = maxScannedCharactersPerText / 2;
      pieces = [text.slice(0, half), text.slice(text.length - half)];
      truncated = true;
    }
    return pieces.map((piece) => {
      const room = Math.max(0, maxScannedCharacters - scanned);
      if (piece.length > room) truncated = true;
      const taken = piece.length > room ? piece.slice(0, room) : piece;
      scanned += taken.length;
      return taken;
    });
  };
  const scanText = (text: string) => {
    for (const piece of allowance(text)) scanFreeText(piece, add);
  };
  const scanParts = (parts: readonly Part[]) => {
    for (const part of parts) {
      const kind = part.kind;
      switch (kind.case) {
        case "text":
          scanText(kind.value.text);
          break;
        case "toolCall": {
          add(SummaryFactKind.TOOL_NAME, kind.value.name);
          const args = toolPayloadText(kind.value.arguments);
          if (args.length <= maxScannedCharactersPerText) for (const command of argumentCommands(args)) add(SummaryFactKind.COMMAND, command);
          scanText(args);
          break;
        }
        case "toolResult": {
          const output = toolPayloadText(kind.value.payload);
          if (kind.value.isError) add(SummaryFactKind.ERROR_MESSAGE, firstLine(output));
          scanText(output);
          scanParts(kind.value.contentParts);
          break;
        }
        case "providerCompaction":
          scanText(kind.value.summary ?? "");
          break;
        default:
          break;
      }
    }
  };
  for (const message of messages) {
    if (truncated && scanned >= maxScannedCharacters) break;
    messageId = message.id;
    scanParts(message.parts);
  }
  return { facts, truncated };
}

/** URLs, then paths outside them, commands, error lines and ids of one text. */
function scanFreeText(text: string, add: (kind: SummaryFactKind, text: string) => void): void {
  if (text === "") return;
  // URLs are masked before paths are looked for, so "https://a.b/c/d.html" is not also a path.
  let masked = "";
  let last = 0;
  const urls = urlPattern.matcher(text);
  while (urls.find()) {
    add(SummaryFactKind.URL, withoutTrailing(cut(urls.group()!), ".,;:!?"));
    masked += text.slice(last, urls.start()) + " ".repeat(urls.end() - urls.start());
    last = urls.end();
  }
  masked += text.slice(last);
  const paths = pathPattern.matcher(masked);
  while (paths.find()) {
    const path = withoutTrailing(cut(paths.group()!), ".,;:");
    if (looksLikePath(path)) add(SummaryFactKind.FILE_PATH, path);
  }
  const prompts = promptLinePattern.matcher(text);
  while (prompts.find()) add(SummaryFactKind.COMMAND, prompts.group(1)!);
  const code = inlineCodePattern.matcher(text);
  while (code.find()) {
    const inline = code.group(1)!.trim();
    const space = inline.indexOf(" ");
    if (commandPrograms.has(space < 0 ? inline : inline.slice(0, space))) add(SummaryFactKind.COMMAND, inline);
  }
  const errors = errorLinePattern.matcher(text);
  while (errors.find()) add(SummaryFactKind.ERROR_MESSAGE, errors.group()!);
  const ids = idPattern.matcher(text);
  while (ids.find()) {
    const id = ids.group()!;
    // A run of hex digits is a commit hash only with a letter and a digit in it ("deadbeef1", not "1234567" or "defaced").
    if (id.includes("-") || (hasCharIn(id, "a", "f") && hasCharIn(id, "0", "9"))) add(SummaryFactKind.ID, id);
  }
}

/**
 * A path names a file or directory for sure when it is absolute or relative ("/var/log",
 * "./x", "~/y") or its last segment has an extension ("src/app.ts"); "and/or" and "n/a" are words.
 */
function looksLikePath(path: string): boolean {
  if (path.startsWith("/") || path.startsWith("./") || path.startsWith("../") || path.startsWith("~/")) return path.length > 2;
  const last = path.slice(path.lastIndexOf("/") + 1);
  const dot = last.lastIndexOf(".");
  const extension = dot < 0 ? "" : last.slice(dot + 1);
  return extension.length >= 1 && extension.length <= 10 && [...extension].every((char) => isAlphanumeric(char));
}

function isAlphanumeric(char: string): boolean {
  return (char >= "a" && char <= "z") || (char >= "A" && char <= "Z") || (char >= "0" && char <= "9");
}

function hasCharIn(text: string, low: string, high: string): boolean {
  for (const char of text) if (char >= low && char <= high) return true;
  return false;
}

/** `text` without a trailing run of the characters in `characters` (sentence punctuation after a URL or path). */
function withoutTrailing(text: string, characters: string): string {
  let end = text.length;
  while (end > 0 && characters.includes(text[end - 1]!)) end--;
  return text.slice(0, end);
}

/** The command lines a tool call's JSON arguments hold under `command`, `cmd` or `script`. */
function argumentCommands(args: string): string[] {
  if (args === "" || args[0] !== "{") return [];
  let parsed: unknown;
  try {
    parsed = JSON.parse(args);
  } catch {
    return [];
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return [];
  const commands: string[] = [];
  for (const key of commandKeys) {
    const value = (parsed as Record<string, unknown>)[key];
    if (typeof value === "string") commands.push(value);
    else if (Array.isArray(value) && value.every((item) => typeof item === "string")) commands.push(value.join(" "));
  }
  return commands;
}

function firstLine(text: string): string {
  const trimmed = text.trimStart();
  const end = trimmed.indexOf("\n");
  return end < 0 ? trimmed : trimmed.slice(0, end);
}

/** `text` cut to `maxFactCharacters`, never inside a surrogate pair. */
function cut(text: string): string {
  if (text.length <= maxFactCharacters) return text;
  let end = maxFactCharacters;
  const code = text.charCodeAt(end - 1);
  if (code >= 0xd800 && code <= 0xdbff) end--;
  return text.slice(0, end);
}
