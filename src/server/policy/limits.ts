import type { DescField, DescMessage, DescOneof, Message } from "@bufbuild/protobuf";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { MessageSchema } from "#gen/contextd/v1/message_pb";
import { assertStringLimits } from "../../core/model/string-limits.js";
import { inspectRequestMessages } from "./request-messages.js";

/**
 * Rejects requests carrying more than `maxMessages` conversation messages (`contextd.v1.Message`,
 * wherever they sit: segments, pending, scratch, deferred blocks, deltas) with RESOURCE_EXHAUSTED
 * naming the fields that hold them. Streamed requests are checked message by message.
 */
export function limitMessagesPerRequest(maxMessages: number): Interceptor {
  return (next) => async (request) => next(inspectRequestMessages(request, (message) => assertMessageCount(request.method.input, message, maxMessages)));
}

/**
 * Rejects requests carrying an id, key, model or name longer than its limit (core/model/string-limits.ts)
 * with INVALID_ARGUMENT naming the field and the limit, before any store or compile sees it.
 * Streamed requests are checked message by message.
 */
export function limitRequestStrings(): Interceptor {
  return (next) => async (request) => next(inspectRequestMessages(request, (message) => assertStringLimits(request.method.input, message)));
}

export function assertMessageCount(schema: DescMessage, message: Message, maxMessages: number): void {
  const perField = new Map<string, number>();
  countMessages(schema, message, "", perField, 0);
  let total = 0;
  for (const count of perField.values()) total += count;
  if (total <= maxMessages) return;
  const largest = [...perField].sort((a, b) => b[1] - a[1]).slice(0, 3).map(([path, count]) => `${path}: ${count}`);
  throw new ConnectError(
    `${schema.typeName} carries ${total} messages (${largest.join(", ")}), more than the limit of ${maxMessages} per request (--max-messages / CONTEXTD_MAX_MESSAGES)`,
    Code.ResourceExhausted,
  );
}

// Counts contextd.v1.Message values under `message`, keyed by the field path that holds them.
// A Message is counted, not entered: messages do not nest messages. Only members that can hold a
// Message are visited (see `countingPlan`): most of a request (budget, render options, scalars)
// cannot, and every call pays for this walk.
function countMessages(schema: DescMessage, message: Message, path: string, perField: Map<string, number>, depth: number): void {
  if (depth > 32) return;
  const record = message as unknown as Record<string, unknown>;
  const add = (fieldPath: string, count: number) => perField.set(fieldPath, (perField.get(fieldPath) ?? 0) + count);
  for (const member of countingPlan(schema)) {
    if (member.kind === "oneof") {
      const selected = record[member.localName] as { case?: string; value?: unknown };
      if (selected.case === undefined) continue;
      const field = member.fields.find((candidate) => candidate.localName === selected.case);
      if (field?.fieldKind === "message") visit(field.message, selected.value as Message, join(path, field.name));
      continue;
    }
    const value = record[member.localName];
    const fieldPath = join(path, member.name);
    if (member.fieldKind === "message" && value !== undefined) visit(member.message, value as Message, fieldPath);
    else if (member.fieldKind === "list" && member.listKind === "message") {
      const list = value as Message[];
      if (member.message.typeName === MessageSchema.typeName) {
        if (list.length > 0) add(fieldPath, list.length);
      } else {
        list.forEach((item) => visit(member.message, item, fieldPath));
      }
    } else if (member.fieldKind === "map" && member.mapKind === "message") {
      for (const item of Object.values(value as Record<string, Message>)) visit(member.message, item, fieldPath);
    }
  }

  function visit(childSchema: DescMessage, child: Message, childPath: string) {
    if (childSchema.typeName === MessageSchema.typeName) add(childPath, 1);
    else countMessages(childSchema, child, childPath, perField, depth + 1);
  }
}

const plans = new WeakMap<DescMessage, (DescField | DescOneof)[]>();

/** The members of `schema` through which a contextd.v1.Message can be reached. */
function countingPlan(schema: DescMessage): (DescField | DescOneof)[] {
  let plan = plans.get(schema);
  if (plan === undefined) {
    plan = schema.members.filter((member) =>
      member.kind === "oneof" ? member.fields.some((field) => canHoldMessages(field.message)) : canHoldMessages(member.message),
    );
    plans.set(schema, plan);
  }
  return plan;
}

const holdsMessages = new WeakMap<DescMessage, boolean>();

// Whether a value of this type is, or can contain, a contextd.v1.Message (recursive types resolved
// by assuming "no" while a type is being looked at, which only its own members could contradict).
function canHoldMessages(schema: DescMessage | undefined, visiting = new Set<DescMessage>()): boolean {
  if (schema === undefined) return false;
  if (schema.typeName === MessageSchema.typeName) return true;
  const known = holdsMessages.get(schema);
  if (known !== undefined) return known;
  if (visiting.has(schema)) return false;
  visiting.add(schema);
  const holds = schema.fields.some((field) => canHoldMessages(field.message, visiting));
  visiting.delete(schema);
  if (holds || visiting.size === 0) holdsMessages.set(schema, holds);
  return holds;
}

function join(path: string, name: string): string {
  return path === "" ? name : `${path}.${name}`;
}

/**
 * Deadlines hold even for handlers that never look at their signal: a call whose deadline has
 * already passed (a timeout of 0) never reaches the handler, and a unary call still running when its
 * deadline passes is answered DEADLINE_EXCEEDED at once (the handler's late result is discarded).
 * Deadlines above the configured maximum are rejected by connect itself (`maxTimeoutMs`).
 */
export function enforceDeadlines(): Interceptor {
  return (next) => async (request) => {
    const { signal } = request;
    if (signal.aborted) throw ConnectError.from(signal.reason, Code.DeadlineExceeded);
    // Only calls with a deadline need the race; other aborts (the caller cancelling) connect handles.
    if (request.stream || !(request.header.has("grpc-timeout") || request.header.has("connect-timeout-ms"))) return next(request);
    let onAbort: (() => void) | undefined;
    const aborted = new Promise<never>((_, reject) => {
      onAbort = () => reject(ConnectError.from(signal.reason, Code.DeadlineExceeded));
      signal.addEventListener("abort", onAbort, { once: true });
    });
    try {
      return await Promise.race([next(request), aborted]);
    } finally {
      signal.removeEventListener("abort", onAbort!);
    }
  };
}
