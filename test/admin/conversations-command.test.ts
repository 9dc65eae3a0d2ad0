import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EstimatorKind } from "#gen/contextd/v1/compile_pb";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { Provider, Role } from "#gen/contextd/v1/message_pb";
import { subcommands } from "../../src/admin/conversations-command.js";
import { appendHistory, delta, textMessage } from "../store/fixtures.js";
import { startSidecar, type Sidecar } from "../support/sidecar.js";

// `contextd conversations ...` as an operator runs it: the built bin against a real sidecar with
// auth on, its JSON output parsed and checked against what was written through the RPCs.

const main = fileURLToPath(new URL("../../dist/src/main.js", import.meta.url));
const adminToken = "admin-command-token-00001";
const acmeToken = "admin-command-acme-000001";
const run = promisify(execFile);

/** Runs the command; resolves with its exit code and output whatever the code. */
async function command(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [main, "conversations", ...args], { env: { ...process.env, CONTEXTD_ADDRESS: "", CONTEXTD_TOKEN: "", ...env } });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code: number; stdout: string; stderr: string };
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr };
  }
}

describe("contextd conversations (the built bin against a real sidecar, auth on)", () => {
  let sidecar: Sidecar;
  let address: string[];
  beforeAll(async () => {
    sidecar = await startSidecar([], { CONTEXTD_AUTH_TOKENS: `${adminToken},${acmeToken}=acme` });
    address = ["--address", `127.0.0.1:${sidecar.port}`];
    const bearer: Interceptor = (next) => (request) => {
      request.header.set("authorization", `Bearer ${adminToken}`);
      return next(request);
    };
    const transport = createGrpcTransport({ baseUrl: sidecar.url, interceptors: [bearer] });
    const conversations = createClient(ConversationService, transport);
    const context = createClient(ContextService, transport);
    const seed = async (id: string, title: string, labels: Record<string, string>, messages: number) => {
      await conversations.commit({
        conversationId: id,
        deltas: [appendHistory(...Array.from({ length: messages }, (_, n) => textMessage(`${id}-m${n}`, n % 2 ? Role.ASSISTANT : Role.USER, `message ${n}`))), delta({ case: "setMetadata", value: { title, labels } })],
      });
    };
    await seed("acme/refund", "Refund for order A-17", { team: "billing", tier: "gold" }, 3);
    await seed("acme/shipping", "Where is my parcel", { team: "support" }, 2);
    await seed("globex/intro", "Hello", { team: "billing" }, 1);
    for (const [n, [reportId, input, output, cached]] of [["resp-1", 1_200n, 80n, 1_000n], ["resp-2", 1_500n, 120n, 1_100n]].entries()) {
      await context.reportUsage({ conversationId: "acme/refund", turnId: `turn-${n + 1}`, reportId: reportId as string, provider: Provider.OPENAI_RESPONSES, model: "gpt-5", estimator: EstimatorKind.TOKENIZER, estimatedTokens: (input as bigint) - 10n, actualInputTokens: input as bigint, outputTokens: output as bigint, cachedInputTokens: cached as bigint });
    }
    await context.reportUsage({ conversationId: "acme/shipping", reportId: "resp-3", provider: Provider.GEMINI, model: "gemini-2.5-pro", estimator: EstimatorKind.CHAR_FALLBACK, estimatedTokens: 300n, actualInputTokens: 310n, outputTokens: 40n });
  }, 30_000);
  afterAll(async () => {
    await sidecar?.stop();
  });

  it("list: filters by label and prefix, orders by id or newest update, as JSON and as a table", async () => {
    const byLabel = await command(["list", "--label", "team=billing", "--json", ...address, "--token", adminToken]);
    expect(byLabel.code).toBe(0);
    expect((JSON.parse(byLabel.stdout) as { conversations: { conversationId: string }[] }).conversations.map((entry) => entry.conversationId)).toEqual(["acme/refund", "globex/intro"]);
    const newest = await command(["list", "--order", "updated", "--json", ...address], { CONTEXTD_TOKEN: adminToken });
    const listed = (JSON.parse(newest.stdout) as { conversations: { conversationId: string; updatedAtUnixMs: string; title: string; labels: Record<string, string> }[] }).conversations;
    expect(listed.map((entry) => entry.conversationId)).toEqual(["globex/intro", "acme/shipping", "acme/refund"]);
    expect(listed[2]).toMatchObject({ title: "Refund for order A-17", labels: { team: "billing", tier: "gold" } });
    const since = await command(["list", "--updated-since", listed[1]!.updatedAtUnixMs, "--json", ...address, "--token", adminToken]);
    expect((JSON.parse(since.stdout) as { conversations: { conversationId: string }[] }).conversations.map((entry) => entry.conversationId).sort()).toEqual(["acme/shipping", "globex/intro"]);
    // A tenant's token lists its own conversations only; the table names each.
    const scoped = await command(["list", ...address, "--token", acmeToken]);
    expect(scoped.code).toBe(0);
    const lines = scoped.stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(/^CONVERSATION\s+VERSION\s+UPDATED\s+TITLE\s+LABELS$/);
    expect(lines.slice(1).map((line) => line.split(/\s+/)[0])).toEqual(["acme/refund", "acme/shipping"]);
    expect(lines[1]).toContain("team=billing,tier=gold");
    const limited = await command(["list", "--limit", "1", "--json", ...address, "--token", adminToken]);
    expect(JSON.parse(limited.stdout)).toMatchObject({ conversations: [{ conversationId: "acme/refund" }], more: true });
  });

  it("show: version, title, labels, message counts and usage totals of one conversation", async () => {
    const shown = await command(["show", "acme/refund", "--json", ...address, "--token", acmeToken]);
    expect(shown.code).toBe(0);
    const value = JSON.parse(shown.stdout) as Record<string, unknown>;
    expect(value).toMatchObject({
      conversationId: "acme/refund",
      version: "1",
      title: "Refund for order A-17",
      labels: { team: "billing", tier: "gold" },
      messages: { system: "0", history: "3", memory: "0", tools: "0" },
      usage: { reports: "2", inputTokens: "2700", outputTokens: "200", cachedInputTokens: "2100", compiledTokens: "2680" },
    });
    expect(Number(value.updatedAtUnixMs)).toBeGreaterThan(0);
    const table = await command(["show", "acme/refund", ...address, "--token", acmeToken]);
    expect(table.stdout).toMatch(/^messages\s+system 0, history 3, memory 0, tools 0$/m);
    expect(table.stdout).toMatch(/^input tokens\s+2700$/m);
  });

  it("usage: a conversation's entries and totals, a tenant's totals and conversations", async () => {
    const conversation = JSON.parse((await command(["usage", "acme/refund", "--json", ...address, "--token", acmeToken])).stdout) as {
      totals: Record<string, string>;
      entries: { reportId: string; turnId: string; provider: string; model: string; inputTokens: string }[];
      entriesRolledUp: string;
    };
    expect(conversation.totals).toMatchObject({ reports: "2", inputTokens: "2700" });
    expect(conversation.entries.map((entry) => [entry.reportId, entry.turnId, entry.provider, entry.model, entry.inputTokens])).toEqual([
      ["resp-1", "turn-1", "PROVIDER_OPENAI_RESPONSES", "gpt-5", "1200"],
      ["resp-2", "turn-2", "PROVIDER_OPENAI_RESPONSES", "gpt-5", "1500"],
    ]);
    expect(conversation.entriesRolledUp).toBe("0");
    const tenant = JSON.parse((await command(["usage", "--tenant", "acme", "--json", ...address, "--token", adminToken])).stdout) as {
      tenant: string;
      totals: Record<string, string>;
      conversations: { conversationId: string; totals: Record<string, string> }[];
      more: boolean;
    };
    expect(tenant).toMatchObject({ tenant: "acme", totals: { reports: "3", inputTokens: "3010", outputTokens: "240" }, more: false });
    expect(tenant.conversations.map((entry) => [entry.conversationId, entry.totals.reports])).toEqual([["acme/refund", "2"], ["acme/shipping", "1"]]);
    // The tenant's own token lists the same without naming it; the table shows each conversation.
    const table = await command(["usage", ...address, "--token", acmeToken]);
    expect(table.stdout).toMatch(/^tenant\s+acme$/m);
    expect(table.stdout).toMatch(/^acme\/shipping\s+1\s+310\s+0\s+40\s+300\s/m);
    const entries = await command(["usage", "acme/refund", ...address, "--token", acmeToken]);
    expect(entries.stdout).toMatch(/turn-2\s+openai_responses\s+gpt-5\s+1500\s+1100\s+120\s+1490\s+resp-2$/m);
  });

  it("answers the sidecar's refusals with their gRPC code (exit 1) and usage mistakes with the help (exit 2)", async () => {
    const denied = await command(["usage", "--tenant", "globex", ...address, "--token", acmeToken]);
    expect(denied.code).toBe(1);
    expect(denied.stderr).toContain('contextd conversations usage: PERMISSION_DENIED: list_tenant_usage.tenant "globex" is outside tenant "acme"');
    const unauthenticated = await command(["list", ...address]);
    expect(unauthenticated.code).toBe(1);
    expect(unauthenticated.stderr).toContain("UNAUTHENTICATED");
    const unknownOption = await command(["list", "--colour", ...address]);
    expect(unknownOption.code).toBe(2);
    expect(unknownOption.stderr).toContain("--colour");
    expect(unknownOption.stderr).toContain("contextd conversations list");
    const badOrder = await command(["list", "--order", "newest", ...address]);
    expect(badOrder.code).toBe(2);
    expect(badOrder.stderr).toContain("--order newest: expected id or updated");
    const missing = await command(["show", ...address]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain("show takes <conversation-id>, got 0");
    const unknown = await command(["rename", "acme/refund"]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain(`unknown command "rename"; one of ${subcommands.map((entry) => entry.name).join(", ")}`);
    const help = await command(["--help"]);
    expect(help.code).toBe(0);
    for (const entry of subcommands) expect(help.stdout).toContain(`contextd conversations ${entry.name}`);
  });

  it("fork, export and delete: a copy made, every state of a prefix as JSON Lines, one and a prefix deleted", async () => {
    const forked = await command(["fork", "acme/refund", "acme/refund-retry", "--json", ...address, "--token", acmeToken]);
    expect(forked.code).toBe(0);
    expect(JSON.parse(forked.stdout)).toMatchObject({ version: "1", forkedFrom: { conversationId: "acme/refund", version: "1" } });
    const again = await command(["fork", "acme/refund", "acme/refund-retry", ...address, "--token", acmeToken]);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain("ALREADY_EXISTS");
    const shown = JSON.parse((await command(["show", "acme/refund-retry", "--json", ...address, "--token", acmeToken])).stdout) as Record<string, unknown>;
    expect(shown).toMatchObject({ version: "1", title: "Refund for order A-17", messages: { history: "3" } });

    const exported = await command(["export", "--prefix", "acme/", ...address, "--token", acmeToken]);
    expect(exported.code).toBe(0);
    const lines = exported.stdout.trimEnd().split("\n").map((line) => JSON.parse(line) as { state: { conversationId: string; history?: { id: string }[]; forkedFrom?: { conversationId: string } }; resumeToken: string });
    expect(lines.map((line) => line.state.conversationId)).toEqual(["acme/refund", "acme/refund-retry", "acme/shipping"]);
    expect(lines[1]!.state.history!.map((message) => message.id)).toEqual(["acme/refund-m0", "acme/refund-m1", "acme/refund-m2"]);
    expect(lines[1]!.state.forkedFrom?.conversationId).toBe("acme/refund");
    // An export cut short goes on after the last line it printed.
    const resumed = await command(["export", "--prefix", "acme/", "--resume-token", lines[0]!.resumeToken, ...address, "--token", acmeToken]);
    expect(resumed.stdout.trimEnd().split("\n").map((line) => (JSON.parse(line) as { state: { conversationId: string } }).state.conversationId)).toEqual(["acme/refund-retry", "acme/shipping"]);

    const stale = await command(["delete", "acme/refund-retry", "--expected-version", "7", ...address, "--token", acmeToken]);
    expect(stale.code).toBe(1);
    expect(stale.stderr).toContain("ABORTED");
    const deleted = await command(["delete", "acme/refund-retry", "--expected-version", "1", "--json", ...address, "--token", acmeToken]);
    expect(JSON.parse(deleted.stdout)).toEqual({ conversationId: "acme/refund-retry", deletedVersion: "1" });
    const unconfirmed = await command(["delete", "--prefix", "globex/", ...address, "--token", adminToken]);
    expect(unconfirmed.code).toBe(2);
    expect(unconfirmed.stderr).toContain("add --yes");
    const outside = await command(["delete", "--prefix", "globex/", "--yes", ...address, "--token", acmeToken]);
    expect(outside.code).toBe(1);
    expect(outside.stderr).toContain("PERMISSION_DENIED");
    const tenantDeleted = await command(["delete", "--prefix", "globex/", "--yes", "--json", ...address, "--token", adminToken]);
    expect(JSON.parse(tenantDeleted.stdout)).toEqual({ prefix: "globex/", deleted: 1 });
    const left = JSON.parse((await command(["list", "--json", ...address, "--token", adminToken])).stdout) as { conversations: { conversationId: string }[] };
    expect(left.conversations.map((entry) => entry.conversationId)).toEqual(["acme/refund", "acme/shipping"]);
  });
});
