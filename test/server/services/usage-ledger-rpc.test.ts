import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EstimatorKind } from "#gen/contextd/v1/compile_pb";
import { ContextService, type ReportUsageRequest } from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { Provider } from "#gen/contextd/v1/message_pb";
import { startRedis, type RedisProcess } from "../../support/redis.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";

// ReportUsage with a conversation, GetUsage and ListTenantUsage through real sidecars: what the
// ledger refuses before anything is stored, a retry answered as one, tenant scoping, and exact
// totals under 16 clients x 50 reports spread over two sidecars on one real Redis.

const adminToken = "usage-admin-token-000001";
const acmeToken = "usage-acme-token-0000001";

function clients(sidecar: Sidecar, token = "") {
  const bearer: Interceptor = (next) => (request) => {
    if (token !== "") request.header.set("authorization", `Bearer ${token}`);
    return next(request);
  };
  const transport = createGrpcTransport({ baseUrl: sidecar.url, interceptors: [bearer] });
  return { context: createClient(ContextService, transport), conversations: createClient(ConversationService, transport) };
}

let reportCounter = 0;
type ReportFields = Omit<ReportUsageRequest, "$typeName" | "$unknown">;

function usageReport(conversationId: string, overrides: Partial<ReportFields> = {}): ReportFields {
  const n = ++reportCounter;
  return {
    provider: Provider.ANTHROPIC_MESSAGES,
    model: "claude-sonnet-4",
    estimator: EstimatorKind.TOKENIZER,
    estimatedTokens: BigInt(900 + n),
    actualInputTokens: BigInt(1_000 + n),
    cachedInputTokens: BigInt(n),
    outputTokens: BigInt(50 + n),
    conversationId,
    turnId: `turn-${n}`,
    reportId: `response-${n}`,
    ...overrides,
  };
}

async function failure(call: Promise<unknown>): Promise<ConnectError> {
  const error = await call.then(
    () => undefined,
    (reason: unknown) => reason,
  );
  expect(error, "expected the RPC to fail").toBeInstanceOf(ConnectError);
  return error as ConnectError;
}

