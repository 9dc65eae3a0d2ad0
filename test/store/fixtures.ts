import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { ArtifactKind, ArtifactLifecycle, ArtifactSchema, MergePolicy } from "#gen/contextd/v1/artifact_pb";
import { ActorKind, CacheType, MessageSchema, Provider, Role, type Message } from "#gen/contextd/v1/message_pb";
import { DeltaSchema, Segment, type ConversationState, type Delta } from "#gen/contextd/v1/state_pb";
import type { ConversationStore } from "../../src/store/conversation-store.js";

/** A delta from its operation, e.g. `delta({ case: "remember", value: { text: "x" } })`. */
export function delta(operation: NonNullable<MessageInitShape<typeof DeltaSchema>["operation"]>): Delta {
  return create(DeltaSchema, { operation });
}

export function textMessage(id: string, role: Role, text: string): Message {
  return create(MessageSchema, { id, role, parts: [{ kind: { case: "text", value: { text } } }] });
}

export function appendHistory(...messages: Message[]): Delta {
  return delta({ case: "appendMessages", value: { segment: Segment.HISTORY, messages } });
}

/** A message using every part kind and every metadata field, for byte-identical round trips. */
export function everyFieldMessage(id: string): Message {
  return create(MessageSchema, {
    id,
    role: Role.USER,
    actor: { kind: ActorKind.PEER_AGENT, id: "agent-7", displayName: "Planner", sourceRefs: [{ namespace: "crm", kind: "agent", id: "7" }] },
    parts: [
      { kind: { case: "text", value: { text: "héllo <|endoftext|> 👋" } } },
      { kind: { case: "image", value: { data: new Uint8Array([0, 1, 2, 255]), mimeType: "image/png", detail: 3 } } },
      { kind: { case: "image", value: { url: "https://example.com/a.png" } } },
      { kind: { case: "reasoning", value: { text: "thinking", signature: "sig==", redactedData: "opaque", provider: Provider.ANTHROPIC_MESSAGES, itemId: "rs_1" } } },
      { kind: { case: "file", value: { mimeType: "application/pdf", data: new Uint8Array([37, 80, 68, 70]), name: "a.pdf" } } },
      { kind: { case: "file", value: { uri: "gs://bucket/a.pdf" } } },
    ],
    sourceRefs: [{ namespace: "slack", kind: "event", id: "E1", checkpointId: "c3", uri: "https://slack/E1" }],
    origin: { templateId: "tpl", layerId: "tenant" },
    cache: { type: CacheType.EPHEMERAL, ttl: "5m" },
    provenance: { kind: { case: "host", value: { typeId: "acme.import/v1", payload: '{"row":1}' } } },
    extensions: [{ typeId: "acme.routing/v1", payload: '{"queue":"a"}' }],
    createdAtUnixMs: 1_700_000_000_123n,
    senderName: "alice",
  });
}

/** A complete tool round whose payloads use every ToolPayload field. */
export function everyFieldToolRound(prefix: string): Delta {
  return delta({
    case: "appendToolRound",
    value: {
      assistant: create(MessageSchema, {
        id: `${prefix}-a`,
        role: Role.ASSISTANT,
        parts: [{ kind: { case: "toolCall", value: { id: `${prefix}-call`, name: "lookup", arguments: { data: '{"q":1}' }, signature: "ts" } } }],
      }),
      results: [
        create(MessageSchema, {
          id: `${prefix}-r`,
          role: Role.TOOL,
          parts: [
            {
              kind: {
                case: "toolResult",
                value: {
                  toolCallId: `${prefix}-call`,
                  name: "lookup",
                  isError: true,
                  payload: {
                    text: "t",
                    data: "[1]",
                    binary: { data: new Uint8Array([9]), mimeType: "application/octet-stream" },
                    error: { code: "E", message: "m" },
                    progress: { current: 1.5, total: 3, message: "half" },
                    control: { action: "handoff", reason: "r" },
                  },
                  contentParts: [{ kind: { case: "image", value: { url: "https://example.com/r.png" } } }],
                },
              },
            },
          ],
        }),
      ],
    },
  });
}

