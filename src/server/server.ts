import type { AddressInfo } from "node:net";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { createDualProtocolServer } from "./listen.js";
import { HealthStatus, ServingStatus } from "./health.js";
import { contextdServiceNames, routes } from "./routes.js";
import type { ConversationStore } from "../store/conversation-store.js";

export interface ServerOptions {
  host: string;
  port: number;
  store: ConversationStore;
  /** Idle time after which a Watch stream sends a heartbeat; 15 s when not given. */
  watchHeartbeatMs?: number;
}

export interface RunningServer {
  /** The bound address, with the real port when 0 was asked for. */
  address: AddressInfo;
  health: HealthStatus;
  /** Stops accepting connections, ends streams and waits for unary calls, at most `graceMs`. */
  shutdown(graceMs?: number): Promise<void>;
}

/** Starts the sidecar on one port serving gRPC, gRPC-Web and Connect. */
export async function startServer(options: ServerOptions): Promise<RunningServer> {
  const health = new HealthStatus(new Set(contextdServiceNames));
  const shutdownSignal = new AbortController();
  const handler = connectNodeAdapter({
    routes: routes({
      health,
      store: options.store,
      shutdown: shutdownSignal.signal,
      watchHeartbeatMs: options.watchHeartbeatMs ?? 15_000,
    }),
  });
  const { tcp, h2 } = createDualProtocolServer(handler);
  await new Promise<void>((resolve, reject) => {
    tcp.once("error", reject);
    tcp.listen(options.port, options.host, () => {
      tcp.off("error", reject);
      resolve();
    });
  });
  health.set(ServingStatus.SERVING);
  const sessions = new Set<import("node:http2").Http2Session>();
  h2.on("session", (session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
  });
  return {
    address: tcp.address() as AddressInfo,
    health,
    async shutdown(graceMs = 5_000) {
      health.set(ServingStatus.NOT_SERVING);
      shutdownSignal.abort();
      const closed = new Promise<void>((resolve) => tcp.close(() => resolve()));
      for (const session of sessions) session.close();
      const timer = setTimeout(() => {
        for (const session of sessions) session.destroy();
      }, graceMs);
      await closed;
      clearTimeout(timer);
    },
  };
}
