import type { DescField, DescMessage, Message } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";

/**
 * The length limits of the strings a request carries that name things: ids, keys, models, tool
 * and other names (docs/limits.md, "Names and ids"). The one place that owns them: the server
 * checks every request against this table at the door (policy/string-limits.ts, every path and
 * protocol, streamed messages one by one), and the engine checks what it makes out of provider
 * bodies (`append_provider_response`, `append_provider_stream`) with the same table.
 *
 * Why it exists: such strings are kept whole where they are cheap to multiply — a model is a key
 * of the calibration cache, a conversation id travels in every event and change, an idempotency
 * key is a record for 24 h, and Postgres cannot index a key over 2,704 bytes. Free text (message
 * text, tool payloads, arguments, templates) is bounded by the request size and the compile text
 * allowance instead, and is not listed here.
 *
 * Lengths are UTF-8 bytes, which is what the stores keep.
 */
export const stringLimits = {
  /** Conversation, message, tool-call, artifact, experience, turn and stream item ids. */
  id: 1_024,
  /** Idempotency keys (`CommitRequest.idempotency_key`, `CommitOptions.idempotency_key`). */
  idempotencyKey: 1_024,
  /** Models (`render.model`, ReportUsage `model`). */
  model: 256,
  /** Tool names, sender names, target and pattern names, type ids and the other labels of a message. */
  name: 256,
  /**
   * Tenants (`--auth-tokens-file`, checked when the sidecar starts): a tenant is the prefix of its
   * conversation ids, so it must leave room for the rest of the id.
   */
  tenant: 128,
} as const;

export type StringLimitKind = keyof typeof stringLimits;

/** What each limit is called in an error, so a caller can look it up in docs/limits.md. */
const kindNames: Record<StringLimitKind, string> = {
  id: "ids",
  idempotencyKey: "idempotency keys",
  model: "models",
  name: "names",
  tenant: "tenants",
};

/** The limited fields, by message type and proto field name. Every other string is free text. */
const limitedFields: Record<string, Record<string, StringLimitKind>> = {
  // conversation_service.proto
  "contextd.v1.GetStateRequest": { conversation_id: "id" },
  "contextd.v1.CommitRequest": { conversation_id: "id", idempotency_key: "idempotencyKey" },
  "contextd.v1.ClearRequest": { conversation_id: "id" },
  "contextd.v1.WatchRequest": { conversation_id: "id" },
  "contextd.v1.ListConversationsRequest": { prefix: "id" },
  "contextd.v1.ReadToolResultRequest": { conversation_id: "id", tool_call_id: "id" },
  "contextd.v1.ReadMessagesRequest": { conversation_id: "id" },
  "contextd.v1.DeleteConversationRequest": { conversation_id: "id" },
  "contextd.v1.DeleteConversationsRequest": { prefix: "id" },
  "contextd.v1.ExportConversationsRequest": { prefix: "id" },
  "contextd.v1.RecallRequest": { conversation_id: "id", message_ids: "id" },
  "contextd.v1.RecallToolCall": { name: "name" },
  "contextd.v1.ForkRequest": { conversation_id: "id", new_conversation_id: "id" },
  "contextd.v1.RewindRequest": { conversation_id: "id", idempotency_key: "idempotencyKey" },
  // context_service.proto, telemetry_service.proto
  "contextd.v1.ReportUsageRequest": { model: "model", conversation_id: "id", turn_id: "id", report_id: "idempotencyKey" },
  // usage_ledger.proto
  "contextd.v1.GetUsageRequest": { conversation_id: "id" },
  "contextd.v1.ListTenantUsageRequest": { tenant: "tenant" },
  "contextd.v1.RenderRequest": { conversation_id: "id", view: "name" },
  "contextd.v1.SummarizeRequest": { request_id: "id" },
  // A CompileSession caller's answer to a summarize request.
  "contextd.v1.SummarizeResponse": { request_id: "id" },
  "contextd.v1.WatchEventsRequest": { conversation_id: "id" },
  // compile.proto
  "contextd.v1.CompileRequest": { conversation_id: "id", turn_id: "id" },
  "contextd.v1.CommitOptions": { idempotency_key: "idempotencyKey" },
  "contextd.v1.RenderOptions": { model: "model" },
  "contextd.v1.Target": { name: "name", view: "name" },
  "contextd.v1.Budget": { retained_ids: "id" },
  "contextd.v1.ToolResultClearing": { exclude_tools: "name" },
  "contextd.v1.LargeToolResults": { exclude_tools: "name" },
  "contextd.v1.CustomRedactionPattern": { name: "name" },
  "contextd.v1.TextReplacement": { message_id: "id" },
  "contextd.v1.SegmentFormatter.Join": { id: "id" },
  // message.proto
  "contextd.v1.Message": { id: "id", sender_name: "name" },
  "contextd.v1.ToolCallPart": { id: "id", name: "name", item_id: "id" },
  "contextd.v1.ToolResultPart": { tool_call_id: "id", name: "name" },
  "contextd.v1.ReasoningPart": { item_id: "id" },
  "contextd.v1.ProviderCompactionPart": { item_id: "id" },
  "contextd.v1.FilePart": { name: "name" },
  "contextd.v1.Provenance.Summary": { covered_message_ids: "id", replaced_summary_ids: "id" },
  "contextd.v1.SourceRef": { namespace: "name", kind: "name", id: "id", checkpoint_id: "id" },
  "contextd.v1.Actor": { id: "id", display_name: "name" },
  "contextd.v1.Origin": { template_id: "name", layer_id: "name" },
  "contextd.v1.Provenance.User": { channel: "name", user_id: "id" },
  "contextd.v1.Provenance.System": { component: "name" },
  "contextd.v1.Provenance.Host": { type_id: "name" },
  "contextd.v1.Extension": { type_id: "name" },
  // artifact.proto, state.proto
  "contextd.v1.Artifact": { id: "id", type_id: "name", bound_turn_id: "id" },
  "contextd.v1.ArtifactBudget": { group: "name" },
  "contextd.v1.Experience": { id: "id" },
  "contextd.v1.ToolDefinition": { name: "name" },
  "contextd.v1.RemoveMessages": { ids: "id" },
  "contextd.v1.RemoveArtifacts": { ids: "id" },
  "contextd.v1.AppendAssistant": { message_id: "id" },
  "contextd.v1.AppendToolResult": { tool_call_id: "id", name: "name", message_id: "id" },
  "contextd.v1.CancelToolCalls": { tool_call_ids: "id" },
  "contextd.v1.Compact": { through_message_id: "id" },
  "contextd.v1.Forget": { experience_id: "id" },
};

