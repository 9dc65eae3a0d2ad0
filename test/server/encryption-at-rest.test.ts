import { execFileSync, spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, mkdtempSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { create } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConversationService, type WatchResponse } from "#gen/contextd/v1/conversation_service_pb";
import { MessageSchema, Role } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { grpcJsClient } from "../support/grpc-js.js";
import { postgresBinDir, startPostgres, type PostgresProcess } from "../support/postgres.js";
import { startRedis, type RedisProcess } from "../support/redis.js";
import { startSidecar, type Sidecar } from "../support/sidecar.js";
import { appendHistory, artifactDelta, delta, textMessage } from "../store/fixtures.js";

// What issue 32 asks of encryption at rest, shown on real processes: a Redis MONITOR and a dump of
// every Postgres column, taken while a real sidecar commits, reads, lists and watches
// conversations of distinctive text, hold none of it; the same run without keys shows it all
// (so the capture would have seen it). Docs: docs/encryption-at-rest.md.

const mainScript = fileURLToPath(new URL("../../dist/src/main.js", import.meta.url));
const keys = `# the first key writes\nrun-2:${Buffer.alloc(32, 7).toString("base64")}\nrun-1:${Buffer.alloc(32, 8).toString("hex")}\nacme/acme-1:${Buffer.alloc(32, 9).toString("base64")}\n`;

/** The distinctive texts of one run: every kind of content a conversation holds. */
function secretsOf(run: string) {
  return {
    user: `zebraquartz-${run}-user-text`,
    system: `zebraquartz-${run}-system-prompt`,
    call: `zebraquartz-${run}-call-arguments`,
    result: `zebraquartz-${run}-tool-result`,
    title: `zebraquartz-${run}-title`,
    labelKey: `zebraquartz-${run}-label-key`,
    labelValue: `zebraquartz-${run}-label-value`,
    artifact: `zebraquartz-${run}-artifact`,
  };
}

/** Commits, reads (state, a window, a listing), a Watch of every change, and a cold read by a second sidecar. */
async function exercise(sidecars: [Sidecar, Sidecar], conversationId: string, secrets: ReturnType<typeof secretsOf>): Promise<void> {
  const [client, cold] = sidecars.map((sidecar) => grpcJsClient(`127.0.0.1:${sidecar.port}`));
  try {
    const commit = (deltas: ReturnType<typeof delta>[], idempotencyKey = "") => client!.unary(ConversationService.method.commit, { conversationId, deltas, idempotencyKey });
    const watch = client!.serverStream(ConversationService.method.watch, { conversationId, fromVersion: 0n });
    const changes: WatchResponse[] = [];
    const four = new Promise<void>((resolve, reject) => {
      watch.on("data", (response: WatchResponse) => {
        if (response.kind.case === "change") changes.push(response);
        if (changes.length === 4) resolve();
      });
      watch.on("error", (error: grpc.ServiceError) => (error.code === grpc.status.CANCELLED ? undefined : reject(error)));
    });
    await commit([
      delta({ case: "appendMessages", value: { segment: Segment.SYSTEM, messages: [textMessage("s1", Role.SYSTEM, secrets.system)] } }),
      appendHistory(textMessage("u1", Role.USER, secrets.user)),
      delta({ case: "setMetadata", value: { title: secrets.title, labels: { [secrets.labelKey]: secrets.labelValue } } }),
    ]);
    await commit([
      delta({
        case: "appendToolRound",
        value: {
          assistant: create(MessageSchema, { id: "a1", role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: "call-1", name: "lookup", arguments: { data: JSON.stringify({ q: secrets.call }) } } } }] }),
          results: [create(MessageSchema, { id: "r1", role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: "call-1", name: "lookup", payload: { text: secrets.result } } } }] })],
        },
      }),
    ]);
    const artifact = artifactDelta("doc-1");
    (artifact.operation.value as { artifact: { payload: { text: string } } }).artifact.payload.text = secrets.artifact;
    await commit([artifact]);
    await commit([appendHistory(textMessage("u2", Role.USER, `${secrets.user} again`))], "k-1");
    await four;
    watch.cancel();
    expect(changes.map((change) => change.kind.case === "change" && change.kind.value.version)).toEqual([1n, 2n, 3n, 4n]);

    const state = (await client!.unary(ConversationService.method.getState, { conversationId })).state!;
    expect(state.history.map((message) => message.id)).toEqual(["u1", "a1", "r1", "u2"]);
    expect(state.title).toBe(secrets.title);
    // A second sidecar has nothing cached: everything it answers came from the store and decrypted.
    const coldState = (await cold!.unary(ConversationService.method.getState, { conversationId })).state!;
    expect(coldState).toEqual(state);
    const window = await cold!.unary(ConversationService.method.readMessages, { conversationId, last: 2 });
    expect(window.messages.map((message) => message.id)).toEqual(["r1", "u2"]);
    const listed = await cold!.unary(ConversationService.method.listConversations, { prefix: conversationId, labels: { [secrets.labelKey]: secrets.labelValue } });
    expect(listed.conversations.map((summary) => [summary.conversationId, summary.title, summary.labels])).toEqual([[conversationId, secrets.title, { [secrets.labelKey]: secrets.labelValue }]]);
    // A replaced history logs an undo holding the messages it replaced (the secrets among them),
    // and a rewind one holding what it undid: each is stored inside its change, sealed with it.
    await commit([delta({ case: "replaceSegment", value: { segment: Segment.HISTORY, messages: [textMessage("u3", Role.USER, "short")] } })]);
    expect((await cold!.unary(ConversationService.method.getState, { conversationId, atVersion: 4n })).state!).toEqual(coldState);
    await client!.unary(ConversationService.method.rewind, { conversationId, toVersion: 4n });
    expect((await cold!.unary(ConversationService.method.getState, { conversationId, atVersion: 5n })).state!.history.map((message) => message.id)).toEqual(["u3"]);
  } finally {
    client!.close();
    cold!.close();
  }
}

