import { Code, ConnectError } from "@connectrpc/connect";
import { CurrentTurnPersistence, type CompileRequest, type DeferredBlock } from "../../../gen/ts/contextd/v1/compile_pb.js";
import type { Message } from "../../../gen/ts/contextd/v1/message_pb.js";
import { Segment } from "../../../gen/ts/contextd/v1/state_pb.js";
import { segmentEnumerationOrder, segmentField, segmentName } from "../model/segments.js";
import type { TokenEstimator } from "../tokens/estimator.js";
import { IdentityAssigner } from "./identity.js";
import { assertWellFormedMessage } from "./message-validation.js";
import type { CompileInputs } from "./request-inputs.js";
import { recordPassed, type CompileWork, type NormalizedCurrentTurn } from "./working-set.js";

/** Deferred blocks and scratch with ids assigned; consumed by their own stages. */
export interface NormalizedExtras {
  deferredBlocks: DeferredBlock[];
  scratch: Message[];
}

/**
 * Stage 1 (without tool-round repair, see `tool-round-repair.ts`): checks every message, assigns
 * missing ids by the identity policy, rejects duplicate ids across segments, pending and the
 * current turn, and starts the records with every message PASSED.
 */
export function normalize(
  request: CompileRequest,
  inputs: CompileInputs,
  estimator: TokenEstimator,
  randomId: () => string,
): { work: CompileWork; extras: NormalizedExtras } {
  const identity = new IdentityAssigner(request, randomId);
  const seen = new Map<string, string>();
  const claim = (message: Message, path: string) => {
    const earlier = seen.get(message.id);
    if (earlier !== undefined) {
      throw new ConnectError(`duplicate message id "${message.id}" at ${path} (also at ${earlier})`, Code.InvalidArgument);
    }
    seen.set(message.id, path);
  };

  const segments = { ...inputs.segments };
  for (const segment of segmentEnumerationOrder) {
    const field = segmentField(segment, "segment");
    const name = segmentName(segment);
    segments[field] = mapIfChanged(inputs.segments[field], (message, index) => {
      const path = `${name}[${index}]`;
      assertWellFormedMessage(message, path);
      const withId = identity.ensureId(message, { kind: "segment", segment, scope: name, index }, path);
      claim(withId, path);
      return withId;
    });
  }

  const pending = mapIfChanged(request.pending, (message, index) => {
    const path = `pending[${index}]`;
    assertWellFormedMessage(message, path);
    const withId = identity.ensureId(message, { kind: "pending", index }, path);
    claim(withId, path);
    return withId;
  });

  const currentTurn = normalizeCurrentTurn(request, identity);
  if (currentTurn) claim((currentTurn.promptSafe ?? currentTurn.raw)!, "current_turn");

  const deferredBlocks = request.deferredBlocks.map((block, blockIndex) => {
    const segment = block.segment === Segment.UNSPECIFIED ? Segment.MEMORY : block.segment;
    segmentField(segment, `deferred_blocks[${blockIndex}].segment`);
    const messages = block.messages.map((message, index) => {
      const path = `deferred_blocks[${blockIndex}].messages[${index}]`;
      assertWellFormedMessage(message, path);
      return identity.ensureId(message, { kind: "deferred", segment, scope: `deferred:${segmentName(segment)}`, blockIndex, index }, path);
    });
    return { ...block, segment, messages };
  });

  const scratch = request.scratch.map((message, index) => {
    const path = `scratch[${index}]`;
    assertWellFormedMessage(message, path);
    // Scratch is never persisted, so its ids only need to be unique within this compile.
    const withId = message.id === "" ? { ...message, id: `scratch:${index}` } : message;
    claim(withId, path);
    return withId;
  });

  const work: CompileWork = {
    request,
    estimator,
    segments,
    pending,
    currentTurn,
    artifacts: inputs.artifacts,
    experiences: inputs.experiences,
    toolDefinitions: inputs.toolDefinitions,
    records: new Map(),
    introduced: [],
    persistedIntroducedIds: new Set(),
    visibleArtifactIds: [],
    warnings: [],
    writebackMessages: identity.assigned,
  };
  for (const segment of segmentEnumerationOrder) recordPassed(work, segments[segmentField(segment, "segment")], segment);
  return { work, extras: { deferredBlocks, scratch } };
}

function normalizeCurrentTurn(request: CompileRequest, identity: IdentityAssigner): NormalizedCurrentTurn | undefined {
  const turn = request.currentTurn;
  if (!turn || (!turn.raw && !turn.promptSafe)) return undefined;
  if (CurrentTurnPersistence[turn.persistence] === undefined) {
    throw new ConnectError(`current_turn.persistence: unknown value ${turn.persistence}`, Code.InvalidArgument);
  }
  if (turn.raw) assertWellFormedMessage(turn.raw, "current_turn.raw");
  if (turn.promptSafe) assertWellFormedMessage(turn.promptSafe, "current_turn.prompt_safe");
  const rawId = turn.raw?.id ?? "";
  const safeId = turn.promptSafe?.id ?? "";
  if (rawId !== "" && safeId !== "" && rawId !== safeId) {
    throw new ConnectError(
      `current_turn: raw and prompt_safe must share one id, got "${rawId}" and "${safeId}"`,
      Code.InvalidArgument,
    );
  }
  const id = rawId || safeId || identity.currentTurnId((turn.raw ?? turn.promptSafe)!, "current_turn");
  return {
    raw: turn.raw && { ...turn.raw, id },
    promptSafe: turn.promptSafe && { ...turn.promptSafe, id },
    persistence: turn.persistence,
  };
}

/** `messages.map(transform)`, returning the input array itself when nothing changed. */
function mapIfChanged(messages: Message[], transform: (message: Message, index: number) => Message): Message[] {
  let result: Message[] | undefined;
  for (let index = 0; index < messages.length; index++) {
    const next = transform(messages[index]!, index);
    if (next !== messages[index] && !result) result = messages.slice(0, index);
    result?.push(next);
  }
  return result ?? messages;
}

