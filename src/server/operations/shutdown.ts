import type * as http2 from "node:http2";
import type * as net from "node:net";
import type { CallTracker } from "./call-tracker.js";
import { type HealthStatus, ServingStatus } from "./health.js";
import type { Logger } from "./logger.js";

/** What a shutdown stops, in the order it stops them. */
export interface ShutdownParts {
  health: HealthStatus;
  /** Stops polling the store (health stays NOT_SERVING). */
  stopStoreHealth: () => void;
  listener: net.Server;
  /** Ends open streaming RPCs with UNAVAILABLE. */
  endStreams: () => void;
  sessions: Set<http2.ServerHttp2Session>;
  sockets: Set<net.Socket>;
  calls: CallTracker;
  logger: Logger;
}

// How long a shutdown waits for closing HTTP/2 sessions to deliver what was written to them.
const sessionFlushMs = 1_000;

/**
 * The bounded shutdown: health NOT_SERVING (and watchers told), the listener closed, streams
 * ended, unary calls given `graceMs` to finish, sessions a moment to flush their last frames, then
 * every connection cut. Never takes much longer than `graceMs` + 1 s.
 */
export async function shutDown(parts: ShutdownParts, graceMs: number): Promise<void> {
  const { health, listener, sessions, sockets, calls, logger } = parts;
  parts.stopStoreHealth();
  health.set(ServingStatus.NOT_SERVING, "shutting down");
  // Let health watchers write NOT_SERVING before their streams are ended.
  await new Promise((resolve) => setImmediate(resolve));
  await new Promise((resolve) => setImmediate(resolve));
  const closed = new Promise<void>((resolve) => listener.close(() => resolve()));
  parts.endStreams();
  for (const session of sessions) session.close();
  if (!(await calls.drained(graceMs))) {
    logger.log("error", "shutdown grace period over: cutting connections", { inFlight: calls.inFlight, graceMs });
  }
  // A call is over for us when its stream finished, which can be before its trailers (the status
  // of a stream ended by the shutdown) left the socket. A closing session closes once its peer has
  // them all, so the sessions get a moment to do that before they are cut.
  await sessionsClosed(sessions, Math.min(graceMs, sessionFlushMs));
  for (const session of sessions) session.destroy();
  for (const socket of sockets) socket.destroy();
  await closed;
}

/** Resolves once every session has closed, or after `timeoutMs`. */
async function sessionsClosed(sessions: Set<http2.ServerHttp2Session>, timeoutMs: number): Promise<void> {
  if (sessions.size === 0) return;
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    Promise.all([...sessions].map((session) => (session.destroyed ? undefined : new Promise((resolve) => session.once("close", resolve))))),
    new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs))),
  ]);
  clearTimeout(timer);
}
