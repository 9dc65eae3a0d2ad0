import { Worker } from "node:worker_threads";
import type { RegexSearch } from "../core/compile/compile-context.js";

/**
 * Why it exists: the engine's built-in redaction patterns run on V8's regex engine (linear, and
 * 10–20x faster than re2js), but one search is one call that cannot be paused: over one 16 MiB
 * text it held the event loop 25–90 ms per pattern (`npm run bench:event-loop`), and every other
 * caller, health checks included, waited. Here the search runs on one worker thread; the event
 * loop only copies the text out (~8 ms for 16 MiB) and gets the offsets back without a copy.
 *
 * One thread, searches in arrival order: a second long text waits for the first, as it would on
 * the event loop, but health checks and short calls do not. Started on the first search (a
 * sidecar whose callers never redact long texts never starts it), unref'd so it never keeps the
 * process alive; `close` ends it. If the thread dies, pending searches fail with the error and the
 * next search starts a new one.
 */
export class RegexSearchThread {
  private current?: { worker: Worker; pending: Map<number, Waiting> };
  private nextId = 0;

  /** The `RegexSearch` a `CompileContext` takes. */
  readonly search: RegexSearch = (regex, text) => {
    // Without the global flag the loop below would find the first match forever.
    if (!regex.global) return Promise.reject(new Error(`regex search needs a global regex: /${regex.source}/${regex.flags}`));
    const { worker, pending } = this.started();
    const id = this.nextId++;
    return new Promise<Uint32Array>((resolve, reject) => {
      pending.set(id, { resolve, reject });
      if (pending.size === 1) worker.ref();
      worker.postMessage({ id, source: regex.source, flags: regex.flags, text });
    });
  };

  /** Ends the thread; searches still waiting fail. */
  async close(): Promise<void> {
    const current = this.current;
    if (!current) return;
    this.current = undefined;
    failAll(current.pending, new Error("the regex search thread was closed"));
    await current.worker.terminate();
  }

  private started(): { worker: Worker; pending: Map<number, Waiting> } {
    if (this.current) return this.current;
    const worker = new Worker(`(${searchInWorker.toString()})()`, { eval: true });
    const pending = new Map<number, Waiting>();
    const current = { worker, pending };
    worker.on("message", (reply: { id: number; positions?: Uint32Array; error?: string }) => {
      const waiting = pending.get(reply.id);
      if (!waiting) return;
      pending.delete(reply.id);
      if (pending.size === 0) worker.unref();
      if (reply.positions) waiting.resolve(reply.positions);
      else waiting.reject(new Error(`regex search failed: ${reply.error}`));
    });
    const lost = (error: Error) => {
      if (this.current === current) this.current = undefined;
      failAll(pending, error);
    };
    worker.on("error", lost);
    worker.on("exit", (code) => lost(new Error(`the regex search thread exited with code ${code}`)));
    worker.unref();
    this.current = current;
    return current;
  }
}

interface Waiting {
  resolve: (positions: Uint32Array) => void;
  reject: (error: Error) => void;
}

function failAll(pending: Map<number, Waiting>, error: Error): void {
  for (const waiting of pending.values()) waiting.reject(error);
  pending.clear();
}

/**
 * The worker's whole program, sent as source (so it runs the same from `src/` under the test
 * runner and from `dist/`): each message is a regex and a text; the answer is every match's start
 * and end, found as `String.prototype.replace` finds them, in a buffer handed over without a copy.
 */
function searchInWorker(): void {
  const { parentPort } = require("node:worker_threads") as typeof import("node:worker_threads");
  parentPort!.on("message", (request: { id: number; source: string; flags: string; text: string }) => {
    try {
      const regex = new RegExp(request.source, request.flags);
      let positions = new Uint32Array(64);
      let count = 0;
      let found: RegExpExecArray | null;
      while ((found = regex.exec(request.text)) !== null) {
        if (count + 2 > positions.length) {
          const grown = new Uint32Array(positions.length * 2);
          grown.set(positions);
          positions = grown;
        }
        positions[count++] = found.index;
        positions[count++] = found.index + found[0].length;
        // An empty match would be found again at the same place: replace moves one on.
        if (found[0].length === 0) regex.lastIndex++;
      }
      const answer = positions.slice(0, count);
      parentPort!.postMessage({ id: request.id, positions: answer }, [answer.buffer]);
    } catch (error) {
      parentPort!.postMessage({ id: request.id, error: String(error) });
    }
  });
}
