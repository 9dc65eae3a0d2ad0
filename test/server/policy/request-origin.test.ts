import * as http from "node:http";
import * as http2 from "node:http2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create, toBinary } from "@bufbuild/protobuf";
import { ConversationService, ListConversationsRequestSchema } from "#gen/contextd/v1/conversation_service_pb";
import { grpcJsClient } from "../../support/grpc-js.js";
import { grpcEnvelope, grpcStatus, rawHttp2 } from "../../support/raw-http2.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";

// Issue 29 #6: with no bearer tokens, a web page using DNS rebinding (its own name made to resolve
// to 127.0.0.1) was same-origin with the Connect JSON API: Host attacker.example, ListConversations
// 200, Commit 200. Now only loopback names and --allowed-hosts are served without tokens, and a
// browser request whose Origin is another site's is refused always (policy/request-origin.ts).

const token = "request-origin-test-token-0123";
const commitBody = JSON.stringify({
  conversationId: "origin/c1",
  deltas: [{ appendMessages: { segment: "SEGMENT_HISTORY", messages: [{ id: "m1", role: "ROLE_USER", parts: [{ text: { text: "charge the card" } }] }] } }],
});

/** A Connect JSON call over HTTP/1.1 with the Host (and Origin) a browser would send. */
function connectCall(port: number, path: string, body: string, headers: Record<string, string>): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const request = http.request({ host: "127.0.0.1", port, path, method: path.startsWith("/inspector") ? "GET" : "POST", headers: { "content-type": "application/json", ...headers } }, (response) => {
      let text = "";
      response.setEncoding("utf8");
      response.on("data", (chunk: string) => (text += chunk));
      response.on("end", () => resolve({ status: response.statusCode!, body: text }));
    });
    request.on("error", reject);
    request.end(path.startsWith("/inspector") ? undefined : body);
  });
}

const listPath = "/contextd.v1.ConversationService/ListConversations";
const commitPath = "/contextd.v1.ConversationService/Commit";
const healthPath = "/grpc.health.v1.Health/Check";