/** The texts of `secrets` found in `haystack` (bytes as Latin-1, so UTF-8 ASCII reads as itself). */
function found(haystack: string, secrets: ReturnType<typeof secretsOf>): string[] {
  return Object.values(secrets).filter((secret) => haystack.includes(secret));
}

/** Everything a raw MONITOR connection receives until `stop` is called. */
async function monitor(port: number): Promise<{ text(): string; stop(): void }> {
  const socket = connect(port, "127.0.0.1");
  let captured = "";
  socket.on("data", (chunk: Buffer) => (captured += chunk.toString("latin1")));
  socket.write("MONITOR\r\n");
  while (!captured.startsWith("+OK")) await new Promise((resolve) => setTimeout(resolve, 10));
  return { text: () => captured, stop: () => socket.destroy() };
}

async function sidecarPair(args: string[], env: NodeJS.ProcessEnv): Promise<[Sidecar, Sidecar]> {
  return Promise.all([startSidecar(args, env), startSidecar(args, env)]);
}

describe("encryption at rest: a Redis MONITOR of a real sidecar's commits, reads, listings and Watch", () => {
  let redis: RedisProcess;
  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    await redis?.stop();
  });

  it("shows none of the message text, title or labels with keys, and all of them without", async () => {
    for (const encrypted of [true, false]) {
      const secrets = secretsOf(encrypted ? "sealed" : "plain");
      const sidecars = await sidecarPair(["--redis-url", redis.url], encrypted ? { CONTEXTD_ENCRYPTION_KEYS: keys } : {});
      const capture = await monitor(redis.port);
      try {
        await exercise(sidecars, `monitor-${encrypted}`, secrets);
      } finally {
        capture.stop();
        await Promise.all(sidecars.map((sidecar) => sidecar.stop()));
      }
      const text = capture.text();
      // The capture saw the run: its commit scripts name the conversation's keys.
      expect(text).toContain(`monitor-${encrypted}`);
      expect(found(text, secrets), encrypted ? "plaintext in MONITOR with encryption on" : "the control run's plaintext").toEqual(encrypted ? [] : Object.values(secrets));
    }
  });
});

