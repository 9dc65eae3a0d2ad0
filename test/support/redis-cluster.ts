import { execFile, spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { mkdirSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { portFree } from "./redis.js";
import type { TestCertificates } from "./tls-certificates.js";

const run = promisify(execFile);

/** One redis-server of a local cluster. */
export interface ClusterNode {
  port: number;
  /** "127.0.0.1:port", as `--redis-cluster-nodes` takes it. */
  address: string;
  /** The running server's process id (for the benches' CPU figures). */
  pid(): number | undefined;
  /** SIGKILL (no goodbye to clients, replies in flight lost); waits for the exit. */
  kill(): Promise<void>;
  /** Starts it again on the same port with its cluster config (it rejoins as what the cluster says it is). */
  restart(): Promise<void>;
  /** "master" or "slave", as the node itself reports it now. */
  role(): Promise<string>;
  /** How many replicas are connected to this node and in sync (`state=online` in INFO replication). */
  onlineReplicas(): Promise<number>;
}

/** A real Redis Cluster on loopback: three masters with one replica each (or `replicasPerMaster`), on free ports. */
export interface RedisCluster {
  nodes: ClusterNode[];
  /** Every node's address, for `--redis-cluster-nodes` or ioredis' Cluster. */
  addresses: string[];
  /** The master serving `key` now (CLUSTER KEYSLOT, then CLUSTER SHARDS/NODES of a live node). */
  masterOf(key: string): Promise<ClusterNode>;
  /** The replica of `master` (each master has one). */
  replicaOf(master: ClusterNode): Promise<ClusterNode>;
  /**
   * A manual failover (CLUSTER FAILOVER on the replica): the replica and its master swap roles
   * once the replica has every write, with no write lost. Resolves once the replica is master.
   */
  promote(replica: ClusterNode): Promise<void>;
  /** Waits until every live node reports cluster_state:ok and every live replica's link to its master is up. */
  settled(timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

export interface RedisClusterOptions {
  /**
   * How long a master may be unreachable before its replica takes over (cluster-node-timeout).
   * Short by default so failover tests stay short.
   */
  nodeTimeoutMs?: number;
  /**
   * A cluster as managed services run it: every node asks for `password` (requirepass, and
   * masterauth between nodes) and speaks only TLS (clients, replication and the cluster bus) with
   * the server certificate of `certificates`. `ClusterNode.address` is then the TLS port.
   */
  secured?: { password: string; certificates: TestCertificates };
  /** Replicas of each master (default 1): with 2, a master's loss still leaves its shard a replica. */
  replicasPerMaster?: number;
}

/**
 * Six redis-server processes in cluster mode (each in its own directory, persistence off, as in
 * `startRedis`), joined by `redis-cli --cluster create --cluster-replicas 1`, which makes the first
 * three masters and the last three their replicas (nine and `--cluster-replicas 2` with
 * `replicasPerMaster: 2`). Resolves once every node sees the cluster ok.
 */
export async function startRedisCluster(options: RedisClusterOptions = {}): Promise<RedisCluster> {
  const root = mkdtempSync(join(tmpdir(), "contextd-redis-cluster-"));
  const ports: number[] = [];
  // Cluster nodes also listen on port + 10000 (the cluster bus). Both are taken below Linux's
  // ephemeral range (32768 up by default): a port the kernel hands out there (freePort, any
  // outgoing connection) once took a bus port between the choice and the node's start, and the
  // node exited ("Address already in use"). Each pair is checked free and kept distinct.
  const replicasPerMaster = options.replicasPerMaster ?? 1;
  while (ports.length < 3 * (1 + replicasPerMaster)) {
    const port = 20_000 + Math.floor(Math.random() * 2_768);
    if (ports.includes(port) || !(await portFree(port)) || !(await portFree(port + 10_000))) continue;
    ports.push(port);
  }
  const children = new Map<number, ChildProcess>();
  const secured = options.secured;
  // The cluster bus asks the connecting node for a client certificate whatever tls-auth-clients
  // says, and the server certificate is for serverAuth only: nodes present the client one.
  const tlsFiles = secured
    ? [
        "--tls-cert-file", secured.certificates.serverCert, "--tls-key-file", secured.certificates.serverKey,
        "--tls-client-cert-file", secured.certificates.clientCert, "--tls-client-key-file", secured.certificates.clientKey,
        "--tls-ca-cert-file", secured.certificates.caCert,
      ]
    : [];
  const securityOf = (port: number) =>
    secured
      ? ["--port", "0", "--tls-port", String(port), ...tlsFiles, "--tls-auth-clients", "no", "--tls-cluster", "yes", "--tls-replication", "yes", "--requirepass", secured.password, "--masterauth", secured.password]
      : ["--port", String(port)];
  // redis-cli's own flags for the same: TLS with the CA, the password without the warning.
  const cliSecurity = secured ? ["--tls", "--cacert", secured.certificates.caCert, "-a", secured.password, "--no-auth-warning"] : [];
  const launch = async (port: number) => {
    const dir = join(root, String(port));
    mkdirSync(dir, { recursive: true });
    const child = spawn(
      "redis-server",
      [
        ...securityOf(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "", "--appendonly", "no",
        "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
        "--cluster-node-timeout", String(options.nodeTimeoutMs ?? 1_000),
        // A replica takes over however long it was out of touch (tests kill masters at any time).
        "--cluster-replica-validity-factor", "0",
      ],
      { stdio: ["ignore", "pipe", "pipe"] },
    );
    let output = "";
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`redis-server (cluster node ${port}) did not start: ${output}`)), 10_000);
      child.once("exit", (code) => reject(new Error(`redis-server (cluster node ${port}) exited with ${code}: ${output}`)));
      child.stdout!.on("data", (chunk: Buffer) => {
        output += chunk;
        if (output.includes("Ready to accept connections")) {
          clearTimeout(timer);
          resolve();
        }
      });
    });
    children.set(port, child);
  };
  const cli = async (port: number, ...args: string[]) => (await run("redis-cli", [...cliSecurity, "-p", String(port), ...args])).stdout.trim();
  const alive = (port: number) => {
    const child = children.get(port);
    return child !== undefined && child.exitCode === null && child.signalCode === null;
  };
  const stop = async (port: number, signal: NodeJS.Signals) => {
    const child = children.get(port);
    if (!child || !alive(port)) return;
    const exited = once(child, "exit");
    child.kill(signal);
    await exited;
  };
  const nodes: ClusterNode[] = ports.map((port) => ({
    port,
    address: `127.0.0.1:${port}`,
    pid: () => children.get(port)?.pid,
    kill: () => stop(port, "SIGKILL"),
    restart: () => launch(port),
    role: async () => (await cli(port, "ROLE")).split("\n")[0]!,
    onlineReplicas: async () => (await cli(port, "INFO", "replication")).split("\n").filter((line) => /^slave\d+:.*state=online/.test(line)).length,
  }));
  try {
    await Promise.all(ports.map(launch));
    await run("redis-cli", [...cliSecurity, "--cluster", "create", ...nodes.map((node) => node.address), "--cluster-replicas", String(replicasPerMaster), "--cluster-yes"]);
  } catch (error) {
    await Promise.all(ports.map((port) => stop(port, "SIGKILL")));
    throw error;
  }
  const liveNodes = () => nodes.filter((node) => alive(node.port));
  const masterOf = async (key: string) => {
    const [probe] = liveNodes();
    const slot = Number(await cli(probe!.port, "CLUSTER", "KEYSLOT", key));
    // CLUSTER NODES: id address@bus flags master ping pong epoch state slots...
    for (const line of (await cli(probe!.port, "CLUSTER", "NODES")).split("\n")) {
      const fields = line.split(" ");
      if (!fields[2]!.includes("master") || fields[2]!.includes("fail")) continue;
      for (const range of fields.slice(8)) {
        const [from, to] = range.split("-").map(Number);
        if (slot >= from! && slot <= (to ?? from)!) return nodes.find((node) => node.address === fields[1]!.split("@")[0])!;
      }
    }
    throw new Error(`no live master serves slot ${slot} of ${key}`);
  };
  const nodeLines = async () => {
    const [probe] = liveNodes();
    return (await cli(probe!.port, "CLUSTER", "NODES")).split("\n").map((line) => line.split(" "));
  };
  const replicaOf = async (master: ClusterNode) => {
    const lines = await nodeLines();
    const masterId = lines.find((fields) => fields[1]!.split("@")[0] === master.address)![0];
    const replica = lines.find((fields) => fields[3] === masterId && !fields[2]!.includes("fail"));
    if (!replica) throw new Error(`${master.address} has no live replica`);
    return nodes.find((node) => node.address === replica[1]!.split("@")[0])!;
  };
  const promote = async (replica: ClusterNode) => {
    await cli(replica.port, "CLUSTER", "FAILOVER");
    const deadline = Date.now() + 15_000;
    while ((await replica.role()) !== "master") {
      if (Date.now() > deadline) throw new Error(`${replica.address} did not become master`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  };
  const settled = async (timeoutMs = 15_000) => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const states = await Promise.all(liveNodes().map((node) => cli(node.port, "CLUSTER", "INFO").catch(() => "")));
      // A replica that has not finished its first sync would lose everything in a failover.
      const links = await Promise.all(liveNodes().map((node) => cli(node.port, "INFO", "replication").catch(() => "")));
      const synced = links.every((info) => info.includes("role:master") || info.includes("master_link_status:up"));
      if (synced && states.every((state) => state.includes("cluster_state:ok"))) return;
      if (Date.now() > deadline) throw new Error(`the cluster did not settle in ${timeoutMs} ms: ${states.map((state) => /cluster_state:\w+/.exec(state)?.[0]).join(", ")}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  };
  await settled();
  return {
    nodes,
    addresses: nodes.map((node) => node.address),
    masterOf,
    replicaOf,
    promote,
    settled,
    stop: async () => {
      await Promise.all(ports.map((port) => stop(port, "SIGTERM")));
    },
  };
}
