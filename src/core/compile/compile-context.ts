import type { CompileResultPart } from "#gen/contextd/v1/compile_pb";
import type { Message } from "#gen/contextd/v1/message_pb";
import type { ElidedHead } from "./elided-head.js";
import type { HistoryFacts } from "./history-facts.js";
import type { ConversationState } from "#gen/contextd/v1/state_pb";
import type { SummarizeRequest, SummarizeResponse } from "#gen/contextd/v1/context_service_pb";
import type { Observer } from "../observer.js";
import type { TokenCountCache } from "../tokens/token-count-cache.js";
import type { CompileMemory } from "./cache-impact.js";
import type { CallDeadline } from "./deadline.js";
import type { CalibrationLookup } from "./token-calibration.js";

/**
 * Asks the caller for a summary of a history prefix (SUMMARIZE strategy, auto-compaction). Supplied
 * by `CompileSession`; a compile without it falls back to DROP_HEAD with a warning.
 */
export type Summarizer = (request: SummarizeRequest) => Promise<SummarizeResponse>;

/** Everything a compile needs from outside the pure core. */
export interface CompileContext {
  /** The stored state of a stateful compile; request segments override it by presence. */
  stored?: ConversationState;
  /** Receives observer events as they happen; failures are swallowed. */
  observer?: Observer;
  /** A fresh random message id, a lowercase version 4 UUID as commits assign; also the compile id. */
  randomId: () => string;
  /** Wall-clock Unix milliseconds, for event timestamps only. */
  now: () => number;
  /** A monotonic clock in nanoseconds, for stage timings. */
  monotonicNs: () => bigint;
  /** Per-message token counts shared across compiles. */
  tokenCounts: TokenCountCache;
  /** See `Summarizer`. */
  summarize?: Summarizer;
  /**
   * Awaited after each stage, once that stage's events went to `observer`. The stages are
   * CPU-bound, so a streaming caller passes a yield to its event loop here and its events leave
   * while the compile runs instead of all at the end.
   */
  stageBoundary?: () => Promise<void>;
  /**
   * Gives the event loop a turn (a server passes `setImmediate`). Stages that do long work await it
   * every `defaultSliceMs` of work, so other calls and health checks are served meanwhile; a
   * compile shorter than that never awaits it. Without it a compile holds the loop to its end.
   */
  yieldToEventLoop?: () => Promise<void>;
  /**
   * The call's deadline and abort signal. Long stages check it (through `now`) as they go and give
   * up with DEADLINE_EXCEEDED; without it a compile runs to the end.
   */
  deadline?: CallDeadline;
  /** Most text one compile may produce (`TextAllowance`); default `defaultMaxCompileTextBytes`. */
  maxCompileTextBytes?: number;
  /**
   * Runs one of the engine's own regexes over a long text away from the event loop (a server
   * passes a worker thread's, see `RegexSearch`). Without it long texts are searched in place.
   */
  searchRegexOffThread?: RegexSearch;
  /**
   * Remembers each conversation's last compile, so a stateful compile's result says what it costs
   * in provider cache writes (`CompileResult.cache_impact`). Without it there is no cache impact.
   */
  compileMemory?: CompileMemory;
  /**
   * The calibration correction learnt from provider usage reports for a (provider, model,
   * estimator), applied to the budget's limit (`token-calibration.ts`). Asked only when the request
   * renders for a provider; without it there is no correction and no `CompileResult.calibration`.
   */
  calibration?: CalibrationLookup;
  /**
   * The heavy result parts to build (`source`, `normalized_snapshot`, `writeback.snapshot`,
   * `persistence`); the others are left unset and never built. Undefined builds them all. Each is
   * a copy or a filtered walk of the whole conversation: building them and dropping them after
   * cost a 1,000-message compile 0.13 of its 0.82 ms. PAYLOAD is not one of them: the payload is
   * always built (the render, the usage, the prefix fingerprint and the cache impact are made from
   * it); the application leaves it out of a rendered compile's answer unless it is asked for.
   */
  parts?: ReadonlySet<CompileResultPart>;
  /**
   * The facts of a stored history (`HistoryFacts`), kept by the caller between compiles of the
   * conversation and extended by the messages appended since; asked for only when a compile may
   * leave the history's head out (`elideHistoryHead`). Without it every compile walks the whole history.
   */
  historyFacts?: (history: readonly Message[]) => HistoryFacts | undefined;
  /**
   * The head left out, planned from the stored tail (`planStoredHead`) by a caller that read only
   * the tail: `stored.history` is a window of the stored history's tail, and the stages see it
   * from `tailFrom` on. The figures are the ones `elideHistoryHead` would find.
   */
  storedHead?: { head: ElidedHead; tailFrom: number };
}

/**
 * Every match of `regex` (global, one of the engine's built-in redaction patterns, never a
 * request's) in `text`, as start and end offsets in order: what `text.replace(regex, …)` would
 * visit. One search over a 16 MiB text is one call of the JavaScript regex engine that cannot be
 * paused, 25–90 ms on this project's 2-core benchmark machine, longer under load; run elsewhere,
 * the event loop only copies the text out (~8 ms for 16 MiB) and builds the result in paced steps.
 */
export type RegexSearch = (regex: RegExp, text: string) => Promise<Uint32Array>;
