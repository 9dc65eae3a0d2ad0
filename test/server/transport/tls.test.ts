import * as http2 from "node:http2";
import * as tls from "node:tls";
import * as grpc from "@grpc/grpc-js";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "#gen/grpc/health/v1/health_pb";
import { grpcJsClient } from "../../support/grpc-js.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";
import { makeTestCertificates, type TestCertificates } from "../../support/tls-certificates.js";

let certificates: TestCertificates;
beforeAll(() => {
  certificates = makeTestCertificates();
});
afterAll(() => certificates?.remove());

const startLine = (sidecar: Sidecar) =>
  sidecar.logs.map((line) => JSON.parse(line) as Record<string, unknown>).find((entry) => entry.msg === "contextd listening")!;

/** The ALPN protocol a TLS handshake with the sidecar settles on when the client offers `protocols`. */
async function negotiated(port: number, protocols: string[], clientCertificate = false): Promise<string | false> {
  const socket = tls.connect({
    host: "127.0.0.1",
    port,
    servername: "localhost",
    ca: certificates.pem(certificates.caCert),
    ALPNProtocols: protocols,
    ...(clientCertificate ? { cert: certificates.pem(certificates.clientCert), key: certificates.pem(certificates.clientKey) } : {}),
  });
  try {
    await new Promise<void>((resolve, reject) => socket.once("secureConnect", resolve).once("error", reject));
    return socket.alpnProtocol ?? false;
  } finally {
    socket.destroy();
  }
}

describe("TLS on the one port (--tls-cert, --tls-key)", () => {
  let sidecar: Sidecar;
  beforeAll(async () => {
    sidecar = await startSidecar(["--tls-cert", certificates.serverCert], { CONTEXTD_TLS_KEY: certificates.serverKey });
  });
  afterAll(async () => {
    await sidecar?.stop();
  });

  it("says so in the start line, with the store and whether it is reachable", () => {
    expect(startLine(sidecar)).toMatchObject({ tls: "on", store: { kind: "memory", reachable: true } });
    expect(startLine(sidecar).config).toMatchObject({ tlsCert: certificates.serverCert, tlsKey: certificates.serverKey, tlsClientCa: "" });
  });

  it("offers h2 and http/1.1 by ALPN, preferring h2", async () => {
    expect(await negotiated(sidecar.port, ["h2", "http/1.1"])).toBe("h2");
    expect(await negotiated(sidecar.port, ["http/1.1"])).toBe("http/1.1");
  });

  it("serves gRPC (grpc-js and connect-node), gRPC-Web and Connect over HTTP/2 and HTTP/1.1 on the same port", async () => {
    const ca = certificates.pem(certificates.caCert);
    const url = `https://localhost:${sidecar.port}`;
    const transports = {
      "grpc h2": createGrpcTransport({ baseUrl: url, nodeOptions: { ca } }),
      "grpc-web h2": createGrpcWebTransport({ baseUrl: url, httpVersion: "2", nodeOptions: { ca } }),
      "grpc-web h1": createGrpcWebTransport({ baseUrl: url, httpVersion: "1.1", nodeOptions: { ca } }),
      "connect h2": createConnectTransport({ baseUrl: url, httpVersion: "2", nodeOptions: { ca } }),
      "connect h1": createConnectTransport({ baseUrl: url, httpVersion: "1.1", nodeOptions: { ca } }),
    };
    for (const [name, transport] of Object.entries(transports)) {
      const conversations = createClient(ConversationService, transport);
      const committed = await conversations.commit({
        conversationId: `tls/${name}`,
        deltas: [{ operation: { case: "appendUser", value: { message: { parts: [{ kind: { case: "text", value: { text: "hi" } } }] } } } }],
      });
      expect(committed.version, name).toBe(1n);
      for await (const update of createClient(Health, transport).watch({ service: "" })) {
        expect(update.status, name).toBe(ServingStatus.SERVING);
        break;
      }
    }
    const client = grpcJsClient(`localhost:${sidecar.port}`, grpc.credentials.createSsl(ca));
    try {
      const state = await client.unary(ConversationService.method.getState, { conversationId: "tls/grpc h2" });
      expect(state.state?.version).toBe(1n);
    } finally {
      client.close();
    }
  });

  it("refuses cleartext: an h2c request with prior knowledge gets no answer, the connection is closed", async () => {
    const session = http2.connect(`http://127.0.0.1:${sidecar.port}`);
    session.on("error", () => {});
    const outcome = await new Promise<string>((resolve) => {
      const request = session.request({ ":method": "POST", ":path": "/grpc.health.v1.Health/Check", "content-type": "application/json" });
      request.once("response", (headers) => resolve(`answered ${headers[":status"]}`));
      request.once("error", (error: Error) => resolve(`refused: ${error.message}`));
      request.once("close", () => resolve("refused: closed"));
      request.end("{}");
    });
    session.destroy();
    expect(outcome).toMatch(/^refused/);
  });
});

describe("mutual TLS (--tls-client-ca)", () => {
  let sidecar: Sidecar;
  beforeAll(async () => {
    sidecar = await startSidecar([
      "--tls-cert", certificates.serverCert, "--tls-key", certificates.serverKey, "--tls-client-ca", certificates.caCert,
    ]);
  });
  afterAll(async () => {
    await sidecar?.stop();
  });

  it("says client certificates are required", () => {
    expect(startLine(sidecar).tls).toBe("on, client certificates required");
  });

  it("serves a client with a certificate the CA signed and refuses one without", async () => {
    const ca = certificates.pem(certificates.caCert);
    const withCertificate = createClient(Health, createGrpcTransport({
      baseUrl: `https://localhost:${sidecar.port}`,
      nodeOptions: { ca, cert: certificates.pem(certificates.clientCert), key: certificates.pem(certificates.clientKey) },
    }));
    expect((await withCertificate.check({ service: "" })).status).toBe(ServingStatus.SERVING);
    const without = createClient(Health, createGrpcTransport({ baseUrl: `https://localhost:${sidecar.port}`, nodeOptions: { ca } }));
    await expect(without.check({ service: "" })).rejects.toThrow();
    expect(await negotiated(sidecar.port, ["h2"], true)).toBe("h2");
  });
});

describe("TLS configuration errors stop the start, naming the flag", () => {
  it("a certificate without its key", async () => {
    await expect(startSidecar(["--tls-cert", certificates.serverCert])).rejects.toThrow(/--tls-cert \(CONTEXTD_TLS_CERT\) and --tls-key \(CONTEXTD_TLS_KEY\) go together/);
  });

  it("client certificates without TLS", async () => {
    await expect(startSidecar(["--tls-client-ca", certificates.caCert])).rejects.toThrow(/--tls-client-ca or CONTEXTD_TLS_CLIENT_CA: client certificates need TLS/);
  });

  it("an unreadable file", async () => {
    await expect(startSidecar(["--tls-cert", `${certificates.dir}/missing.pem`, "--tls-key", certificates.serverKey])).rejects.toThrow(/exited with 2.*cannot read --tls-cert .*missing\.pem/s);
  });

  it("a key that is not the certificate's", async () => {
    await expect(startSidecar(["--tls-cert", certificates.serverCert, "--tls-key", certificates.clientKey])).rejects.toThrow(/exited with 2.*invalid --tls-cert .* \/ --tls-key .*client\.key/s);
  });
});
