import type { ConversationState } from "../../../gen/ts/contextd/v1/state_pb.js";
import type { SummarizeRequest, SummarizeResponse } from "../../../gen/ts/contextd/v1/context_service_pb.js";
import type { Observer } from "../observer.js";
import type { TokenCountCache } from "../tokens/token-count-cache.js";
import type { CallDeadline } from "./deadline.js";

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
}

/**
 * Every match of `regex` (global, one of the engine's built-in redaction patterns, never a
 * request's) in `text`, as start and end offsets in order: what `text.replace(regex, …)` would
 * visit. One search over a 16 MiB text is one call of the JavaScript regex engine that cannot be
 * paused, 25–90 ms on this project's 2-core benchmark machine, longer under load; run elsewhere,
 * the event loop only copies the text out (~8 ms for 16 MiB) and builds the result in paced steps.
 */
export type RegexSearch = (regex: RegExp, text: string) => Promise<Uint32Array>;