describe("Host and Origin without bearer tokens", () => {
  let sidecar: Sidecar;
  beforeAll(async () => {
    sidecar = await startSidecar(["--allowed-hosts", "contextd.internal,.pods.internal"]);
  });
  afterAll(async () => {
    await sidecar?.stop();
  });

  it("refuses a DNS-rebinding Host: PERMISSION_DENIED (HTTP 403) naming the Host and --allowed-hosts, nothing committed", async () => {
    const listed = await connectCall(sidecar.port, listPath, JSON.stringify({ prefix: "" }), { host: `attacker.example:${sidecar.port}` });
    expect(listed.status).toBe(403);
    const error = JSON.parse(listed.body) as { code: string; message: string; details: unknown[] };
    expect(error.code).toBe("permission_denied");
    expect(error.message).toContain(`Host "attacker.example:${sidecar.port}" is not served`);
    expect(error.message).toContain("--allowed-hosts");
    const committed = await connectCall(sidecar.port, commitPath, commitBody, { host: "attacker.example", origin: "http://attacker.example" });
    expect(committed.status).toBe(403);
    // The page of the inspector is refused too: under a foreign name it would only call the API.
    const page = await connectCall(sidecar.port, "/inspector/", "", { host: "attacker.example" });
    expect(page.status).toBe(403);
    // Nothing was stored by the refused commit.
    const listedHere = await connectCall(sidecar.port, listPath, JSON.stringify({ prefix: "origin/" }), { host: `127.0.0.1:${sidecar.port}` });
    expect(listedHere).toEqual({ status: 200, body: "{}" });
  });

  it("serves loopback names and --allowed-hosts, with and without a port, and the same origin", async () => {
    for (const host of [`localhost:${sidecar.port}`, `127.0.0.1:${sidecar.port}`, `[::1]:${sidecar.port}`, "LOCALHOST.", "contextd.internal", `a.pods.internal:${sidecar.port}`]) {
      const listed = await connectCall(sidecar.port, listPath, JSON.stringify({ prefix: "" }), { host });
      expect({ host, status: listed.status }).toEqual({ host, status: 200 });
    }
    // The inspector's own calls: Origin is the page's, the origin they are sent to.
    const committed = await connectCall(sidecar.port, commitPath, commitBody, { host: `localhost:${sidecar.port}`, origin: `http://localhost:${sidecar.port}` });
    expect(committed.status).toBe(200);
    // Not "pods.internal" itself, nor a name that only ends like it.
    for (const host of ["pods.internal", "evilpods.internal"]) {
      expect((await connectCall(sidecar.port, listPath, "{}", { host })).status).toBe(403);
    }
  });

  it("refuses another site's Origin even with a loopback Host", async () => {
    for (const origin of ["http://attacker.example", `http://localhost:${sidecar.port + 1}`, "null", `https://localhost:${sidecar.port}`]) {
      const response = await connectCall(sidecar.port, listPath, "{}", { host: `localhost:${sidecar.port}`, origin });
      expect({ origin, status: response.status }).toEqual({ origin, status: 403 });
      expect(response.body).toContain("is not this server's");
    }
  });

  it("keeps health and metrics open whatever the Host (probes send the pod's IP)", async () => {
    const health = await connectCall(sidecar.port, healthPath, "{}", { host: "10.1.2.3:7420" });
    expect(health).toEqual({ status: 200, body: '{"status":"SERVING"}' });
    const metrics = await new Promise<number>((resolve, reject) => {
      http.get({ host: "127.0.0.1", port: sidecar.port, path: "/metrics", headers: { host: "10.1.2.3" } }, (response) => {
        response.resume();
        resolve(response.statusCode!);
      }).on("error", reject);
    });
    expect(metrics).toBe(200);
  });

  it("serves gRPC clients (their :authority is the dial address) and refuses a foreign :authority on the direct path", async () => {
    const client = grpcJsClient(`localhost:${sidecar.port}`);
    try {
      const listed = await client.unary(ConversationService.method.listConversations, { prefix: "" });
      expect(listed.conversations).toBeDefined();
    } finally {
      client.close();
    }
    const body = grpcEnvelope(toBinary(ListConversationsRequestSchema, create(ListConversationsRequestSchema, {})));
    const headers = { "content-type": "application/grpc", te: "trailers" };
    const served = await rawHttp2(sidecar.url, listPath, headers, body);
    expect(grpcStatus(served).code).toBe(0);
    const session = http2.connect(sidecar.url);
    try {
      const refused = await new Promise<{ code: number; message: string }>((resolve, reject) => {
        const stream = session.request({ ":method": "POST", ":path": listPath, ":authority": "attacker.example", ...headers });
        let status: http2.IncomingHttpHeaders = {};
        stream.on("response", (received) => (status = received));
        stream.on("trailers", (received) => (status = received));
        stream.on("error", reject);
        stream.on("close", () => resolve({ code: Number(status["grpc-status"]), message: decodeURIComponent(String(status["grpc-message"])) }));
        stream.resume();
        stream.end(body);
      });
      expect(refused.code).toBe(7);
      expect(refused.message).toContain('Host "attacker.example" is not served');
    } finally {
      session.close();
    }
  });
});

describe("Host and Origin with bearer tokens", () => {
  let sidecar: Sidecar;
  beforeAll(async () => {
    sidecar = await startSidecar([], { CONTEXTD_AUTH_TOKENS: token });
  });
  afterAll(async () => {
    await sidecar?.stop();
  });

  it("serves any Host to a caller with a token (a rebinding page has none), and still refuses a foreign Origin", async () => {
    const listed = await connectCall(sidecar.port, listPath, "{}", { host: "contextd.example.com", authorization: `Bearer ${token}` });
    expect(listed.status).toBe(200);
    const foreign = await connectCall(sidecar.port, listPath, "{}", { host: "contextd.example.com", origin: "https://attacker.example", authorization: `Bearer ${token}` });
    expect(foreign.status).toBe(403);
    expect(JSON.parse(foreign.body).code).toBe("permission_denied");
  });
});
