import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { chromium, type BrowserContext, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CompileResultPart, EstimatorKind, TransformationAction } from "#gen/contextd/v1/compile_pb";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { MessageSchema, Provider, Role } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
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
    parts: [{ kind: { case: "toolResult", value: { toolCallId: callId, name: "lookup_order", payload: { text: `order A-17 shipped on Monday. ${"Parcel scanned at the depot. ".repeat(8)}` } } } }],
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

  it("lists a tenant's conversations with its token and no prefix typed, refuses to list beyond the tenant, and reads the list again live", async () => {
    const page = await openPage("/inspector/", [/status of 40[13]/]);
    await page.getByTestId("token").fill(acmeToken);
    await page.getByRole("button", { name: "use token" }).click();
    const table = page.getByTestId("conversations");
    // No prefix: the server lists the token's tenant (it used to refuse until "acme/" was typed).
    await expect.poll(() => table.textContent(), { timeout: 10_000 }).toContain(conversationId);
    expect(await table.textContent()).not.toContain("globex");
    expect(await table.locator("tr", { hasText: conversationId }).locator("td.number").textContent()).toBe("3");
    expect(await page.getByTestId("error").count()).toBe(0);
    expect(await page.getByTestId("list-read-at").textContent()).toContain("newest update first");
    // A conversation committed while the page is open appears, and a version that moves shows, without a click.
    await admin.conversations.commit({ conversationId: "acme/arrived-later", expectedVersion: 0n, deltas: [appendHistory(textMessage("n1", Role.USER, "new"))] });
    await expect.poll(() => table.textContent(), { timeout: 10_000 }).toContain("acme/arrived-later");
    await admin.conversations.commit({ conversationId: "acme/arrived-later", expectedVersion: 1n, deltas: [appendHistory(textMessage("n2", Role.USER, "again"))] });
    await expect.poll(() => table.locator("tr", { hasText: "acme/arrived-later" }).locator("td.number").textContent(), { timeout: 10_000 }).toBe("2");
    // Newest update first, each row with its update time: the conversation just written leads.
    const rows = table.locator("tbody tr");
    expect(await rows.first().textContent()).toContain("acme/arrived-later");
    const updated = (await table.locator("td.updated").evaluateAll((cells) => cells.map((cell) => Number(cell.getAttribute("data-updated")))));
    expect(updated.length).toBeGreaterThan(1);
    expect(updated).toEqual([...updated].sort((a, b) => b - a));
    expect(updated.every((time) => time > 0)).toBe(true);
    await page.screenshot({ path: join(results, "inspector-list.png") });
    // A prefix outside the tenant is refused, and stays refused when the list reads itself again.
    await page.getByTestId("prefix").fill("globex/");
    await page.getByRole("button", { name: "list" }).click();
    await expect.poll(() => page.getByTestId("error").textContent(), { timeout: 10_000 }).toContain('outside tenant "acme"');
    await page.waitForResponse((response) => response.url().endsWith("/ListConversations") && response.status() === 403, { timeout: 10_000 });
    expect(await page.getByTestId("error").textContent()).toContain('outside tenant "acme"');
    expect(await table.count()).toBe(0);
    await page.close();
  });

  it("shows labels, title and usage totals in the list, and a conversation's usage per turn, read again when a new version lands", async () => {
    const id = "acme/usage-shown";
    await admin.conversations.commit({
      conversationId: id,
      expectedVersion: 0n,
      deltas: [appendHistory(textMessage("q1", Role.USER, "Refund please")), delta({ case: "setMetadata", value: { title: "Refund A-17", labels: { team: "billing", tier: "gold" } } })],
    });
    const report = (n: number, input: bigint, cached: bigint, output: bigint) =>
      admin.contexts.reportUsage({ conversationId: id, turnId: `turn-${n}`, reportId: `resp-${n}`, provider: Provider.ANTHROPIC_MESSAGES, model: "claude-sonnet-4", estimator: EstimatorKind.TOKENIZER, estimatedTokens: input - 7n, actualInputTokens: input, cachedInputTokens: cached, outputTokens: output });
    await report(1, 1_200n, 0n, 90n);
    await report(2, 1_450n, 1_150n, 60n);
    const page = await openWithToken("/inspector/");
    const row = page.getByTestId("conversations").locator("tr", { hasText: id });
    await expect.poll(() => row.getByTestId("usage").textContent(), { timeout: 10_000 }).toBe("2 reports: 2650 in (1150 cached), 150 out");
    expect(await row.getByTestId("labels").textContent()).toBe("team=billing, tier=gold");
    expect(await row.textContent()).toContain("Refund A-17");
    // A conversation without reports says so.
    expect(await page.getByTestId("conversations").locator("tr", { hasText: conversationId }).getByTestId("usage").textContent()).toBe("none reported");
    await page.screenshot({ path: join(results, "inspector-list-usage.png") });
    await page.goto(`${sidecar.url}/inspector/#/c/${encodeURIComponent(id)}?tab=usage`);
    await expect.poll(() => page.getByTestId("usage-reports").textContent(), { timeout: 10_000 }).toBe("2");
    expect(await page.getByTestId("title").textContent()).toBe("Refund A-17");
    expect(await page.getByTestId("conversation-labels").textContent()).toBe("team=billing, tier=gold");
    expect(await page.getByTestId("usage-input").textContent()).toBe("2650");
    expect(await page.getByTestId("usage-cached").textContent()).toBe("1150");
    expect(await page.getByTestId("usage-output").textContent()).toBe("150");
    expect(await page.getByTestId("usage-compiled").textContent()).toBe("2636");
    const turns = () => page.getByTestId("usage-entries").locator("td.turn").allTextContents();
    expect(await turns()).toEqual(["turn-1", "turn-2"]);
    expect(await page.getByTestId("usage-entries").locator("tbody tr").last().textContent()).toContain("anthropic_messages");
    // The next turn: its report, then its commit; the new version reads the ledger again.
    await report(3, 1_600n, 1_400n, 75n);
    await admin.conversations.commit({ conversationId: id, expectedVersion: 1n, deltas: [appendHistory(textMessage("a1", Role.ASSISTANT, "Done."))] });
    await expect.poll(turns, { timeout: 10_000 }).toEqual(["turn-1", "turn-2", "turn-3"]);
    expect(await page.getByTestId("usage-reports").textContent()).toBe("3");
    await page.screenshot({ path: join(results, "inspector-usage.png") });
    await page.close();
  });

  it("says no such conversation for an id with nothing stored, instead of an empty v0", async () => {
    const page = await openWithToken(`/inspector/#/c/${encodeURIComponent("acme/never-written")}`);
    await expect.poll(() => page.getByTestId("version").textContent(), { timeout: 10_000 }).toBe("no such conversation");
    expect(await page.getByTestId("not-found").textContent()).toContain('nothing is stored under "acme/never-written"');
    expect(await page.getByTestId("messages").count()).toBe(0);
    await page.close();
  });

  it("collapses a long tool result to its first lines, with show all to expand it", async () => {
    const id = "acme/long-tool-output";
    const output = Array.from({ length: 400 }, (_, index) => `line ${index}: ${"x".repeat(40)}`).join("\n");
    const longResult = create(MessageSchema, { id: "t-long", role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: "c-long", name: "grep", payload: { text: output } } } }] });
    await admin.conversations.commit({ conversationId: id, deltas: [appendHistory(textMessage("q", Role.USER, "grep it"), toolCallMessage("a-long", "c-long"), longResult)] });
    const page = await openWithToken(`/inspector/#/c/${encodeURIComponent(id)}`);
    const row = page.locator('[data-id="t-long"]');
    await row.waitFor({ timeout: 10_000 });
    const collapsed = row.getByTestId("collapsed");
    expect(await collapsed.textContent()).toContain("line 5:");
    expect(await collapsed.textContent()).not.toContain("line 6:");
    expect(await row.getByTestId("show-all").textContent()).toBe(`show all (${(new TextEncoder().encode(output).length / 1024).toFixed(1)} KB)`);
    const shortHeight = (await row.boundingBox())!.height;
    expect(shortHeight).toBeLessThan(200);
    await row.getByTestId("show-all").click();
    expect(await row.textContent()).toContain("line 399:");
    expect((await row.boundingBox())!.height).toBeGreaterThan(shortHeight * 5);
    await row.getByTestId("show-less").click();
    expect(await row.getByTestId("collapsed").count()).toBe(1);
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

    const longKey = `retry-${"k".repeat(150)}`;
    await admin.conversations.commit({ conversationId, expectedVersion: 3n, idempotencyKey: longKey, deltas: [appendHistory(textMessage("u3", Role.USER, "Can you send the tracking link?"))] });
    await expect.poll(() => page.getByTestId("version").textContent(), { timeout: 10_000 }).toBe("v4");
    await expect.poll(() => messages.locator('[data-id="u3"]').textContent(), { timeout: 10_000 }).toContain("tracking link");
    expect(await timeline.locator("li").first().getAttribute("data-version")).toBe("4");
    // A long idempotency key stays inside the versions column, cut with an ellipsis, whole in its title.
    const key = timeline.getByTestId("idempotency-key");
    expect(await key.getAttribute("title")).toBe(longKey);
    const [keyBox, timelineBox] = [(await key.boundingBox())!, (await timeline.boundingBox())!];
    expect(keyBox.x + keyBox.width).toBeLessThanOrEqual(timelineBox.x + timelineBox.width);
    expect(await key.evaluate((element) => [element.ownerDocument.defaultView!.getComputedStyle(element).textOverflow, element.scrollWidth > element.clientWidth])).toEqual(["ellipsis", true]);
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

  it("shows a fork's origin and first version, a rewind in the timeline, and an earlier version's messages from the version picker", async () => {
    // The seeded conversation is at v4 here (the test above added u3); its fork at v3 is a new one.
    const forkId = "acme/support-42-retry";
    const forked = await admin.conversations.fork({ conversationId, atVersion: 3n, newConversationId: forkId });
    expect(forked.version).toBe(1n);
    await admin.conversations.commit({ conversationId: forkId, expectedVersion: 1n, deltas: [appendHistory(textMessage("r1", Role.USER, "Actually, cancel the order."))] });
    await admin.conversations.rewind({ conversationId: forkId, toVersion: 1n, expectedVersion: 2n });
    const page = await openWithToken(`/inspector/#/c/${encodeURIComponent(forkId)}`);
    await expect.poll(() => page.getByTestId("version").textContent(), { timeout: 10_000 }).toBe("v3");
    expect(await page.getByTestId("fork-source").textContent()).toBe(conversationId);
    expect(await page.getByTestId("fork-version").textContent()).toBe("v3");
    const timeline = page.getByTestId("timeline");
    await expect.poll(() => timeline.locator("li").evaluateAll((rows) => rows.map((row) => row.getAttribute("data-version"))), { timeout: 10_000 }).toEqual(["3", "2", "1"]);
    expect(await timeline.locator('li[data-version="3"]').getByTestId("rewound").textContent()).toBe("rewound to version 1");
    expect(await timeline.locator('li[data-version="1"]').getByTestId("fork-start").textContent()).toBe(`forked from ${conversationId} at v3`);
    expect(await timeline.locator('li[data-version="2"]').textContent()).toContain("appendMessages");
    const shown = () => page.getByTestId("messages").getByTestId("message").evaluateAll((rows) => rows.map((row) => row.getAttribute("data-id")));
    // The rewind took r1 back out: the latest is the source's v3 again.
    await expect.poll(shown, { timeout: 10_000 }).toEqual(["sys", "sum1", "u2", "a2", "t1", "a3"]);

    // The picker: version 2 still holds r1, read with GetState at_version, not live.
    await page.getByTestId("version-picker").fill("2");
    await page.getByTestId("show-version").click();
    await expect.poll(() => page.getByTestId("version").textContent(), { timeout: 10_000 }).toBe("v2");
    await expect.poll(shown, { timeout: 10_000 }).toEqual(["sys", "sum1", "u2", "a2", "t1", "a3", "r1"]);
    // The latest version comes from the change list, read apart from the state: poll for it.
    await expect.poll(() => page.getByTestId("past").textContent(), { timeout: 10_000 }).toBe("earlier version (latest v3)");
    expect(await page.getByTestId("live").count()).toBe(0);
    await expect.poll(() => timeline.locator("li.viewing").getAttribute("data-version"), { timeout: 10_000 }).toBe("2");
    await page.screenshot({ path: join(results, "inspector-history.png"), fullPage: true });
    // A commit meanwhile grows the timeline; the page stays at version 2.
    await admin.conversations.commit({ conversationId: forkId, expectedVersion: 3n, deltas: [appendHistory(textMessage("r2", Role.USER, "No, keep it."))] });
    await expect.poll(() => page.getByTestId("past").textContent(), { timeout: 10_000 }).toBe("earlier version (latest v4)");
    expect(await page.getByTestId("version").textContent()).toBe("v2");
    expect(await shown()).toEqual(["sys", "sum1", "u2", "a2", "t1", "a3", "r1"]);
    // "latest" follows the conversation live again.
    await page.getByTestId("latest").click();
    await expect.poll(() => page.getByTestId("version").textContent(), { timeout: 10_000 }).toBe("v4");
    await page.getByTestId("live").waitFor({ timeout: 10_000 });
    await expect.poll(shown, { timeout: 10_000 }).toEqual(["sys", "sum1", "u2", "a2", "t1", "a3", "r2"]);
    // The origin links to the source at the forked version: its v3, before u3.
    await page.getByTestId("fork-source").click();
    await expect.poll(() => page.getByTestId("conversation-id").textContent(), { timeout: 10_000 }).toBe(conversationId);
    await expect.poll(() => page.getByTestId("version").textContent(), { timeout: 10_000 }).toBe("v3");
    await expect.poll(shown, { timeout: 10_000 }).toEqual(["sys", "sum1", "u2", "a2", "t1", "a3"]);
    await expect.poll(() => page.getByTestId("past").textContent(), { timeout: 10_000 }).toBe("earlier version (latest v4)");
    expect(await page.getByTestId("forked-from").count()).toBe(0);
    await page.close();
  });

  it("shows the sidecar's OUT_OF_RANGE for a version outside the history window, naming the oldest readable one, and refuses a version that is not a number", async () => {
    // A sidecar keeping 2 changes per conversation: after 4 commits versions 2 to 4 are readable.
    const small = await startSidecar(["--history-retention-versions", "2"]);
    try {
      const client = createClient(ConversationService, createConnectTransport({ baseUrl: small.url, httpVersion: "1.1" }));
      const id = "window/short";
      for (let version = 1; version <= 4; version++) await client.commit({ conversationId: id, deltas: [appendHistory(textMessage(`w${version}`, Role.USER, `turn ${version}`))] });
      const refused = ConnectError.from(await client.getState({ conversationId: id, atVersion: 1n }).catch((error: unknown) => error));
      expect(refused.code).toBe(Code.OutOfRange);
      expect(refused.rawMessage).toContain("the oldest readable version is 2");
      const page = await browser.newPage();
      page.on("pageerror", (error) => consoleErrors.push(String(error)));
      await page.goto(`${small.url}/inspector/#/c/${encodeURIComponent(id)}?at=1`);
      await expect.poll(() => page.getByTestId("version-error").textContent(), { timeout: 10_000 }).toBe(`version 1 cannot be read: ${refused.rawMessage}`);
      expect(await page.getByTestId("messages").count()).toBe(0);
      // The timeline still lists what the log keeps, so a readable version is a click away.
      await expect.poll(() => page.getByTestId("timeline").locator("li").evaluateAll((rows) => rows.map((row) => row.getAttribute("data-version"))), { timeout: 10_000 }).toEqual(["4", "3"]);
      await page.goto(`${small.url}/inspector/#/c/${encodeURIComponent(id)}?at=two`);
      await expect.poll(() => page.getByTestId("version-error").textContent(), { timeout: 10_000 }).toContain('version "two" in the address is not a version');
      expect(await page.getByTestId("messages").count()).toBe(0);
      await page.close();
    } finally {
      await small.stop();
    }
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
    // A compile's dropped messages older than what a fresh page read (its newest 200) are named from
    // a ReadMessages of the compiled version; its table shows 500 rows until "show all".
    await admin.conversations.commit({ conversationId: long, deltas: [appendHistory(...Array.from({ length: 300 }, (_, index) => textMessage(`m${index}`, index % 2 === 0 ? Role.USER : Role.ASSISTANT, `more ${index}`)))] });
    // Its v1, an earlier version now, is read whole with GetState at_version and shown the same way: its newest 200.
    await page.goto(`${sidecar.url}/inspector/#/c/${encodeURIComponent(long)}?at=1`);
    await expect.poll(() => page.getByTestId("version").textContent(), { timeout: 10_000 }).toBe("v1");
    await expect.poll(async () => (await shown()).length, { timeout: 10_000 }).toBe(200);
    expect((await shown()).at(-1)).toBe("h249");
    expect(await page.getByTestId("history-window").textContent()).toContain("the newest 200 of 250 shown");
    await page.close();
    const compilePage = await openWithToken(`/inspector/#/c/${encodeURIComponent(long)}?tab=compile`);
    await compilePage.getByTestId("budget").fill("100");
    await compilePage.getByTestId("provider").selectOption({ label: "none (payload only)" });
    await compilePage.getByTestId("run-compile").click();
    const oldest = compilePage.getByTestId("records").locator('tr[data-id="h0"]');
    await oldest.waitFor({ timeout: 10_000 });
    expect(await oldest.locator("td.role").textContent()).toBe("user");
    expect(await oldest.locator("td.excerpt").textContent()).toBe("message 0");
    expect(await oldest.locator("td.outcome").textContent()).toBe("dropped");
    expect(Number(await oldest.getByTestId("message-tokens").textContent())).toBeGreaterThan(0);
    const rows = compilePage.getByTestId("records").locator("tbody tr");
    expect(await rows.count()).toBe(500);
    await compilePage.getByTestId("all-rows").click();
    expect(await rows.count()).toBe(550);
    await compilePage.close();

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
    // An earlier version over the limit comes only whole: the page shows GetState's refusal, not a blank.
    const pastBig = await openPage(`/inspector/#/c/${encodeURIComponent(big)}?at=19`, [/status of 401/, /status of 4\d\d/]);
    await pastBig.getByTestId("token").fill(acmeToken);
    await pastBig.getByRole("button", { name: "use token" }).click();
    await expect.poll(() => pastBig.getByTestId("error").textContent(), { timeout: 20_000 }).toContain("read its messages in pages with ConversationService.ReadMessages");
    expect(await pastBig.getByTestId("messages").count()).toBe(0);
    await pastBig.close();
  }, 60_000);

  it("runs a compile with a chosen budget and provider and shows its token bars, each message by role, text and tokens with what happened to it and why, the rendered body and the cache impact", async () => {
    const page = await openWithToken(`/inspector/#/c/${encodeURIComponent(conversationId)}?tab=compile`);
    await page.getByTestId("budget").fill("80");
    await page.getByTestId("provider").selectOption({ label: "openai chat" });
    await page.getByTestId("run-compile").click();
    const result = page.getByTestId("compile-result");
    await result.waitFor({ timeout: 10_000 });
    // The same compile through the API gives the numbers the page must show.
    const expected = (await admin.contexts.compile({ conversationId, budget: { maxTokens: 80n }, render: { provider: Provider.OPENAI_CHAT, model: "gpt-4o" }, include: [CompileResultPart.ALL_TRANSFORMATIONS, CompileResultPart.MESSAGE_TOKENS] })).result!;
    expect(expected.usage!.estimator).not.toBe(EstimatorKind.UNSPECIFIED);
    expect(await page.getByTestId("total").textContent()).toBe(`${expected.usage!.total} of 80`);
    const inDropped = expected.usage!.historyBeforeTrim - expected.usage!.history;
    expect(inDropped).toBeGreaterThan(0n);
    const droppedRecords = Object.values(expected.transformations).filter((record) => record.action === TransformationAction.DROPPED).length;
    expect(await page.getByTestId("dropped-tokens").textContent()).toBe(String(inDropped));
    expect(await page.getByTestId("trimmed").textContent()).toContain(`${droppedRecords} message(s) dropped, ${expected.budgetDroppedMessages} of them by the budget`);
    expect(await result.locator('.bar-row[data-segment="system"] .number').textContent()).toBe(String(expected.usage!.system));
    expect(await result.locator('.bar-row[data-segment="history"] .number').textContent()).toBe(String(expected.usage!.history));
    const records = page.getByTestId("records");
    // One word per outcome, the records' own (sent, sent changed, dropped); the reason says what dropped it.
    expect(await records.locator('tr.dropped[data-reason="token budget exceeded"]').count()).toBe(Number(expected.budgetDroppedMessages));
    expect(await records.locator("tr.dropped").count()).toBe(droppedRecords);
    expect(new Set(await records.locator("td.outcome").allTextContents())).toEqual(new Set(Object.values(expected.transformations).map((record) => (record.action === TransformationAction.DROPPED ? "dropped" : record.action === TransformationAction.FORMATTED ? "sent changed" : "sent"))));
    expect(await result.textContent()).not.toContain("trimmed,");
    // Each message by role, text and the tokens the compile counted for it; dropped ones too (from what the page read).
    const sys = records.locator('tr[data-id="sys"]');
    expect(await sys.locator("td.role").textContent()).toBe("system");
    expect(await sys.locator("td.excerpt").textContent()).toContain("You are the support agent of a shop.");
    expect(await sys.locator("td.outcome").textContent()).toBe("sent");
    for (const [messageId, tokens] of Object.entries(expected.messageTokens)) {
      expect(await records.locator(`tr[data-id="${messageId}"]`).getByTestId("message-tokens").textContent()).toBe(String(tokens));
    }
    const droppedRow = records.locator("tr.dropped").first();
    expect((await droppedRow.locator("td.excerpt").textContent())!.length).toBeGreaterThan(0);
    expect(await droppedRow.locator("td.role").textContent()).not.toBe("");
    expect(await records.locator('tr[data-id="t1"] td.excerpt').textContent()).toContain("order A-17 shipped on Monday");
    const rendered = JSON.parse((await page.getByTestId("rendered").textContent())!) as { model: string; messages: unknown[] };
    expect(rendered.model).toBe("gpt-4o");
    expect(rendered.messages.length).toBeGreaterThan(0);
    // A second compile of the same state keeps the stable prefix: the cache line says so.
    await page.getByTestId("run-compile").click();
    await expect.poll(() => page.getByTestId("cache").textContent(), { timeout: 10_000 }).toContain("unchanged since the last compile");
    // The sidecar's own cache_impact: this compile against the conversation's previous one.
    expect(await page.getByTestId("cache-impact").textContent()).toMatch(/against the previous compile \(v4\): \d+ tokens unchanged/);
    await page.screenshot({ path: join(results, "inspector-compile.png"), fullPage: true });

    // Tool-result clearing from the form: the old result is sent as a placeholder, and the freed tokens show.
    await page.getByTestId("budget").fill("2000");
    await page.getByTestId("clear-tool-results").check();
    await page.getByTestId("clear-trigger").fill("1");
    await page.getByTestId("clear-keep-recent").fill("0");
    await page.getByTestId("clear-reasoning").check();
    await page.getByTestId("run-compile").click();
    const cleared = records.locator('tr[data-id="t1"]');
    await expect.poll(() => cleared.getAttribute("data-reason"), { timeout: 10_000 }).toBe("tool result cleared");
    expect(await cleared.locator("td.outcome").textContent()).toBe("sent changed");
    const clearedExpected = (
      await admin.contexts.compile({
        conversationId,
        budget: { maxTokens: 2000n, toolResultClearing: { triggerTokens: 1n, keepRecent: 0, clearAtLeastTokens: 0n, clearInputs: false }, reasoningClearing: { keepRecentTurns: 1 } },
        render: { provider: Provider.OPENAI_CHAT, model: "gpt-4o" },
        include: [CompileResultPart.MESSAGE_TOKENS],
      })
    ).result!;
    expect(clearedExpected.usage!.clearedTokens).toBeGreaterThan(0n);
    expect(await page.getByTestId("cleared-tokens").textContent()).toBe(String(clearedExpected.usage!.clearedTokens));
    expect(await cleared.getByTestId("message-tokens").textContent()).toBe(String(clearedExpected.messageTokens["t1"]));
    expect(await cleared.locator("td.excerpt").textContent()).toContain("cleared to save context");
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
