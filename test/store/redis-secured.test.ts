import { Code, ConnectError } from "@connectrpc/connect";
import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { Role } from "#gen/contextd/v1/message_pb";
import { RedisConversationStore } from "../../src/store/redis-conversation-store.js";
import { conversationKeys } from "../../src/store/redis-scripts.js";
import { grpcJsClient } from "../support/grpc-js.js";
import { freePort, startRedis, type RedisProcess } from "../support/redis.js";
import { startRedisCluster, type RedisCluster } from "../support/redis-cluster.js";
import { startSidecar } from "../support/sidecar.js";
import { makeTestCertificates, type TestCertificates } from "../support/tls-certificates.js";
import { appendHistory, textMessage } from "./fixtures.js";

// Redis as managed services run it: a password (requirepass) and TLS only, for one node and for a
// six-node cluster (TLS on the cluster bus and replication too), with the servers' certificates
// signed by a throwaway CA. The store reaches them with rediss:// URLs and --redis-tls-ca.

const password = "s3cret:with@signs";
const encoded = encodeURIComponent(password);

async function rejection(promise: Promise<unknown>): Promise<ConnectError> {
  const error = await promise.then(() => undefined, (reason: unknown) => reason);
  expect(error).toBeInstanceOf(ConnectError);
  return error as ConnectError;
}

