// What a sidecar's heap holds, asked from outside through the V8 inspector (node --inspect on a
// loopback port the OS picks): a full garbage collection, then the heap in use and the RSS. Heap in
// use right after a forced collection is live data, which RSS and the heap gauges of /metrics are
// not (they also count garbage not collected yet). Also writes heap snapshots for finding what
// holds memory. The sidecar needs no flag or route of its own for this.
import { createWriteStream } from "node:fs";
import type { Readable } from "node:stream";

/** The node argument that opens the inspector on a free loopback port (its address goes to stderr). */
export const inspectorNodeArg = "--inspect=127.0.0.1:0";

/** Resolves to the inspector's WebSocket address once node prints it on `stderr`. */
export function inspectorAddress(stderr: Readable): Promise<string> {
  return new Promise((resolve) => {
    let text = "";
    const listen = (chunk: Buffer) => {
      text += chunk;
      const found = /Debugger listening on (ws:\/\/\S+)/.exec(text);
      if (found) {
        stderr.off("data", listen);
        resolve(found[1]!);
      }
    };
    stderr.on("data", listen);
  });
}

/** Figures after a full collection, in bytes. */
export interface LiveMemory {
  /** V8 heap in use: live objects. */
  heapUsed: number;
  /** Buffers and array buffers outside the V8 heap (process.memoryUsage().external, arrayBuffers included). */
  external: number;
  rss: number;
}

export class HeapInspector {
  private nextId = 1;
  private readonly waiting = new Map<number, { resolve: (result: unknown) => void; reject: (error: Error) => void }>();
  private chunkListener: ((chunk: string) => void) | undefined;

  private constructor(private readonly socket: WebSocket) {
    socket.addEventListener("message", (event) => {
      const message = JSON.parse(String(event.data)) as { id?: number; result?: unknown; error?: { message: string }; method?: string; params?: { chunk: string } };
      if (message.method === "HeapProfiler.addHeapSnapshotChunk") this.chunkListener?.(message.params!.chunk);
      if (message.id === undefined) return;
      const waiter = this.waiting.get(message.id);
      this.waiting.delete(message.id);
      if (message.error) waiter?.reject(new Error(`inspector: ${message.error.message}`));
      else waiter?.resolve(message.result);
    });
  }

  static async connect(address: string): Promise<HeapInspector> {
    const socket = new WebSocket(address);
    await new Promise<void>((resolve, reject) => {
      socket.addEventListener("open", () => resolve(), { once: true });
      socket.addEventListener("error", () => reject(new Error(`inspector: cannot connect to ${address}`)), { once: true });
    });
    return new HeapInspector(socket);
  }

  private send<T>(method: string, params: object = {}): Promise<T> {
    const id = this.nextId++;
    this.socket.send(JSON.stringify({ id, method, params }));
    return new Promise<T>((resolve, reject) => this.waiting.set(id, { resolve: resolve as (result: unknown) => void, reject }));
  }

  /** Collects garbage (twice: weak references cleared by the first free more in the second), then reads memory. */
  async liveMemory(): Promise<LiveMemory> {
    await this.send("HeapProfiler.collectGarbage");
    await this.send("HeapProfiler.collectGarbage");
    const { result } = await this.send<{ result: { value: string } }>("Runtime.evaluate", { expression: "JSON.stringify(process.memoryUsage())", returnByValue: true });
    const usage = JSON.parse(result.value) as NodeJS.MemoryUsage;
    return { heapUsed: usage.heapUsed, external: usage.external, rss: usage.rss };
  }

  /** Writes a heap snapshot (.heapsnapshot, for Chromium's DevTools or `node:v8` tooling) to `path`. */
  async writeHeapSnapshot(path: string): Promise<void> {
    const file = createWriteStream(path);
    this.chunkListener = (chunk) => file.write(chunk);
    try {
      await this.send("HeapProfiler.enable");
      await this.send("HeapProfiler.takeHeapSnapshot", { reportProgress: false });
    } finally {
      this.chunkListener = undefined;
      await new Promise<void>((resolve) => file.end(resolve));
    }
  }

  close(): void {
    this.socket.close();
  }
}
