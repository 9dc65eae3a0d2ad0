import { Code, ConnectError } from "@connectrpc/connect";
import pg from "pg";
import { migratePostgres } from "./postgres-schema.js";
import { redactUrl } from "./store-errors.js";

/**
 * The Postgres store's connection: the pool, the schema migrated before the first statement, and
 * how failures become gRPC errors. Apart from the store because its commits, its reads and its
 * change feed all query through it alike.
 */

/**
 * Connection settings that make an outage an immediate UNAVAILABLE instead of a hang: a bounded
 * connect time, a server-side statement timeout, TCP keep-alive. The pool opens new connections
 * as it needs them, so the store recovers by itself once Postgres is back.
 */
export const connectTimeoutMs = 2_000;
const statementTimeoutMs = 30_000;

export class PostgresConnection {
  readonly pool: pg.Pool;
  /** The last connection error any of the store's connections reported, for messages. */
  lastError = "";
  /** Until the schema is migrated: the migration in progress (reset when it fails, so the next call tries again). */
  private schema: Promise<void> | undefined;

  constructor(
    readonly url: string,
    poolSize: number,
  ) {
    this.pool = new pg.Pool({
      connectionString: url,
      max: poolSize,
      connectionTimeoutMillis: connectTimeoutMs,
      idleTimeoutMillis: 30_000,
      keepAlive: true,
      statement_timeout: statementTimeoutMs,
    });
    // An idle connection that dies (Postgres restarted) is reported here; the pool drops it.
    this.pool.on("error", (error: Error) => (this.lastError = error.message));
  }

  /** Migrates the schema once per store (again after a failure). */
  ready(): Promise<void> {
    this.schema ??= (async () => {
      const client = await this.pool.connect();
      try {
        await migratePostgres(client);
        client.release();
      } catch (error) {
        client.release(error as Error);
        // A connection that failed stays what it is (UNAVAILABLE); anything else the migration
        // met (no right to create tables, a newer schema) is reported as the schema's problem.
        if (error instanceof pg.DatabaseError && isConnectionFailure(error.code)) throw error;
        throw new Error(`creating or migrating the contextd schema failed: ${(error as Error).message}`);
      }
    })().catch((error: unknown) => {
      this.schema = undefined;
      throw error;
    });
    return this.schema;
  }

  async query<Row extends pg.QueryResultRow>(what: string, text: string, values: unknown[], name?: string): Promise<pg.QueryResult<Row>> {
    try {
      await this.ready();
      return await this.pool.query<Row>({ text, values, name });
    } catch (error) {
      throw this.failure(what, error);
    }
  }

  /** RESOURCE_EXHAUSTED for a full disk or memory, UNAVAILABLE for a connection that failed, INTERNAL for the rest. */
  failure(what: string, error: unknown): ConnectError {
    if (error instanceof ConnectError) return error;
    const detail = error instanceof Error ? error.message : String(error);
    if (error instanceof pg.DatabaseError && error.code !== undefined) {
      const sqlState = error.code;
      if (sqlState === "53100" || sqlState === "53200") {
        return new ConnectError(`postgres store is full while ${what} (${sqlState}: ${detail}); free space or memory, then retry`, Code.ResourceExhausted);
      }
      if (!isConnectionFailure(sqlState)) {
        return new ConnectError(`postgres store failed while ${what} (${sqlState}): ${detail}`, Code.Internal);
      }
    }
    const cause = this.lastError !== "" && this.lastError !== detail ? ` (last connection error: ${this.lastError})` : "";
    return new ConnectError(`postgres store unavailable while ${what} at ${redactUrl(this.url, "postgres")}: ${detail}${cause}`, Code.Unavailable);
  }
}

/** SQLSTATEs answered UNAVAILABLE: connection exceptions, shutdowns, too many connections, a read-only transaction, a cancelled statement. */
export function isConnectionFailure(sqlState: string | undefined): boolean {
  return sqlState !== undefined && /^(08|57P|53300|25006|57014)/.test(sqlState);
}