export function artifactDelta(id: string): Delta {
  return delta({
    case: "upsertArtifact",
    value: {
      artifact: create(ArtifactSchema, {
        id,
        kind: ArtifactKind.RETRIEVAL_DOCUMENT,
        typeId: "acme.doc/v2",
        payload: { text: "doc" },
        lifecycle: ArtifactLifecycle.PERSISTENT,
        owner: { namespace: "kb", kind: "doc", id },
        sourceRefs: [{ namespace: "kb", kind: "chunk", id: "1" }],
        mergePolicy: MergePolicy.REPLACE_BY_ORIGIN,
        budget: { group: "rag", tokenLimit: 100n },
      }),
    },
  });
}

/**
 * A source of random batches for a conversation, drawn from `random`: appends to every segment,
 * tool rounds, an assistant call cancelled with cancel_tool_calls, remove, replace, compact,
 * clear_segment, artifacts, experiences and now and then a clear. Given the current state, it
 * returns a batch valid for it, or undefined when the drawn edit does not apply (nothing to remove).
 */
export function randomEdits(random: () => number): (current: ConversationState) => Delta[] | undefined {
  const pick = <T>(values: readonly T[]) => values[Math.floor(random() * values.length)]!;
  let counter = 0;
  const fresh = () => `r${++counter}`;
  const edits: ((current: ConversationState) => Delta[] | undefined)[] = [
    () => [appendHistory(...Array.from({ length: 1 + Math.floor(random() * 3) }, () => textMessage(fresh(), pick([Role.USER, Role.ASSISTANT]), "hi")))],
    () => [delta({ case: "appendMessages", value: { segment: pick([Segment.SYSTEM, Segment.MEMORY, Segment.TOOLS]), messages: [textMessage(fresh(), Role.SYSTEM, "note")] } })],
    () => {
      const call = fresh();
      return [
        delta({
          case: "appendToolRound",
          value: {
            assistant: create(MessageSchema, { id: fresh(), role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: call, name: "search", arguments: { data: "{}" } } } }] }),
            results: [create(MessageSchema, { id: fresh(), role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: call, name: "search", payload: { text: "found" } } } }] })],
          },
        }),
      ];
    },
    () => [delta({ case: "appendAssistant", value: { toolCalls: [{ id: fresh(), name: "fetch", arguments: { data: "{}" } }] } }), delta({ case: "cancelToolCalls", value: { abortReason: "stop" } })],
    (current) => {
      const plain = current.history.filter((message) => message.parts.every((part) => part.kind.case === "text"));
      if (plain.length === 0) return undefined;
      return [delta({ case: "removeMessages", value: { segment: Segment.HISTORY, ids: [pick(plain).id] } })];
    },
    (current) => [delta({ case: "replaceSegment", value: { segment: Segment.SYSTEM, messages: [textMessage(fresh(), Role.SYSTEM, "be brief"), ...current.system.slice(-2)] } })],
    (current) => {
      // Messages a compaction may end on: not inside a tool round.
      const ended = current.history.filter((message, index) => {
        const next = current.history[index + 1];
        return message.role !== Role.TOOL && !message.parts.some((part) => part.kind.case === "toolCall") && (next === undefined || next.role !== Role.TOOL);
      });
      if (ended.length === 0) return undefined;
      return [delta({ case: "compact", value: { throughMessageId: pick(ended).id, summary: textMessage(fresh(), Role.SYSTEM, "summary") } })];
    },
    () => [delta({ case: "clearSegment", value: { segment: pick([Segment.SYSTEM, Segment.MEMORY]) } })],
    () => [artifactDelta(`doc-${Math.floor(random() * 3)}`)],
    () => [delta({ case: "remember", value: { text: `fact ${fresh()}` } })],
    () => (random() < 0.2 ? [delta({ case: "clearState", value: {} })] : undefined),
  ];
  return (current) => pick(edits)(current);
}

/** Appends `count` ~200-byte messages (`m0`, `m1`, ...) to a fresh conversation, 1,000 per commit; resolves to its version. */
export async function longConversation(store: ConversationStore, id: string, count: number): Promise<bigint> {
  let version = 0n;
  for (let start = 0; start < count; start += 1_000) {
    const messages = Array.from({ length: Math.min(1_000, count - start) }, (_, index) => textMessage(`m${start + index}`, Role.USER, `m${start + index} `.padEnd(200, "x")));
    version = (await store.commit(id, version, [appendHistory(...messages)], "")).version;
  }
  return version;
}
