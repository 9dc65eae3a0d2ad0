import { spawnSync } from "node:child_process";
import * as http from "node:http";
import { fileURLToPath } from "node:url";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EstimatorKind } from "#gen/contextd/v1/compile_pb";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { TelemetryService } from "#gen/contextd/v1/telemetry_service_pb";
import { Provider, Role } from "#gen/contextd/v1/message_pb";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "#gen/grpc/health/v1/health_pb";
import { loadConfig } from "../../../src/server/operations/config.js";
import { mergeWorkerMetrics, unionOfWanted, wantedBy } from "../../../src/server/operations/worker-processes.js";
import { startRedis, type RedisProcess } from "../../support/redis.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";
import { appendHistory, textMessage } from "../../store/fixtures.js";

const mainScript = fileURLToPath(new URL("../../../dist/src/main.js", import.meta.url));

/** The pids the primary announced in its "contextd listening" line. */
function announcedWorkers(sidecar: Sidecar): number[] {
  const line = sidecar.logs.map((entry) => JSON.parse(entry) as { msg?: string; workers?: number[] }).find((entry) => entry.msg === "contextd listening");
  return line?.workers ?? [];
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function metricsText(sidecar: Sidecar): Promise<string> {
  return (await fetch(`${sidecar.url}/metrics`)).text();
}

/** A Connect JSON unary call over its own HTTP/1.1 connection whose body is held back until `finish`. */
function heldCall(port: number, conversationId: string) {
  const body = JSON.stringify({ conversationId });
  const request = http.request({ host: "127.0.0.1", port, method: "POST", path: "/contextd.v1.ConversationService/GetState", headers: { "content-type": "application/json", "content-length": body.length }, agent: false });
  const response = new Promise<number>((resolve, reject) => {
    request.on("response", (incoming) => {
      incoming.resume();
      incoming.on("end", () => resolve(incoming.statusCode!));
    });
    request.on("error", reject);
  });
  request.write(body.slice(0, 5));
  return { finish: () => request.end(body.slice(5)), response };
}

describe("which compile events cross the primary", () => {
  const filter = (conversationId: string, conversationPrefix = "") => ({ conversationId, conversationPrefix });
  it("only those a subscriber elsewhere would receive: its conversations, coarser (tenant prefixes, then all) when they are many or long", () => {
    expect(wantedBy([])).toBe("none");
    expect(wantedBy([filter("a"), filter("a"), filter("b", "t/")])).toEqual([filter("a"), filter("b", "t/")]);
    expect(wantedBy([filter("a"), filter("")])).toBe("all");
    const many = Array.from({ length: 200 }, (_, index) => filter(`t/${index}`, "t/"));
    expect(wantedBy(many)).toEqual([filter("", "t/")]);
    expect(wantedBy([filter("x".repeat(20_000), "u/")])).toEqual([filter("", "u/")]);
    expect(wantedBy([filter("x".repeat(20_000))])).toBe("all");
    expect(unionOfWanted([])).toBe("none");
    expect(unionOfWanted(["none", [filter("a")], [filter("a"), filter("b")]])).toEqual([filter("a"), filter("b")]);
    expect(unionOfWanted([[filter("a")], "all"])).toBe("all");
  });
});

describe("mergeWorkerMetrics", () => {
  it("keeps each family together, once, with every worker's samples labelled by worker", () => {
    const worker = (calls: number, inFlight: number) =>
      [
        "# HELP contextd_rpc_requests_total RPCs finished, by method and gRPC code.",
        "# TYPE contextd_rpc_requests_total counter",
        `contextd_rpc_requests_total{method="contextd.v1.ConversationService/Commit",code="ok"} ${calls}`,
        "# HELP contextd_requests_in_flight HTTP requests being handled.",
        "# TYPE contextd_requests_in_flight gauge",
        `contextd_requests_in_flight ${inFlight}`,
        "",
      ].join("\n");
    expect(mergeWorkerMetrics([{ worker: 1, text: worker(5, 1) }, { worker: 2, text: worker(7, 0) }])).toBe(
      [
        "# HELP contextd_rpc_requests_total RPCs finished, by method and gRPC code.",
        "# TYPE contextd_rpc_requests_total counter",
        'contextd_rpc_requests_total{worker="1",method="contextd.v1.ConversationService/Commit",code="ok"} 5',
        'contextd_rpc_requests_total{worker="2",method="contextd.v1.ConversationService/Commit",code="ok"} 7',
        "# HELP contextd_requests_in_flight HTTP requests being handled.",
        "# TYPE contextd_requests_in_flight gauge",
        'contextd_requests_in_flight{worker="1"} 1',
        'contextd_requests_in_flight{worker="2"} 0',
        "",
      ].join("\n"),
    );
  });
});

describe("--workers", () => {
  it("refuses more than one worker on the in-memory store, at start, saying why", () => {
    expect(() => loadConfig(["--workers", "2"], {})).toThrow(
      "--workers 2 needs a shared store (--redis-url, --redis-cluster-nodes or --postgres-url): the in-memory store's conversations live in one process",
    );
    expect(loadConfig(["--workers", "auto", "--redis-url", "redis://127.0.0.1:6379"], {}).workers).toBeGreaterThanOrEqual(1);
    expect(loadConfig([], { CONTEXTD_WORKERS: "3", CONTEXTD_REDIS_URL: "redis://x" }).workers).toBe(3);
    expect(() => loadConfig(["--workers", "0", "--redis-url", "redis://x"], {})).toThrow('invalid --workers or CONTEXTD_WORKERS "0"');
    const started = spawnSync(process.execPath, [mainScript, "--port", "0", "--workers", "2"], { encoding: "utf8", timeout: 15_000 });
    expect(started.status).toBe(2);
    expect(started.stderr).toContain("--workers 2 needs a shared store");
  });

  describe("on Redis", () => {
    let redis: RedisProcess;
    let sidecar: Sidecar;
    beforeAll(async () => {
      redis = await startRedis();
      sidecar = await startSidecar(["--redis-url", redis.url, "--workers", "2", "--shutdown-grace-ms", "5000"]);
    }, 30_000);
    afterAll(async () => {
      await sidecar?.stop();
      await redis?.stop();
    });

    it("serves one port from two processes sharing the store, with health and /metrics from both", async () => {
      const workers = announcedWorkers(sidecar);
      expect(workers).toHaveLength(2);
      expect(workers.every(alive)).toBe(true);
      // One connection per transport: the primary hands connections to the workers in turn.
      const clients = Array.from({ length: 6 }, () => createClient(ConversationService, createGrpcTransport({ baseUrl: sidecar.url })));
      const conversationId = "shared-by-workers";
      await Promise.all(
        clients.map(async (client, index) => {
          for (let turn = 0; turn < 5; turn++) {
            await client.commit({ conversationId, deltas: [appendHistory(textMessage(`c${index}-t${turn}`, Role.USER, "hi"))] });
          }
        }),
      );
      // Every worker sees every commit: the state lives in Redis, not in a worker.
      for (const client of clients) expect((await client.getState({ conversationId })).state!.history).toHaveLength(30);
      const health = createClient(Health, createGrpcTransport({ baseUrl: sidecar.url }));
      expect((await health.check({ service: "" })).status).toBe(ServingStatus.SERVING);

      // Whichever worker the scrape lands on, it answers with both workers' metrics.
      for (let scrape = 0; scrape < 3; scrape++) {
        const text = await metricsText(sidecar);
        const commits = [1, 2].map((worker) =>
          Number(new RegExp(`^contextd_rpc_requests_total\\{worker="${worker}",method="contextd.v1.ConversationService/Commit",code="ok"\\} (\\d+)$`, "m").exec(text)?.[1] ?? 0),
        );
        expect(commits[0]! + commits[1]!).toBe(30);
        expect(commits.every((count) => count > 0), `both workers served commits: ${commits.join(" + ")}`).toBe(true);
        expect(text.match(/^# TYPE contextd_rpc_requests_total counter$/gm)).toHaveLength(1);
        expect(text).toMatch(/^contextd_serving\{worker="1"\} 1$/m);
        expect(text).toMatch(/^contextd_serving\{worker="2"\} 1$/m);
      }
    });

    it("shares token calibration between workers: a report through one connection corrects compiles through every other", async () => {
      const contexts = Array.from({ length: 4 }, () => createClient(ContextService, createGrpcTransport({ baseUrl: sidecar.url })));
      const reported = await contexts[0]!.reportUsage({ provider: Provider.OPENAI_CHAT, model: "gpt-workers", estimator: EstimatorKind.FIXED, estimatedTokens: 100n, actualInputTokens: 200n });
      expect(reported.correction).toBe(2);
      const request = {
        history: { messages: [textMessage("u", Role.USER, "hi")] },
        budget: { maxTokens: 100n, estimator: { kind: EstimatorKind.FIXED, fixedPerMessage: 10n } },
        render: { provider: Provider.OPENAI_CHAT, model: "gpt-workers" },
      };
      for (const context of contexts) {
        expect((await context.compile(request)).result!.calibration).toMatchObject({ correction: 2, reports: 1n, storeReadError: "" });
      }
      const text = await metricsText(sidecar);
      const compiles = [1, 2].map((worker) => Number(new RegExp(`^contextd_rpc_requests_total\\{worker="${worker}",method="contextd.v1.ContextService/Compile",code="ok"\\} (\\d+)$`, "m").exec(text)?.[1] ?? 0));
      expect(compiles.every((count) => count > 0), `both workers compiled: ${compiles.join(" + ")}`).toBe(true);
    });

    it("streams every worker's compiles to a WatchEvents subscriber, whichever worker holds its connection", async () => {
      const watchAbort = new AbortController();
      const telemetry = createClient(TelemetryService, createGrpcTransport({ baseUrl: sidecar.url }));
      const compiled = new Set<string>();
      const watching = (async () => {
        try {
          for await (const message of telemetry.watchEvents({}, { signal: watchAbort.signal })) {
            if (message.event?.event.case === "pipelineCompiled") compiled.add(message.event.conversationId);
          }
        } catch (error) {
          if (!watchAbort.signal.aborted) throw error;
        }
      })();
      // Each compile on a connection of its own: the primary hands connections to the workers in turn.
      const compileOnNewConnection = (conversationId: string) =>
        createClient(ContextService, createGrpcTransport({ baseUrl: sidecar.url })).compile({ conversationId });
      const subscribers = async () =>
        [...(await metricsText(sidecar)).matchAll(/^contextd_telemetry_subscribers\{worker="\d+"\} (\d+)$/gm)].reduce((sum, match) => sum + Number(match[1]), 0);
      await expect.poll(subscribers, { timeout: 10_000 }).toBe(1);
      // Once the other worker forwards (the primary tells it so, asynchronously), two compiles in a
      // row, one on each worker, both reach the subscriber.
      let probe = 0;
      await expect
        .poll(
          async () => {
            const ids = [`probe-${probe++}`, `probe-${probe++}`];
            for (const id of ids) await compileOnNewConnection(id);
            await new Promise((resolve) => setTimeout(resolve, 200));
            return ids.every((id) => compiled.has(id));
          },
          { timeout: 15_000 },
        )
        .toBe(true);
      const before = await metricsText(sidecar);
      const ids = Array.from({ length: 10 }, (_, index) => `watched-${index}`);
      for (const id of ids) await compileOnNewConnection(id);
      await expect.poll(() => ids.filter((id) => !compiled.has(id)), { timeout: 10_000 }).toEqual([]);
      // Both workers compiled some of them.
      const after = await metricsText(sidecar);
      const compiles = (text: string, worker: number) => Number(new RegExp(`^contextd_compiles_total\\{worker="${worker}"\\} (\\d+)$`, "m").exec(text)?.[1] ?? 0);
      const perWorker = [1, 2].map((worker) => compiles(after, worker) - compiles(before, worker));
      expect(perWorker[0]! + perWorker[1]!).toBe(10);
      expect(perWorker.every((count) => count > 0), `both workers compiled: ${perWorker.join(" + ")}`).toBe(true);
      watchAbort.abort();
      await watching;
      // With no subscriber left, the gauge says so on every worker.
      await expect.poll(subscribers, { timeout: 10_000 }).toBe(0);
    });

    it("replaces a worker that dies, and keeps serving meanwhile", async () => {
      const [victim, survivor] = announcedWorkers(sidecar);
      process.kill(victim!, "SIGKILL");
      await expect.poll(() => sidecar.logs.some((line) => line.includes('"msg":"worker died: starting a new one"')), { timeout: 10_000 }).toBe(true);
      // Until its replacement listens, the survivor takes every connection.
      const client = createClient(ConversationService, createGrpcTransport({ baseUrl: sidecar.url }));
      const commit = { conversationId: "after-a-worker-died", deltas: [appendHistory(textMessage("m", Role.USER, "hi"))], idempotencyKey: "m" };
      expect((await client.commit(commit, { timeoutMs: 5_000 })).version).toBe(1n);
      // The replacement answers /metrics alongside the survivor.
      await expect.poll(async () => (await metricsText(sidecar)).match(/^contextd_serving\{worker="\d+"\} 1$/gm)?.length ?? 0, { timeout: 10_000 }).toBe(2);
      expect(alive(survivor!)).toBe(true);
    });

    it("drains every worker on SIGTERM: calls in flight on each are answered, then all exit", async () => {
      const workersBefore = sidecar.logs.filter((line) => line.includes('"msg":"contextd stopping"')).length;
      expect(workersBefore).toBe(0);
      // Two calls on two connections, so on both workers in turn, each held open by its body.
      const held = [heldCall(sidecar.port, "drain-a"), heldCall(sidecar.port, "drain-b")];
      await new Promise((resolve) => setTimeout(resolve, 200));
      const exited = sidecar.stop("SIGTERM");
      await expect.poll(() => sidecar.logs.filter((line) => line.includes('"msg":"contextd stopping"') && line.includes('"pid"')).length, { timeout: 10_000 }).toBe(2);
      for (const call of held) call.finish();
      expect(await Promise.all(held.map((call) => call.response))).toEqual([200, 200]);
      expect(await exited).toBe(0);
      const stopped = sidecar.logs.filter((line) => line.includes('"msg":"contextd stopped"'));
      expect(stopped.filter((line) => line.includes('"pid"'))).toHaveLength(2);
      expect(stopped.at(-1)).not.toContain('"pid"');
    });
  });
});
