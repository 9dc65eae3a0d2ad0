// A worker thread that asks Health/Check every 10 ms on its own connection and event loop, so the
// latencies it records are the sidecar's, not those of the bench's own (which serializes large
// requests). Messages: "start" begins a series, "stop" ends it and answers its latencies in ms.
import { parentPort, workerData } from "node:worker_threads";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { Health } from "#gen/grpc/health/v1/health_pb";

const health = createClient(Health, createGrpcTransport({ baseUrl: (workerData as { url: string }).url }));
let series: number[] | undefined;
let probing: Promise<void> | undefined;

parentPort!.on("message", async (message: "start" | "stop") => {
  if (message === "start") {
    const latencies: number[] = [];
    series = latencies;
    probing = (async () => {
      while (series === latencies) {
        const started = performance.now();
        await health.check({ service: "" });
        latencies.push(performance.now() - started);
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    })();
    return;
  }
  const latencies = series ?? [];
  series = undefined;
  await probing;
  parentPort!.postMessage(latencies);
});