describe("Redis and Redis Cluster with a password and TLS", () => {
  let certificates: TestCertificates;
  let ca: string;
  let redis: RedisProcess;
  let tlsPort: number;
  let cluster: RedisCluster;
  const stores: RedisConversationStore[] = [];
  const storeFor = (...args: ConstructorParameters<typeof RedisConversationStore>) => {
    const store = new RedisConversationStore(...args);
    stores.push(store);
    return store;
  };

  beforeAll(async () => {
    certificates = makeTestCertificates();
    ca = certificates.pem(certificates.caCert).toString();
    tlsPort = await freePort();
    const tls = ["--tls-cert-file", certificates.serverCert, "--tls-key-file", certificates.serverKey, "--tls-ca-cert-file", certificates.caCert, "--tls-auth-clients", "no"];
    [redis, cluster] = await Promise.all([
      startRedis({ args: ["--port", "0", "--tls-port", String(tlsPort), ...tls, "--requirepass", password] }),
      startRedisCluster({ secured: { password, certificates } }),
    ]);
  }, 60_000);
  afterAll(async () => {
    await Promise.all(stores.map((store) => store.close()));
    await Promise.all([redis?.stop(), cluster?.stop()]);
    certificates?.remove();
  });

  it("commits, loads and watches on one node through rediss:// with the password and the CA", async () => {
    const store = storeFor(`rediss://:${encoded}@127.0.0.1:${tlsPort}`, { tlsCa: ca, watchBlockMs: 200 });
    expect(await store.connected()).toBe(true);
    await store.ping();
    expect((await store.commit("tls-one", 0n, [appendHistory(textMessage("m1", Role.USER, "over TLS"))], "k1")).version).toBe(1n);
    expect((await store.load("tls-one")).history.map((message) => message.id)).toEqual(["m1"]);
    const watch = new AbortController();
    for await (const change of store.watch("tls-one", 0n, watch.signal)) {
      expect(change.version).toBe(1n);
      watch.abort();
    }
  });

  it("answers UNAVAILABLE, saying why, with a wrong password or a certificate it cannot verify", async () => {
    const wrongPassword = storeFor(`rediss://:wrong@127.0.0.1:${tlsPort}`, { tlsCa: ca });
    expect(await wrongPassword.connected(1_000)).toBe(false);
    const denied = await rejection(wrongPassword.commit("tls-denied", 0n, [appendHistory(textMessage("m1", Role.USER, "x"))], ""));
    expect(denied.code).toBe(Code.Unavailable);
    expect(denied.message).toMatch(/WRONGPASS|invalid password/i);
    expect(denied.message).not.toContain("wrong@");

    const unverified = storeFor(`rediss://:${encoded}@127.0.0.1:${tlsPort}`);
    expect(await unverified.connected(1_000)).toBe(false);
    const untrusted = await rejection(unverified.ping());
    expect(untrusted.code).toBe(Code.Unavailable);
    expect(untrusted.message).toMatch(/certificate/i);
    expect(untrusted.message).not.toContain(password);
  });

  it("refuses a CA for a connection that is not TLS", () => {
    expect(() => new RedisConversationStore(`redis://127.0.0.1:${tlsPort}`, { tlsCa: ca })).toThrow(/not a rediss:\/\/ URL/);
    expect(() => new RedisConversationStore({ clusterNodes: cluster.addresses }, { tlsCa: ca })).toThrow(/not rediss:\/\/ URLs/);
  });

  it("reaches every node of a cluster with the seeds' password and TLS, the Watch connections that follow a failover too", async () => {
    const seeds = cluster.addresses.map((address) => `rediss://:${encoded}@${address}`);
    const store = storeFor({ clusterNodes: seeds }, { tlsCa: ca, watchBlockMs: 200 });
    expect(await store.connected()).toBe(true);
    await store.ping();
    const id = "tls-cluster";
    await store.commit(id, 0n, [appendHistory(textMessage("before", Role.USER, "before"))], "");
    const seen: string[] = [];
    const watch = new AbortController();
    const watching = (async () => {
      for await (const change of store.watch(id, 0n, watch.signal)) {
        seen.push(...change.deltas.flatMap((delta) => (delta.operation.case === "appendMessages" ? delta.operation.value.messages.map((message) => message.id) : [])));
        if (seen.length === 2) watch.abort();
      }
    })();
    await expect.poll(() => seen.length).toBe(1);
    // The watch's connection is to the slot's master; after the failover it opens one to the new
    // master, which asks for the password and TLS like every node.
    const master = await cluster.masterOf(conversationKeys("contextd", id).changes);
    const replica = await cluster.replicaOf(master);
    await cluster.promote(replica);
    await cluster.settled();
    await expect.poll(async () => (await cluster.masterOf(conversationKeys("contextd", id).changes)).address, { timeout: 10_000 }).toBe(replica.address);
    await expect.poll(async () => store.commit(id, 1n, [appendHistory(textMessage("after", Role.USER, "after"))], "after").then((outcome) => outcome.version, () => 0n), { timeout: 10_000 }).toBe(2n);
    await watching;
    expect(seen).toEqual(["before", "after"]);
  });

  it("serves from a sidecar given --redis-cluster-nodes rediss://... and --redis-tls-ca, and never logs the password", async () => {
    const caFile = join(certificates.dir, "redis-ca.pem");
    writeFileSync(caFile, ca);
    const seeds = cluster.addresses.map((address) => `rediss://:${encoded}@${address}`).join(",");
    const sidecar = await startSidecar(["--redis-cluster-nodes", seeds, "--redis-tls-ca", caFile]);
    try {
      const client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
      const conversationId = `tls-sidecar-${Date.now()}`;
      const committed = await client.unary(ConversationService.method.commit, { conversationId, deltas: [appendHistory(textMessage("m1", Role.USER, "hello over TLS"))] });
      expect(committed.version).toBe(1n);
      const compiled = await client.unary(ContextService.method.compile, { conversationId });
      expect(compiled.result!.payload!.history.map((message) => message.id)).toEqual(["m1"]);
      client.close();
      const logs = sidecar.logs.join("\n");
      expect(logs).toContain("rediss://(credentials)@127.0.0.1:");
      expect(logs).not.toContain(encoded);
      expect(logs).not.toContain(password);
    } finally {
      await sidecar.stop();
    }
  });

  it("stops at start when --redis-tls-ca is given without TLS or names an unreadable file", () => {
    const main = fileURLToPath(new URL("../../dist/src/main.js", import.meta.url));
    const plain = spawnSync(process.execPath, [main, "--port", "0", "--redis-url", `redis://127.0.0.1:${tlsPort}`, "--redis-tls-ca", "/nonexistent.pem"], { encoding: "utf8", timeout: 15_000 });
    expect(plain.status).toBe(2);
    expect(plain.stderr).toContain("--redis-tls-ca or CONTEXTD_REDIS_TLS_CA: it is for TLS to Redis");
    const missing = spawnSync(process.execPath, [main, "--port", "0", "--redis-url", `rediss://127.0.0.1:${tlsPort}`, "--redis-tls-ca", "/nonexistent.pem"], { encoding: "utf8", timeout: 15_000 });
    expect(missing.status).not.toBe(0);
    expect(missing.stderr + missing.stdout).toContain("--redis-tls-ca /nonexistent.pem: ENOENT");
  });
});