describe("encryption at rest: every column of a real sidecar's Postgres tables", () => {
  let postgres: PostgresProcess;
  beforeAll(async () => {
    postgres = await startPostgres();
  });
  afterAll(async () => {
    await postgres?.destroy();
  });

  /** Every row of every table of the database, every column (bytea as its bytes), as one text. */
  async function dumpOf(url: string): Promise<string> {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const tables = await client.query<{ table_name: string }>("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1");
      expect(tables.rows.map((row) => row.table_name)).toEqual(expect.arrayContaining(["contextd_changes", "contextd_conversations", "contextd_idempotency", "contextd_messages"]));
      let text = "";
      for (const { table_name } of tables.rows) {
        const { rows } = await client.query(`SELECT * FROM ${table_name}`);
        for (const row of rows) {
          for (const value of Object.values(row)) text += (Buffer.isBuffer(value) ? value.toString("latin1") : JSON.stringify(value)) + "\n";
        }
      }
      return text;
    } finally {
      await client.end();
    }
  }

  /** pg_dump's data of the database, its bytea hex decoded back to bytes. */
  function pgDumpOf(url: string): string {
    const dump = execFileSync(join(postgresBinDir(), "pg_dump"), ["--data-only", "--dbname", url], { encoding: "utf8", maxBuffer: 64 * 1024 * 1024 });
    return dump.replace(/\\\\x([0-9a-f]+)/g, (_, hex: string) => Buffer.from(hex, "hex").toString("latin1"));
  }

  it("holds none of the message text, title or labels with keys, and all of them without", async () => {
    const pgDump = existsSync(join(postgresBinDir(), "pg_dump"));
    for (const encrypted of [true, false]) {
      const url = await postgres.createDatabase(encrypted ? "sealed" : "plain");
      const secrets = secretsOf(encrypted ? "sealed" : "plain");
      const dir = mkdtempSync(join(tmpdir(), "contextd-keys-"));
      writeFileSync(join(dir, "keys"), keys, { mode: 0o600 });
      const sidecars = await sidecarPair(["--postgres-url", url, ...(encrypted ? ["--encryption-key-file", join(dir, "keys")] : [])], {});
      try {
        await exercise(sidecars, `dump-${encrypted}`, secrets);
      } finally {
        await Promise.all(sidecars.map((sidecar) => sidecar.stop()));
      }
      const dump = await dumpOf(url);
      expect(dump).toContain(`dump-${encrypted}`);
      expect(found(dump, secrets), encrypted ? "plaintext in the tables with encryption on" : "the control run's plaintext").toEqual(encrypted ? [] : Object.values(secrets));
      if (pgDump) expect(found(pgDumpOf(url), secrets)).toEqual(encrypted ? [] : Object.values(secrets));
    }
  });
});

describe("encryption at rest: a sidecar refuses to start on bad keys", () => {
  /** Runs the sidecar to its exit: the exit code and what it wrote to stderr. */
  async function run(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number | null; stderr: string }> {
    const child = spawn(process.execPath, [mainScript, "--port", "0", ...args], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let stderr = "";
    child.stderr!.on("data", (chunk) => (stderr += chunk));
    const [code] = (await once(child, "exit")) as [number | null];
    return { code, stderr };
  }

  it("exits with status 2 naming the file, the entry and what is wrong, and never prints a key", async () => {
    const dir = mkdtempSync(join(tmpdir(), "contextd-keys-"));
    const short = join(dir, "short");
    writeFileSync(short, `good:${Buffer.alloc(32, 1).toString("base64")}\nshort:${Buffer.alloc(16, 2).toString("base64")}\n`);
    const shortRun = await run(["--encryption-key-file", short]);
    expect(shortRun).toMatchObject({ code: 2 });
    expect(shortRun.stderr).toContain(`contextd: invalid key "short" in entry 2 of --encryption-key-file ${short}: want 32 bytes (AES-256)`);
    expect(shortRun.stderr).not.toContain(Buffer.alloc(32, 1).toString("base64"));

    const missing = await run(["--encryption-key-file", join(dir, "absent")]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain(`contextd: cannot read --encryption-key-file ${join(dir, "absent")}: ENOENT`);

    const empty = join(dir, "empty");
    writeFileSync(empty, "# nothing yet\n");
    expect(await run(["--encryption-key-file", empty])).toMatchObject({ code: 2, stderr: expect.stringContaining(`--encryption-key-file ${empty} lists no key`) });

    const fromEnvironment = await run([], { CONTEXTD_ENCRYPTION_KEYS: `a:${Buffer.alloc(32).toString("base64")},a:${Buffer.alloc(32).toString("base64")}` });
    expect(fromEnvironment).toMatchObject({ code: 2, stderr: expect.stringContaining(`key id "a" is listed twice in CONTEXTD_ENCRYPTION_KEYS`) });
  });

  it("with good keys starts, and says which key ids it has (never the keys)", async () => {
    const sidecar = await startSidecar([], { CONTEXTD_ENCRYPTION_KEYS: keys });
    try {
      const listening = sidecar.logs.map((line) => JSON.parse(line) as { msg?: string; config?: { encryptionKeys?: unknown } }).find((entry) => entry.msg === "contextd listening")!;
      expect(listening.config!.encryptionKeys).toEqual(["run-2", "run-1", "acme/acme-1"]);
      expect(sidecar.logs.join("\n")).not.toContain(Buffer.alloc(32, 7).toString("base64"));
    } finally {
      await sidecar.stop();
    }
  });
});
