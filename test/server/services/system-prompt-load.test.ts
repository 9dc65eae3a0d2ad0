import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "#gen/grpc/health/v1/health_pb";
import { grpcJsClient } from "../../support/grpc-js.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";

// Issue 29 #10: system-prompt assembly ran in one slice and never read the deadline: 6,000 tools ×
// 20 practices held the stage 592 ms, health 833-1,071 ms, past a 300 ms deadline. Now the stage
// yields between tools and checks the deadline there. Here the compile with a 300 ms deadline is
// DEADLINE_EXCEEDED, the one without succeeds with the block, and health is answered throughout
// (latencies: bench/hardening-door.ts).
describe("system-prompt assembly of 6,000 tools × 20 practices (real sidecar, 512 MB heap)", () => {
  let sidecar: Sidecar;
  let client: ReturnType<typeof grpcJsClient>;
  beforeAll(async () => {
    sidecar = await startSidecar([], { NODE_OPTIONS: "--max-old-space-size=512" });
    // The answer holds the 6,000 definitions (about 19 MB).
    client = grpcJsClient(`127.0.0.1:${sidecar.port}`, undefined, { "grpc.max_receive_message_length": 64 * 1024 * 1024 });
  });
  afterAll(async () => {
    client?.close();
    await sidecar?.stop();
  });

  const toolDefinitions = Array.from({ length: 6_000 }, (_, tool) => ({
    name: `tool_${tool}`,
    description: `Does thing ${tool}.`,
    bestPractices: Array.from({ length: 20 }, (_, practice) => `Practice ${practice} of tool ${tool}: check the input first.`),
  }));
  const request = { toolDefinitions: { toolDefinitions }, systemPrompt: { toolGuidance: true } };

  it("answers health while it builds the block, and stops at the deadline", async () => {
    let compiling = true;
    const health: ServingStatus[] = [];
    const checks = (async () => {
      while (compiling) {
        health.push((await client.unary(Health.method.check, { service: "" })).status);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    })();
    const late = await client.unary(ContextService.method.compile, request, new grpc.Metadata(), { deadline: Date.now() + 300 }).catch((error: grpc.ServiceError) => error);
    expect(late).toMatchObject({ code: grpc.status.DEADLINE_EXCEEDED });
    const { result } = await client.unary(ContextService.method.compile, request);
    compiling = false;
    await checks;
    const block = result!.payload!.system[0]!.parts[0]!.kind;
    expect(block.case === "text" && block.value.text.startsWith("<tool_guidance>")).toBe(true);
    expect(block.case === "text" && block.value.text).toContain("Tool: tool_5999");
    expect(health.length).toBeGreaterThan(0);
    expect(health.every((status) => status === ServingStatus.SERVING)).toBe(true);
  });
});
