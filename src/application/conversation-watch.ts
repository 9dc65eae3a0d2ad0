import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { WatchResponseSchema, type Change, type WatchResponse } from "#gen/contextd/v1/conversation_service_pb";
import type { ConversationStore } from "../store/conversation-store.js";
import { raceAbort } from "./abort-race.js";

/** What a watch needs from the server. */
export interface WatchDependencies {
  store: ConversationStore;
  /** Aborted when the server shuts down: open watches end with UNAVAILABLE. */
  shutdown: AbortSignal;
  /** A watch idle this long sends a heartbeat with the current version. */
  watchHeartbeatMs: number;
}

/**
 * Relays the store's changes, inserting a heartbeat whenever nothing was sent for
 * `watchHeartbeatMs`, until the caller goes away (`callSignal`), the server shuts down
 * (UNAVAILABLE, so the caller resumes from the last version it received) or the conversation is
 * found deleted or expired at a heartbeat (NOT_FOUND).
 */
export async function* watchWithHeartbeats(
  { store, shutdown, watchHeartbeatMs }: WatchDependencies,
  conversationId: string,
  fromVersion: bigint,
  callSignal: AbortSignal,
): AsyncGenerator<WatchResponse> {
  const finished = new AbortController();
  const signal = AbortSignal.any([callSignal, shutdown, finished.signal]);
  const shuttingDown = () => new ConnectError("server is shutting down; resume the watch from the last version received", Code.Unavailable);
  if (shutdown.aborted) throw shuttingDown();
  const changes = store.watch(conversationId, fromVersion, signal)[Symbol.asyncIterator]();
  let next = changes.next();
  // The highest version known to exist: a heartbeat's version below it means the conversation was
  // deleted (or expired) since, and the watch ends rather than wait for changes that never come.
  let seen = fromVersion;
  try {
    for (;;) {
      let timer: NodeJS.Timeout | undefined;
      const idle = new Promise<"idle">((resolve) => (timer = setTimeout(() => resolve("idle"), watchHeartbeatMs)));
      // The signal is raced per read (raceAbort): one promise for the whole watch kept every change sent alive.
      const winner = await Promise.race([raceAbort(next, signal, () => "stopped" as const), idle]).finally(() => clearTimeout(timer));
      if (shutdown.aborted) throw shuttingDown();
      if (signal.aborted) return;
      if (winner === "idle") {
        const version = await store.currentVersion(conversationId);
        if (version < seen) {
          throw new ConnectError(`conversation "${conversationId}" no longer exists: it was deleted or expired (the watch had reached version ${seen}, the store is at ${version})`, Code.NotFound);
        }
        seen = version;
        yield create(WatchResponseSchema, { kind: { case: "heartbeat", value: { version } } });
        continue;
      }
      if (winner === "stopped") return;
      if (winner.done) throw new ConnectError(`watch of conversation "${conversationId}" ended: the store closed`, Code.Unavailable);
      const change: Change = winner.value;
      if (change.version > seen) seen = change.version;
      // The undo is the store's own record for reading past versions (Change.undo): a watcher
      // gets the change as committed, at the wire cost it had before undos were logged.
      yield create(WatchResponseSchema, { kind: { case: "change", value: change.undo === undefined ? change : { ...change, undo: undefined } } });
      next = changes.next();
    }
  } finally {
    finished.abort();
    // The store's iterator ends once the signal is aborted; a pending read may still reject then.
    next.catch(() => undefined);
    void changes.return?.(undefined)?.catch(() => undefined);
  }
}
