import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { freePort } from "./redis.js";

/** A real PostgreSQL server (a throwaway cluster made by initdb) on a free loopback port. */
export interface PostgresProcess {
  port: number;
  /** URL of the cluster's `postgres` database. */
  url: string;
  /** The postmaster's process id (its backends are its children). */
  pid(): number;
  /** A new empty database; its URL. */
  createDatabase(name: string): Promise<string>;
  /** Fast shutdown (SIGINT: sessions are ended, a checkpoint is written), then waits for exit. */
  stop(): Promise<void>;
  /** Immediate shutdown (SIGQUIT: no checkpoint, crash recovery at the next start), as near to a kill as a server with shared memory allows. */
  kill(): Promise<void>;
  /** Starts it again on the same port and data directory (for outage tests). */
  restart(): Promise<void>;
  /** Stops it and deletes its data directory. */
  destroy(): Promise<void>;
}

/**
 * The directory holding initdb and postgres: `CONTEXTD_POSTGRES_BIN` if set, else the newest
 * /usr/lib/postgresql/N/bin (Debian's `postgresql` package), else whatever `pg_config --bindir` says.
 */
export function postgresBinDir(): string {
  const configured = process.env.CONTEXTD_POSTGRES_BIN;
  if (configured) return configured;
  const root = "/usr/lib/postgresql";
  if (existsSync(root)) {
    const versions = readdirSync(root)
      .filter((name) => existsSync(join(root, name, "bin", "initdb")))
      .sort((a, b) => Number(b) - Number(a));
    if (versions.length > 0) return join(root, versions[0]!, "bin");
  }
  return execFileSync("pg_config", ["--bindir"], { encoding: "utf8" }).trim();
}

/**
 * initdb and postgres refuse to run as root. As root (CI, this machine) the server runs as the
 * `postgres` user that Debian's package creates; as anyone else, as that user.
 */
function serverUser(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const uid = Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" }).trim());
  const gid = Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }).trim());
  return { uid, gid };
}

export interface PostgresOptions {
  /** More server settings, as `-c name=value` pairs. */
  settings?: Record<string, string>;
}

/**
 * Makes a cluster in a temporary directory and starts it on a free port, listening on 127.0.0.1
 * and on a Unix socket inside the data directory (no system service, no /var/run). `fsync=off`
 * keeps the suites fast; `synchronous_commit` stays on, so an acknowledged commit is in the WAL
 * the kernel holds and survives `stop`, `kill` and `restart` (not a machine crash).
 */
export async function startPostgres(options: PostgresOptions = {}): Promise<PostgresProcess> {
  const bin = postgresBinDir();
  const user = serverUser();
  let port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "contextd-postgres-"));
  if (user) chownSync(dir, user.uid, user.gid);
  chmodSync(dir, 0o700);
  const data = join(dir, "data");
  const asServerUser = user ? { uid: user.uid, gid: user.gid } : {};
  execFileSync(join(bin, "initdb"), ["-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"], {
    ...asServerUser,
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, LC_ALL: "C" },
  });
  const settings = { listen_addresses: "127.0.0.1", unix_socket_directories: dir, fsync: "off", full_page_writes: "off", max_connections: "200", ...options.settings };
  let child: ChildProcess | undefined;
  const launch = async () => {
    const args = ["-D", data, "-p", String(port), ...Object.entries(settings).flatMap(([name, value]) => ["-c", `${name}=${value}`])];
    child = spawn(join(bin, "postgres"), args, { ...asServerUser, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, LC_ALL: "C" } });
    let output = "";
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`postgres did not start: ${output}`)), 30_000);
      child!.once("exit", (code) => reject(new Error(`postgres exited with ${code}: ${output}`)));
      const collect = (chunk: Buffer) => {
        output += chunk;
        if (output.includes("database system is ready to accept connections")) {
          clearTimeout(timer);
          resolve();
        }
      };
      child!.stdout!.on("data", collect);
      child!.stderr!.on("data", collect);
    });
  };
  const end = async (signal: NodeJS.Signals) => {
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, "exit");
    child.kill(signal);
    await exited;
  };
  // The port was free when picked; another process may have taken it since (initdb takes a while).
  for (let attempt = 1; ; attempt++) {
    try {
      await launch();
      break;
    } catch (error) {
      if (attempt >= 5 || !String(error).includes("Address already in use")) throw error;
      port = await freePort();
    }
  }
  // A restart needs the same port (clients hold its URL): wait for it to be free again.
  const relaunch = async () => {
    for (let attempt = 1; ; attempt++) {
      try {
        return await launch();
      } catch (error) {
        if (attempt >= 50 || !String(error).includes("Address already in use")) throw error;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
  };
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  return {
    port,
    url,
    pid: () => child!.pid!,
    async createDatabase(name: string) {
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      try {
        await client.query(`CREATE DATABASE "${name.replaceAll('"', '""')}"`);
      } finally {
        await client.end();
      }
      return `postgres://postgres@127.0.0.1:${port}/${encodeURIComponent(name)}`;
    },
    stop: () => end("SIGINT"),
    kill: () => end("SIGQUIT"),
    restart: relaunch,
    async destroy() {
      await end("SIGINT");
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
