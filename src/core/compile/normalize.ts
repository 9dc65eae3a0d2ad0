import { Code, ConnectError } from "@connectrpc/connect";
import { CurrentTurnPersistence, type CompileRequest, type DeferredBlock, type Transformation } from "#gen/contextd/v1/compile_pb";
import type { Message } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { segmentEnumerationOrder, segmentField, segmentName, type SegmentHolder } from "../model/segments.js";
import type { TokenEstimator } from "../tokens/estimator.js";
import { IdentityAssigner } from "./identity.js";
import { assertMessageJsonDepth } from "../model/json-depth.js";
import { assertWellFormedMessage, isWellFormedMessage } from "./message-validation.js";
import type { CompileInputs } from "./request-inputs.js";
import { newRecords, passedRecord, type CompileWork, type NormalizedCurrentTurn } from "./working-set.js";

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
  limits: Pick<CompileWork, "textAllowance" | "deadline">,
): { work: CompileWork; extras: NormalizedExtras } {
  const identity = new IdentityAssigner(request, randomId);
  // Segment messages start PASSED; the record table doubles as the set of ids claimed so far, so
  // each id is hashed into one table, not two.
  const records = newRecords();
  const segments = { ...inputs.segments };
  for (const segment of segmentEnumerationOrder) {
    const field = segmentField(segment, "segment");
    const name = segmentName(segment);
    const passed = passedRecord(segment);
    const input = inputs.segments[field];
    // Stored messages had their JSON measured when they were committed.
    const fromRequest = request[field] !== undefined;
    // A copy only once a message gets an id; until then the input list is the output.
    let output: Message[] | undefined;
    for (let index = 0; index < input.length; index++) {
      const message = input[index]!;
      // Paths are built only when something is wrong: a thousand template strings per compile
      // would cost more than the checks themselves.
      if (!isWellFormedMessage(message)) assertWellFormedMessage(message, `${name}[${index}]`);
      else if (fromRequest) assertMessageJsonDepth(message, `${name}[${index}]`);
      limits.deadline.check("normalize");
      let withId = message;
      if (message.id === "") {
        withId = identity.ensureId(message, { kind: "segment", segment, scope: name, index }, `${name}[${index}]`);
        output ??= input.slice(0, index);
      }
      if (records[withId.id] !== undefined) {
        segments[field] = (output ?? input).slice(0, index);
        throw duplicateId(withId.id, `${name}[${index}]`, segmentClaimPath(segments, withId.id, segment));
      }
      records[withId.id] = passed;
      output?.push(withId);
    }
    if (output) segments[field] = output;
  }
  const claims = new IdClaims(records, segments);

  const pending = mapIfChanged(request.pending, (message, index) => {
    const path = `pending[${index}]`;
    assertWellFormedMessage(message, path);
    const withId = identity.ensureId(message, { kind: "pending", index }, path);
    claims.claim(withId.id, "pending", index);
    return withId;
  });

  const currentTurn = normalizeCurrentTurn(request, identity);
  if (currentTurn) claims.claim((currentTurn.promptSafe ?? currentTurn.raw)!.id, "current_turn");

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
    claims.claim(withId.id, "scratch", index);
    return withId;
  });

  const work: CompileWork = {
    request,
    estimator,
    textAllowance: limits.textAllowance,
    deadline: limits.deadline,
    segments,
    pending,
    currentTurn,
    artifacts: inputs.artifacts,
    experiences: inputs.experiences,
    toolDefinitions: inputs.toolDefinitions,
    records,
    introduced: [],
    persistedIntroducedIds: new Set(),
    visibleArtifactIds: [],
    warnings: [],
    writebackMessages: identity.assigned,
  };
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

/**
 * Rejects duplicate ids of pending, the current turn and scratch, among themselves and against the
 * segments (whose ids are the keys of `segmentRecords`). Locations are kept as small integers
 * (scope number and index) and spelled out only for the error.
 */
class IdClaims {
  private readonly seen = new Map<string, number>();
  private readonly scopes: string[] = [];

  constructor(
    private readonly segmentRecords: Readonly<Record<string, Transformation>>,
    private readonly segments: SegmentHolder,
  ) {}

  claim(id: string, scope: string, index?: number): void {
    let scopeNumber = this.scopes.indexOf(scope);
    if (scopeNumber < 0) scopeNumber = this.scopes.push(scope) - 1;
    // Below 2^31 for any realistic index, so the map holds small integers, not boxed numbers.
    const location = scopeNumber * 100_000_000 + (index ?? -1) + 1;
    const earlier = this.seen.get(id);
    if (earlier !== undefined) throw duplicateId(id, this.path(location), this.path(earlier));
    if (this.segmentRecords[id] !== undefined) throw duplicateId(id, this.path(location), segmentClaimPath(this.segments, id));
    this.seen.set(id, location);
  }

  private path(location: number): string {
    const scope = this.scopes[Math.floor(location / 100_000_000)]!;
    const index = (location % 100_000_000) - 1;
    return index < 0 ? scope : `${scope}[${index}]`;
  }
}

/** Where `id` first occurs in `segments`, in enumeration order, looking no further than `last`. */
function segmentClaimPath(segments: SegmentHolder, id: string, last?: Segment): string {
  for (const segment of segmentEnumerationOrder) {
    const index = segments[segmentField(segment, "segment")].findIndex((message) => message.id === id);
    if (index >= 0) return `${segmentName(segment)}[${index}]`;
    if (segment === last) break;
  }
  throw new Error(`segmentClaimPath: "${id}" is not in the segments`);
}

function duplicateId(id: string, path: string, earlierPath: string): ConnectError {
  return new ConnectError(`duplicate message id "${id}" at ${path} (also at ${earlierPath})`, Code.InvalidArgument);
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