/** Every limited field as (message type, proto field name, limit), for tests and docs. */
export function limitedStringFields(): [typeName: string, fieldName: string, kind: StringLimitKind][] {
  return Object.entries(limitedFields).flatMap(([typeName, fields]) => Object.entries(fields).map(([fieldName, kind]) => [typeName, fieldName, kind] as [string, string, StringLimitKind]));
}

/** The limit of one field, or undefined for free text; for tests and docs. */
export function stringLimitOf(typeName: string, fieldName: string): { kind: StringLimitKind; bytes: number } | undefined {
  const kind = limitedFields[typeName]?.[fieldName];
  return kind === undefined ? undefined : { kind, bytes: stringLimits[kind] };
}

/**
 * Refuses `message` (of `schema`) when a limited string in it, at any depth, is longer than its
 * limit: INVALID_ARGUMENT naming the field's path, its length and the limit. `path` prefixes the
 * field paths (`deltas[0].append_provider_response` for messages made from a provider body).
 * Linear in the fields that can lead to a limited string; text, payloads and numbers are not visited.
 */
export function assertStringLimits(schema: DescMessage, message: Message, path = ""): void {
  visitMessage(schema, message, path === "" ? [] : [path], 0);
}

/** Messages nest only through a few recursive fields (content parts); deeper is refused elsewhere. */
const maxDepth = 32;

// The path is a stack of names and indices, joined only for an error: most requests have none,
// and building a path string per visited field cost more than the whole check.
type PathStack = (string | number)[];

// Conversation messages found within their limits. Messages are immutable (frozen by the codec)
// and a resent history hands out the same objects again (codec/recent-messages.ts), so a stateful
// agent resending its history pays a lookup per message, not a walk.
const checkedMessages = new WeakSet<object>();

function visitMessage(schema: DescMessage, message: Message, path: PathStack, depth: number): void {
  if (depth > maxDepth) return;
  const conversationMessage = schema.typeName === "contextd.v1.Message";
  if (conversationMessage && checkedMessages.has(message)) return;
  const record = message as unknown as Record<string, unknown>;
  for (const step of planOf(schema)) {
    if (step.oneof !== undefined) {
      const selected = record[step.oneof] as { case?: string; value?: unknown };
      const field = selected.case === undefined ? undefined : step.cases!.get(selected.case);
      if (field !== undefined) visitField(field, selected.value, path, depth);
      continue;
    }
    visitField(step.field!, record[step.field!.field.localName], path, depth);
  }
  if (conversationMessage && Object.isFrozen(message)) checkedMessages.add(message);
}

