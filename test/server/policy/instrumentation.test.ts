import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { failureLogLevel } from "../../../src/server/policy/instrumentation.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";

describe("failureLogLevel: who is at fault", () => {
  it("is error for the server's faults, warn for refused callers, info for a caller's normal failures", () => {
    for (const code of [Code.Unknown, Code.DeadlineExceeded, Code.Unimplemented, Code.Internal, Code.Unavailable, Code.DataLoss]) {
      expect(failureLogLevel(code), Code[code]).toBe("error");
    }
    for (const code of [Code.Unauthenticated, Code.PermissionDenied, Code.ResourceExhausted]) expect(failureLogLevel(code), Code[code]).toBe("warn");
    for (const code of [Code.Aborted, Code.Canceled, Code.InvalidArgument, Code.NotFound, Code.AlreadyExists, Code.FailedPrecondition, Code.OutOfRange]) {
      expect(failureLogLevel(code), Code[code]).toBe("info");
    }
  });
});

describe("failed RPCs in a real sidecar's log", () => {
  let sidecar: Sidecar;
  beforeAll(async () => {
    sidecar = await startSidecar(["--log-level", "warn"]);
  });
  afterAll(async () => {
    await sidecar?.stop();
  });

  const call = (method: string, body: unknown) =>
    fetch(`${sidecar.url}/contextd.v1.ConversationService/${method}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

  it("a version conflict is not logged at warn; --log-level info shows it at info", async () => {
    const conflict = await call("Clear", { conversationId: "log-levels", expectedVersion: "7" });
    expect(conflict.status).toBe(409);
    const invalid = await call("GetState", { conversationId: "" });
    expect(invalid.status).toBe(400);
    // Both are the caller's normal failures: a warn-level sidecar logs neither.
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(sidecar.logs.filter((line) => line.includes('"msg":"rpc"'))).toEqual([]);

    const verbose = await startSidecar(["--log-level", "info"]);
    try {
      const again = await fetch(`${verbose.url}/contextd.v1.ConversationService/Clear`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ conversationId: "log-levels", expectedVersion: "7" }),
      });
      expect(again.status).toBe(409);
      await expect.poll(() => verbose.logs.find((line) => line.includes('"msg":"rpc"'))).toBeDefined();
      expect(JSON.parse(verbose.logs.find((line) => line.includes('"msg":"rpc"'))!)).toMatchObject({ level: "info", code: "aborted", method: "contextd.v1.ConversationService/Clear" });
    } finally {
      await verbose.stop();
    }
  });
});
