import { readFileSync } from "node:fs";
import type * as net from "node:net";

/** Why a connection was closed by the server rather than by its client. */
export type ConnectionCloseReason = "headers_timeout" | "idle_timeout" | "evicted" | "refused";

export interface ConnectionBounds {
  /** Most connections open at once (see `OpenConnections.accept`). */
  maxConnections: number;
  /** A connection with no request in flight for this long is closed. */
  idleTimeoutMs: number;
  /** A connection that has not sent its first request's headers this long after it opened is closed. */
  headersTimeoutMs: number;
}

interface Connection {
  readonly openedAt: number;
  /** Requests (HTTP/1.1) or streams (HTTP/2) open on it. */
  inFlight: number;
  /** Whether a whole request's headers ever arrived on it. */
  served: boolean;
  /** When it last had nothing in flight (`openedAt` until then). */
  idleSince: number;
  /** How the server ends it: destroy the socket, or for HTTP/2 a GOAWAY (`close`). */
  end: () => void;
  readonly destroy: () => void;
}

/**
 * Every open connection, with what it has in flight, so that none is held by a client that sends
 * nothing and the port keeps room for health checks.
 *
 * Why: connections that sent nothing were never timed out, and HTTP/1.1's header and request
 * timeouts were off (node enforces them only for a server that listens itself; ours is handed
 * sockets). 1,100 idle or slow-header connections under `ulimit -n 1024` took every file
 * descriptor: 8 of 8 health checks failed for 37 s. Now:
 * - a connection whose first request's headers have not arrived `headersTimeoutMs` after it opened
 *   is closed (a request's body has `--request-body-timeout-ms`, checked by admission);
 * - a connection with nothing in flight for `idleTimeoutMs` is closed: HTTP/1.1 keep-alive
 *   connections, including one dribbling the headers of its next request, and HTTP/2 sessions
 *   (GOAWAY, which gRPC clients answer by reconnecting when they next call);
 * - at `maxConnections`, a new connection closes the one that has been idle the longest (a
 *   connection with a call in flight is never closed for another), or is closed itself when every
 *   connection is busy. The cap sits below the open-file limit, so accepting never fails for want of
 *   a descriptor, and a health check always gets a connection while others only sit idle.
 */
export class OpenConnections {
  private readonly open = new Set<Connection>();
  private readonly bySocket = new WeakMap<object, Connection>();
  private readonly timer: NodeJS.Timeout;
  /** Connections the server closed, by why; for the metrics. */
  readonly closed: Record<ConnectionCloseReason, number> = { headers_timeout: 0, idle_timeout: 0, evicted: 0, refused: 0 };

  constructor(private readonly bounds: ConnectionBounds) {
    // Checked a few times per timeout: a connection lives at most a quarter longer than its bound.
    const period = Math.max(25, Math.min(1_000, Math.floor(Math.min(bounds.idleTimeoutMs, bounds.headersTimeoutMs) / 4)));
    this.timer = setInterval(() => this.sweep(Date.now()), period).unref();
  }

  get size(): number {
    return this.open.size;
  }

  /**
   * A new connection: tracked until it closes, or refused (destroyed, false) when every one of
   * `maxConnections` has a call in flight. At the cap the longest idle connection makes room.
   */
  accept(socket: net.Socket): boolean {
    if (this.open.size >= this.bounds.maxConnections && !this.evictIdlest()) {
      this.closed.refused++;
      socket.destroy();
      return false;
    }
    const now = Date.now();
    const connection: Connection = { openedAt: now, inFlight: 0, served: false, idleSince: now, end: () => socket.destroy(), destroy: () => socket.destroy() };
    this.open.add(connection);
    this.bySocket.set(socket, connection);
    socket.once("close", () => this.open.delete(connection));
    return true;
  }

  /** `alias` (the TLS socket over an accepted one, an HTTP/2 session) is the same connection as `socket`. */
  alias(socket: object, alias: object, end?: () => void): void {
    const connection = this.bySocket.get(socket);
    if (connection === undefined) return;
    this.bySocket.set(alias, connection);
    if (end) connection.end = end;
  }

  /** A request or stream began on the connection of `socket` (or of an alias); returns its end. */
  begin(socket: object): () => void {
    const connection = this.bySocket.get(socket);
    if (connection === undefined) return () => undefined;
    connection.inFlight++;
    connection.served = true;
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      connection.inFlight--;
      if (connection.inFlight === 0) connection.idleSince = Date.now();
    };
  }

  /** Stops the timer (the server is shutting down; its own shutdown closes the connections). */
  stop(): void {
    clearInterval(this.timer);
  }

  private sweep(now: number): void {
    for (const connection of this.open) {
      if (connection.inFlight > 0) continue;
      if (!connection.served && now - connection.openedAt >= this.bounds.headersTimeoutMs) {
        this.closed.headers_timeout++;
        this.forget(connection, connection.destroy);
      } else if (connection.served && now - connection.idleSince >= this.bounds.idleTimeoutMs) {
        this.closed.idle_timeout++;
        this.forget(connection, connection.end);
      }
    }
  }

  // The idle connection that has been idle the longest (never served first: those have sent nothing
  // useful), closed to make room; false when every connection has a call in flight.
  private evictIdlest(): boolean {
    let idlest: Connection | undefined;
    for (const connection of this.open) {
      if (connection.inFlight > 0) continue;
      if (idlest === undefined || rank(connection) < rank(idlest)) idlest = connection;
    }
    if (idlest === undefined) return false;
    this.closed.evicted++;
    this.forget(idlest, idlest.destroy);
    return true;
  }

  private forget(connection: Connection, close: () => void): void {
    this.open.delete(connection);
    close();
  }
}

// Lower goes first: connections never served before served ones, then the longest idle.
function rank(connection: Connection): number {
  return (connection.served ? 1e15 : 0) + connection.idleSince;
}

/**
 * `--max-connections 0`: the process's soft open-file limit less 128 descriptors for the store's
 * connections, files and the runtime (at least 64); 65,536 where the limit cannot be read.
 */
export function defaultMaxConnections(): number {
  try {
    const limits = readFileSync("/proc/self/limits", "utf8");
    const soft = /^Max open files\s+(\S+)/m.exec(limits)?.[1];
    if (soft === undefined) return 65_536;
    if (soft === "unlimited") return 1_000_000;
    return Math.max(64, Number(soft) - 128);
  } catch {
    return 65_536;
  }
}