function visitField(step: FieldStep, value: unknown, path: PathStack, depth: number): void {
  if (value === undefined || value === null) return;
  const { field, kind } = step;
  if (kind !== undefined) {
    if (typeof value === "string") checkLength(path, field.name, undefined, value, kind);
    else if (Array.isArray(value)) for (let index = 0; index < value.length; index++) checkLength(path, field.name, index, value[index] as string, kind);
    return;
  }
  if (field.fieldKind === "message") {
    path.push(field.name);
    visitMessage(field.message, value as Message, path, depth + 1);
    path.pop();
  } else if (field.fieldKind === "list" && field.listKind === "message") {
    const list = value as Message[];
    if (list.length === 0) return;
    path.push(field.name, 0);
    for (let index = 0; index < list.length; index++) {
      path[path.length - 1] = index;
      visitMessage(field.message, list[index]!, path, depth + 1);
    }
    path.pop();
    path.pop();
  } else if (field.fieldKind === "map" && field.mapKind === "message") {
    for (const [key, item] of Object.entries(value as Record<string, Message>)) {
      path.push(field.name, `"${key.slice(0, 64)}"`);
      visitMessage(field.message, item, path, depth + 1);
      path.pop();
      path.pop();
    }
  }
}

function checkLength(path: PathStack, name: string, index: number | undefined, value: string, kind: StringLimitKind): void {
  const limit = stringLimits[kind];
  // Most strings are short: a UTF-16 length of at most limit / 3 cannot exceed `limit` bytes.
  if (value.length * 3 <= limit) return;
  const bytes = Buffer.byteLength(value, "utf8");
  if (bytes <= limit) return;
  const where = [...path, name, ...(index === undefined ? [] : [index])];
  const fieldPath = where.reduce<string>((joined, step) => (typeof step === "number" ? `${joined}[${step}]` : joined === "" ? step : `${joined}.${step}`), "");
  throw new ConnectError(`${fieldPath} has ${bytes} bytes, over the limit of ${limit} bytes for ${kindNames[kind]} (docs/limits.md)`, Code.InvalidArgument);
}

/** A field the walk looks at: a limited string (`kind`), or one through which a limited string can be reached. */
interface FieldStep {
  field: DescField;
  kind?: StringLimitKind;
}

/** One member of a message type in the walk: a field, or a oneof with its cases by local name. */
interface PlanStep {
  field?: FieldStep;
  oneof?: string;
  cases?: Map<string, FieldStep>;
}

const plans = new WeakMap<DescMessage, PlanStep[]>();

/** The members of `schema` that are limited strings or through which one can be reached. */
function planOf(schema: DescMessage): PlanStep[] {
  let plan = plans.get(schema);
  if (plan === undefined) {
    const limits = limitedFields[schema.typeName];
    const stepOf = (field: DescField): FieldStep | undefined => {
      const kind = limits?.[field.name];
      if (kind !== undefined) return { field, kind };
      return reachesLimited(field.message) ? { field } : undefined;
    };
    plan = [];
    for (const member of schema.members) {
      if (member.kind === "oneof") {
        const cases = new Map<string, FieldStep>();
        for (const field of member.fields) {
          const step = stepOf(field);
          if (step !== undefined) cases.set(field.localName, step);
        }
        if (cases.size > 0) plan.push({ oneof: member.localName, cases });
        continue;
      }
      const step = stepOf(member);
      if (step !== undefined) plan.push({ field: step });
    }
    plans.set(schema, plan);
  }
  return plan;
}

const reaches = new WeakMap<DescMessage, boolean>();

// Whether a value of this type is, or contains, a limited string (recursive types resolved by
// assuming "no" while a type is being looked at, which only its own members could contradict).
function reachesLimited(schema: DescMessage | undefined, visiting = new Set<DescMessage>()): boolean {
  if (schema === undefined) return false;
  const known = reaches.get(schema);
  if (known !== undefined) return known;
  if (visiting.has(schema)) return false;
  visiting.add(schema);
  const limits = limitedFields[schema.typeName];
  const holds = schema.fields.some((field) => limits?.[field.name] !== undefined || reachesLimited(field.message, visiting));
  visiting.delete(schema);
  if (holds || visiting.size === 0) reaches.set(schema, holds);
  return holds;
}
