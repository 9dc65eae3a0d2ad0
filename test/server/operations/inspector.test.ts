import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { chromium, type BrowserContext, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CompileResultPart, EstimatorKind, TransformationAction } from "../../../gen/ts/contextd/v1/compile_pb.js";
import { ContextService } from "../../../gen/ts/contextd/v1/context_service_pb.js";
import { ConversationService } from "../../../gen/ts/contextd/v1/conversation_service_pb.js";
import { MessageSchema, Provider, Role } from "../../../gen/ts/contextd/v1/message_pb.js";
import { Segment } from "../../../gen/ts/contextd/v1/state_pb.js";
import { appendHistory, delta, textMessage } from "../../store/fixtures.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";
import { InspectorAssets } from "../../../src/server/operations/inspector-route.js";

// The web inspector in a real headless Chromium (Debian's chromium, driven by playwright-core)
// against a real sidecar with authentication on and a seeded conversation. Screenshots go to
// .test-results/.

const chromiumPath = "/usr/bin/chromium";
const results = join(process.cwd(), ".test-results");
const adminToken = "inspector-admin-token-0001";
const acmeToken = "inspector-acme-token-00001";
const conversationId = "acme/support-42";

function toolCallMessage(id: string, callId: string) {
  return create(MessageSchema, {
    id,
    role: Role.ASSISTANT,
    parts: [{ kind: { case: "toolCall", value: { id: callId, name: "lookup_order", arguments: { data: '{"order":"A-17"}' } } } }],
  });
}

function toolResultMessage(id: string, callId: string) {
  return create(MessageSchema, {
    id,
    role: Role.TOOL,
    parts: [{ kind: { case: "toolResult", value: { toolCallId: callId, name: "lookup_order", payload: { text: "order A-17 shipped on Monday" } } } }],
  });
}