describe("usage ledger RPCs (a real sidecar, auth on, memory store)", () => {
  let sidecar: Sidecar;
  let admin: ReturnType<typeof clients>;
  let acme: ReturnType<typeof clients>;
  beforeAll(async () => {
    sidecar = await startSidecar(["--usage-entries-per-conversation", "2"], { CONTEXTD_AUTH_TOKENS: `${adminToken},${acmeToken}=acme` });
    admin = clients(sidecar, adminToken);
    acme = clients(sidecar, acmeToken);
  });
  afterAll(async () => {
    await sidecar?.stop();
  });

  it("records a report once per report id, answers the totals, and keeps the newest entries with the rest rolled up", async () => {
    const id = "acme/ledger-1";
    const first = usageReport(id);
    const recorded = await acme.context.reportUsage(first);
    expect(recorded.duplicate).toBe(false);
    expect(recorded.reports).toBeGreaterThan(0n);
    expect(recorded.conversationTotals).toMatchObject({ reports: 1n, inputTokens: first.actualInputTokens, outputTokens: first.outputTokens, cachedInputTokens: first.cachedInputTokens, compiledTokens: first.estimatedTokens });
    const retry = await acme.context.reportUsage(first);
    expect(retry.duplicate).toBe(true);
    expect(retry.correction).toBe(0);
    expect(retry.conversationTotals?.reports).toBe(1n);
    const more = [usageReport(id), usageReport(id)];
    for (const report of more) await acme.context.reportUsage(report);
    const ledger = await acme.conversations.getUsage({ conversationId: id });
    expect(ledger.totals?.reports).toBe(3n);
    expect(ledger.totals?.inputTokens).toBe([first, ...more].reduce((sum, report) => sum + report.actualInputTokens!, 0n));
    expect(ledger.entries.map((entry) => entry.reportId)).toEqual(more.map((report) => report.reportId));
    expect(ledger.entries[0]).toMatchObject({ turnId: more[0]!.turnId, provider: Provider.ANTHROPIC_MESSAGES, model: "claude-sonnet-4", outputTokens: more[0]!.outputTokens });
    expect(ledger.entriesRolledUp).toBe(1n);
  });

  it("refuses a report it cannot record whole, naming the field and the limit, and records nothing", async () => {
    const id = "acme/ledger-refusals";
    const refusals: [Partial<ReportFields>, string][] = [
      [{ reportId: "" }, "report_usage.report_id is required with conversation_id"],
      [{ cachedInputTokens: 5_000n }, "report_usage.cached_input_tokens (5000) must be at most actual_input_tokens"],
      [{ outputTokens: -1n }, "report_usage.output_tokens must be from 0 to 9007199254740991, got -1"],
      [{ reportId: "r".repeat(1_025) }, "1024"],
      [{ turnId: "t".repeat(1_025) }, "1024"],
    ];
    for (const [overrides, message] of refusals) {
      const error = await failure(acme.context.reportUsage(usageReport(id, overrides)));
      expect(error.code).toBe(Code.InvalidArgument);
      expect(error.rawMessage).toContain(message);
    }
    const recorded = usageReport(id);
    await acme.context.reportUsage(recorded);
    const reused = await failure(acme.context.reportUsage({ ...recorded, outputTokens: recorded.outputTokens! + 1n }));
    expect(reused.code).toBe(Code.InvalidArgument);
    expect(reused.rawMessage).toContain(`report_usage.report_id "${recorded.reportId}" of conversation "${id}" was already recorded with other values`);
    const ledger = await acme.conversations.getUsage({ conversationId: id });
    expect(ledger.totals?.reports).toBe(1n);
    expect((await failure(acme.conversations.getUsage({ conversationId: "" }))).code).toBe(Code.InvalidArgument);
  });

  it("scopes the ledger to the token's tenant: its conversations, its totals, and only an unscoped token names another tenant", async () => {
    const outside = await failure(acme.context.reportUsage(usageReport("globex/chat")));
    expect(outside.code).toBe(Code.PermissionDenied);
    expect((await failure(acme.conversations.getUsage({ conversationId: "globex/chat" }))).code).toBe(Code.PermissionDenied);
    const denied = await failure(acme.conversations.listTenantUsage({ tenant: "globex" }));
    expect(denied.code).toBe(Code.PermissionDenied);
    expect(denied.rawMessage).toContain('list_tenant_usage.tenant "globex" is outside tenant "acme"');
    const own = await acme.conversations.listTenantUsage({ pageSize: 1 });
    expect(own.tenant).toBe("acme");
    const named = await admin.conversations.listTenantUsage({ tenant: "acme", pageSize: 1 });
    expect(named.totals).toEqual(own.totals);
    // Pages of one conversation add up to the tenant's totals.
    let reports = 0n;
    let pageToken = "";
    do {
      const page = await admin.conversations.listTenantUsage({ tenant: "acme", pageSize: 1, pageToken });
      expect(page.conversations.length).toBeLessThanOrEqual(1);
      reports += page.conversations.reduce((sum, entry) => sum + entry.totals!.reports, 0n);
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
    expect(reports).toBe(own.totals!.reports);
    expect((await failure(admin.conversations.listTenantUsage({ pageSize: 1_001 }))).rawMessage).toContain("list_tenant_usage.page_size must be from 0 to 1000, got 1001");
  });
});

describe("a sidecar without a usage ledger (--usage-entries-per-conversation 0)", () => {
  let sidecar: Sidecar;
  beforeAll(async () => {
    sidecar = await startSidecar(["--usage-entries-per-conversation", "0"]);
  }, 30_000);
  afterAll(async () => {
    await sidecar?.stop();
  });

  it("refuses the ledger's three calls FAILED_PRECONDITION naming the flag, and still learns a report without a conversation", async () => {
    const { context, conversations } = clients(sidecar);
    for (const [call, method] of [
      [context.reportUsage(usageReport("acme/off")), "report_usage.conversation_id"],
      [conversations.getUsage({ conversationId: "acme/off" }), "get_usage"],
      [conversations.listTenantUsage({ tenant: "acme" }), "list_tenant_usage"],
    ] as const) {
      const error = await failure(call);
      expect(error.code).toBe(Code.FailedPrecondition);
      expect(error.rawMessage).toBe(`${method}: this sidecar keeps no usage ledger (--usage-entries-per-conversation 0)`);
    }
    const { conversationId: _, turnId: __, reportId: ___, ...calibrationOnly } = usageReport("");
    await expect(context.reportUsage(calibrationOnly)).resolves.toBeDefined();
  });
});

describe("usage ledger under concurrent reports (two sidecars on one real Redis)", () => {
  let redis: RedisProcess;
  let sidecars: Sidecar[];
  beforeAll(async () => {
    redis = await startRedis();
    sidecars = await Promise.all([startSidecar(["--redis-url", redis.url]), startSidecar(["--redis-url", redis.url])]);
  }, 30_000);
  afterAll(async () => {
    await Promise.all((sidecars ?? []).map((sidecar) => sidecar.stop()));
    await redis?.stop();
  });

  it("keeps totals equal to the sum of 16 clients x 50 reports, each also retried through the other sidecar", { timeout: 120_000 }, async () => {
    const conversations = ["team/a", "team/b", "team/c", "team/d"];
    const expected = new Map(conversations.map((id) => [id, { reports: 0n, input: 0n, output: 0n, cached: 0n, compiled: 0n }]));
    const runs = Array.from({ length: 16 }, (_, client) => {
      const mine: Client<typeof ContextService> = clients(sidecars[client % 2]!).context;
      const other: Client<typeof ContextService> = clients(sidecars[(client + 1) % 2]!).context;
      return (async () => {
        for (let n = 0; n < 50; n++) {
          const id = conversations[(client * 7 + n) % conversations.length]!;
          const report = usageReport(id, { reportId: `client-${client}-${n}`, actualInputTokens: BigInt(2_000 + client * 100 + n), outputTokens: BigInt(client + n), cachedInputTokens: BigInt(n), estimatedTokens: BigInt(1_500 + n) });
          const sums = expected.get(id)!;
          sums.reports += 1n;
          sums.input += report.actualInputTokens!;
          sums.output += report.outputTokens!;
          sums.cached += report.cachedInputTokens!;
          sums.compiled += report.estimatedTokens!;
          const answers = await Promise.all([mine.reportUsage(report), other.reportUsage(report)]);
          expect(answers.filter((answer) => answer.duplicate)).toHaveLength(1);
        }
      })();
    });
    await Promise.all(runs);
    const reader = clients(sidecars[0]!).conversations;
    let tenantReports = 0n;
    let tenantInput = 0n;
    for (const [id, sums] of expected) {
      const { totals } = await reader.getUsage({ conversationId: id });
      expect(totals).toMatchObject({ reports: sums.reports, inputTokens: sums.input, outputTokens: sums.output, cachedInputTokens: sums.cached, compiledTokens: sums.compiled });
      tenantReports += sums.reports;
      tenantInput += sums.input;
    }
    expect(tenantReports).toBe(800n);
    const tenant = await reader.listTenantUsage({ tenant: "team" });
    expect(tenant.totals).toMatchObject({ reports: 800n, inputTokens: tenantInput });
    expect(tenant.conversations.map((entry) => entry.conversationId)).toEqual(conversations);
  });
});