describe("web inspector in headless Chromium (real sidecar, auth on)", () => {
  let sidecar: Sidecar;
  let browser: BrowserContext;
  let userDataDir: string;
  let admin: { conversations: ReturnType<typeof createClient<typeof ConversationService>>; contexts: ReturnType<typeof createClient<typeof ContextService>> };
  const consoleErrors: string[] = [];

  beforeAll(async () => {
    mkdirSync(results, { recursive: true });
    sidecar = await startSidecar([], { CONTEXTD_AUTH_TOKENS: `${adminToken},${acmeToken}=acme` });
    const bearer: Interceptor = (next) => (request) => {
      request.header.set("authorization", `Bearer ${adminToken}`);
      return next(request);
    };
    const transport = createConnectTransport({ baseUrl: sidecar.url, httpVersion: "1.1", interceptors: [bearer] });
    admin = { conversations: createClient(ConversationService, transport), contexts: createClient(ContextService, transport) };
    // v1: system and the first exchange; v2: a summary of it, remembering a fact (an experience);
    // v3: a tool round and the next question; another tenant's conversation the acme token must not see.
    await admin.conversations.commit({
      conversationId,
      expectedVersion: 0n,
      deltas: [
        delta({ case: "appendMessages", value: { segment: Segment.SYSTEM, messages: [textMessage("sys", Role.SYSTEM, "You are the support agent of a shop.")] } }),
        appendHistory(textMessage("u1", Role.USER, "Hello, I ordered a teapot last week. ".repeat(6)), textMessage("a1", Role.ASSISTANT, "Happy to help: what is the order number? ".repeat(6))),
      ],
    });
    await admin.conversations.commit({
      conversationId,
      expectedVersion: 1n,
      deltas: [delta({ case: "compact", value: { summary: textMessage("sum1", Role.ASSISTANT, "The user asks about a teapot order."), throughMessageId: "a1", remember: ["the user prefers e-mail"] } })],
    });
    await admin.conversations.commit({
      conversationId,
      expectedVersion: 2n,
      deltas: [appendHistory(textMessage("u2", Role.USER, "It is order A-17."), toolCallMessage("a2", "call-1"), toolResultMessage("t1", "call-1"), textMessage("a3", Role.ASSISTANT, "Your order A-17 shipped on Monday."))],
    });
    await admin.conversations.commit({ conversationId: "globex/secret", expectedVersion: 0n, deltas: [appendHistory(textMessage("g1", Role.USER, "not for acme"))] });

    userDataDir = mkdtempSync(join(tmpdir(), "contextd-chromium-"));
    browser = await chromium.launchPersistentContext(userDataDir, {
      executablePath: chromiumPath,
      headless: true,
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
      viewport: { width: 1280, height: 860 },
    });
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await sidecar?.stop();
    if (userDataDir) rmSync(userDataDir, { recursive: true, force: true });
  });

  const openPage = async (path: string, expectedFailures: RegExp[] = []): Promise<Page> => {
    const page = await browser.newPage();
    page.on("console", (message) => {
      if (message.type() === "error" && !expectedFailures.some((pattern) => pattern.test(message.text()))) consoleErrors.push(message.text());
    });
    page.on("pageerror", (error) => consoleErrors.push(String(error)));
    await page.goto(`${sidecar.url}${path}`);
    return page;
  };
  // The token lives in the tab's sessionStorage: a new tab asks for it again.
  const openWithToken = async (path: string): Promise<Page> => {
    const page = await openPage(path, [/status of 401/]);
    await page.getByTestId("token").fill(acmeToken);
    await page.getByRole("button", { name: "use token" }).click();
    return page;
  };

  it("refuses without a token: the page loads, the RPC behind the list says unauthenticated", async () => {
    // The browser logs the refused request itself (status 401); that is the refusal under test.
    const page = await openPage("/inspector/", [/status of 401/]);
    await expect.poll(() => page.getByTestId("error").textContent(), { timeout: 10_000 }).toContain("unauthenticated");
    expect(await page.getByTestId("conversations").count()).toBe(0);
    await page.screenshot({ path: join(results, "inspector-refused.png") });
    await page.close();
  });

  it("lists a tenant's conversations with its token, and refuses to list beyond the tenant", async () => {
    const page = await openPage("/inspector/", [/status of 40[13]/]);
    await page.getByTestId("token").fill(acmeToken);
    await page.getByRole("button", { name: "use token" }).click();
    await expect.poll(() => page.getByTestId("error").textContent(), { timeout: 10_000 }).toContain('outside tenant "acme"');
    await page.getByTestId("prefix").fill("acme/");
    await page.getByRole("button", { name: "list" }).click();
    const table = page.getByTestId("conversations");
    await expect.poll(() => table.textContent(), { timeout: 10_000 }).toContain(conversationId);
    expect(await table.textContent()).not.toContain("globex");
    expect(await table.locator("tr", { hasText: conversationId }).locator("td.number").textContent()).toBe("3");
    await page.screenshot({ path: join(results, "inspector-list.png") });
    await page.close();
  });

  it("shows a conversation's messages with the tool round grouped, the summary and the experience marked, and its versions; updates live when a commit lands", async () => {
    const page = await openWithToken(`/inspector/#/c/${encodeURIComponent(conversationId)}`);
    await expect.poll(() => page.getByTestId("version").textContent(), { timeout: 10_000 }).toBe("v3");
    await page.getByTestId("live").waitFor();
    const messages = page.getByTestId("messages");
    // The summary replaced u1 and a1.
    expect(await messages.getByTestId("message").evaluateAll((rows) => rows.map((row) => row.getAttribute("data-id")))).toEqual(["sys", "sum1", "u2", "a2", "t1", "a3"]);
    expect(await messages.locator('[data-id="sum1"]').getByTestId("summary").count()).toBe(1);
    const round = messages.getByTestId("tool-round");
    expect(await round.count()).toBe(1);
    expect(await round.textContent()).toContain("lookup_order");
    expect(await round.textContent()).toContain("order A-17 shipped on Monday");
    expect(await messages.getByTestId("experience").textContent()).toContain("the user prefers e-mail");
    const timeline = page.getByTestId("timeline");
    expect(await timeline.locator("li").evaluateAll((rows) => rows.map((row) => row.getAttribute("data-version")))).toEqual(["3", "2", "1"]);
    expect(await timeline.locator('li[data-version="2"]').textContent()).toContain("compact");

    await admin.conversations.commit({ conversationId, expectedVersion: 3n, deltas: [appendHistory(textMessage("u3", Role.USER, "Can you send the tracking link?"))] });
    await expect.poll(() => page.getByTestId("version").textContent(), { timeout: 10_000 }).toBe("v4");
    await expect.poll(() => messages.locator('[data-id="u3"]').textContent(), { timeout: 10_000 }).toContain("tracking link");
    expect(await timeline.locator("li").first().getAttribute("data-version")).toBe("4");
    await page.screenshot({ path: join(results, "inspector-conversation.png"), fullPage: true });
    await page.close();
  });

  it("shows only the conversation it is on: going from X to Y lists Y's versions and keys, not X's (issue 29 #12)", async () => {
    const x = "acme/nav-x";
    const y = "acme/nav-y";
    for (let version = 1; version <= 3; version++) {
      await admin.conversations.commit({ conversationId: x, idempotencyKey: `x-key-${version}`, deltas: [appendHistory(textMessage(`x${version}`, Role.USER, `x says ${version}`))] });
    }
    await admin.conversations.commit({ conversationId: y, idempotencyKey: "y-key-1", deltas: [appendHistory(textMessage("y1", Role.USER, "y says 1"))] });
    const page = await openWithToken(`/inspector/#/c/${encodeURIComponent(x)}`);
    const timeline = page.getByTestId("timeline");
    const versions = () => timeline.locator("li").evaluateAll((rows) => rows.map((row) => row.getAttribute("data-version")));
    await expect.poll(versions, { timeout: 10_000 }).toEqual(["3", "2", "1"]);
    await page.getByTestId("live").waitFor();

    await page.goto(`${sidecar.url}/inspector/#/c/${encodeURIComponent(y)}`);
    await expect.poll(() => page.getByTestId("conversation-id").textContent(), { timeout: 10_000 }).toBe(y);
    await expect.poll(versions, { timeout: 10_000 }).toEqual(["1"]);
    await expect.poll(() => page.getByTestId("version").textContent(), { timeout: 10_000 }).toBe("v1");
    expect(await timeline.textContent()).toContain("key y-key-1");
    expect(await timeline.textContent()).not.toContain("x-key");
    expect(await page.getByTestId("messages").getByTestId("message").evaluateAll((rows) => rows.map((row) => row.getAttribute("data-id")))).toEqual(["y1"]);

    // And back: X's own three versions, once each.
    await page.goto(`${sidecar.url}/inspector/#/c/${encodeURIComponent(x)}`);
    await expect.poll(versions, { timeout: 10_000 }).toEqual(["3", "2", "1"]);
    expect(await timeline.textContent()).not.toContain("y-key");
    await page.close();
  });

  it("shows the newest 200 history messages of a long conversation, more on request, and a conversation over the message limit", async () => {
    const long = "acme/long-history";
    const messages = Array.from({ length: 250 }, (_, index) => textMessage(`h${index}`, index % 2 === 0 ? Role.USER : Role.ASSISTANT, `message ${index}`));
    await admin.conversations.commit({ conversationId: long, deltas: [appendHistory(...messages)] });
    const page = await openWithToken(`/inspector/#/c/${encodeURIComponent(long)}`);
    const shown = () => page.getByTestId("messages").getByTestId("message").evaluateAll((rows) => rows.map((row) => row.getAttribute("data-id")));
    await expect.poll(async () => (await shown()).length, { timeout: 10_000 }).toBe(200);
    expect((await shown())[0]).toBe("h50");
    expect(await page.getByTestId("history-window").textContent()).toContain("the newest 200 of 250 shown");
    await page.getByTestId("earlier").click();
    await expect.poll(async () => (await shown()).length, { timeout: 10_000 }).toBe(250);
    expect(await page.getByTestId("history-window").count()).toBe(0);

    // 20 messages of 1 MB: GetState refuses the whole state (over 16 MiB); the page shows its newest 200 all the same.
    const big = "acme/over-the-limit";
    for (let index = 0; index < 20; index++) {
      await admin.conversations.commit({ conversationId: big, deltas: [appendHistory(textMessage(`b${index}`, Role.USER, `${index} ${"b".repeat(1_000_000)}`))] });
    }
    const refused = await admin.conversations.getState({ conversationId: big }).catch((error: unknown) => error);
    expect(String(refused)).toContain("read its messages in pages with ConversationService.ReadMessages");
    const bigPage = await openWithToken(`/inspector/#/c/${encodeURIComponent(big)}`);
    await expect.poll(() => bigPage.getByTestId("version").textContent(), { timeout: 20_000 }).toBe("v20");
    await expect.poll(async () => (await bigPage.getByTestId("messages").getByTestId("message").count()), { timeout: 20_000 }).toBe(20);
    expect(await bigPage.getByTestId("error").count()).toBe(0);
  }, 60_000);

  it("runs a compile with a chosen budget and provider and shows its token bars, what was trimmed and why, the rendered body and the cache impact", async () => {
    const page = await openWithToken(`/inspector/#/c/${encodeURIComponent(conversationId)}?tab=compile`);
    await page.getByTestId("budget").fill("80");
    await page.getByTestId("provider").selectOption({ label: "openai chat" });
    await page.getByTestId("run-compile").click();
    const result = page.getByTestId("compile-result");
    await result.waitFor({ timeout: 10_000 });
    // The same compile through the API gives the numbers the page must show.
    const expected = (await admin.contexts.compile({ conversationId, budget: { maxTokens: 80n }, render: { provider: Provider.OPENAI_CHAT, model: "gpt-4o" }, include: [CompileResultPart.ALL_TRANSFORMATIONS] })).result!;
    expect(expected.usage!.estimator).not.toBe(EstimatorKind.UNSPECIFIED);
    expect(await page.getByTestId("total").textContent()).toBe(`${expected.usage!.total} of 80`);
    const trimmed = expected.usage!.historyBeforeTrim - expected.usage!.history;
    expect(trimmed).toBeGreaterThan(0n);
    expect(await page.getByTestId("trimmed").textContent()).toContain(`${trimmed} trimmed`);
    expect(await result.locator('.bar-row[data-segment="system"] .number').textContent()).toBe(String(expected.usage!.system));
    expect(await result.locator('.bar-row[data-segment="history"] .number').textContent()).toBe(String(expected.usage!.history));
    const records = page.getByTestId("records");
    // Trimmed: by the budget, or with the message they were paired with (history alignment).
    expect(await records.locator("tr.trimmed", { hasText: "token_budget_exceeded" }).count()).toBe(Number(expected.budgetDroppedMessages));
    expect(await records.locator("tr.trimmed").count()).toBe(Object.values(expected.transformations).filter((record) => record.action === TransformationAction.DROPPED).length);
    expect(await records.locator('tr[data-id="sys"]').textContent()).toContain("kept");
    const rendered = JSON.parse((await page.getByTestId("rendered").textContent())!) as { model: string; messages: unknown[] };
    expect(rendered.model).toBe("gpt-4o");
    expect(rendered.messages.length).toBeGreaterThan(0);
    // A second compile of the same state keeps the stable prefix: the cache line says so.
    await page.getByTestId("run-compile").click();
    await expect.poll(() => page.getByTestId("cache").textContent(), { timeout: 10_000 }).toContain("unchanged since the last compile");
    // The sidecar's own cache_impact: this compile against the conversation's previous one.
    expect(await page.getByTestId("cache-impact").textContent()).toMatch(/against the previous compile \(v4\): \d+ tokens unchanged/);
    await page.screenshot({ path: join(results, "inspector-compile.png"), fullPage: true });
    await page.close();
    expect(consoleErrors).toEqual([]);
  });
});

describe("web inspector switch", () => {
  let sidecar: Sidecar | undefined;
  afterAll(async () => {
    await sidecar?.stop();
  });

  it("serves nothing under /inspector/ with --inspector false, and its files with a strict content policy otherwise", async () => {
    sidecar = await startSidecar(["--inspector", "false"]);
    const off = await fetch(`${sidecar.url}/inspector/`);
    expect(off.status).toBe(404);
    expect(await off.text()).not.toContain("<html");
    expect(JSON.parse(sidecar.logs.find((line) => line.includes("contextd listening"))!).inspector).toBe("off");
    await sidecar.stop();
    sidecar = await startSidecar([]);
    const redirect = await fetch(`${sidecar.url}/inspector`, { redirect: "manual" });
    expect(redirect.status).toBe(308);
    expect(redirect.headers.get("location")).toBe("/inspector/");
    const page = await fetch(`${sidecar.url}/inspector/`);
    expect(page.status).toBe(200);
    expect(page.headers.get("content-security-policy")).toContain("default-src 'self'");
    const body = await page.text();
    const script = /src="\.\/(assets\/[^"]+\.js)"/.exec(body)![1]!;
    const asset = await fetch(`${sidecar.url}/inspector/${script}`);
    expect(asset.headers.get("content-type")).toBe("text/javascript; charset=utf-8");
    expect(asset.headers.get("cache-control")).toContain("immutable");
    expect((await fetch(`${sidecar.url}/inspector/assets/none.js`)).status).toBe(404);
  });
});

describe("InspectorAssets without a build", () => {
  it("answers 503 saying to run npm run build", async () => {
    const assets = new InspectorAssets(join(tmpdir(), "contextd-no-inspector-build"));
    const server = http.createServer((request, response) => {
      if (!assets.serve(request, response)) response.writeHead(418).end();
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const { port } = server.address() as AddressInfo;
      const answer = await fetch(`http://127.0.0.1:${port}/inspector/`);
      expect(answer.status).toBe(503);
      expect(await answer.text()).toContain("run npm run build");
      expect((await fetch(`http://127.0.0.1:${port}/metrics`)).status).toBe(418);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });
});
