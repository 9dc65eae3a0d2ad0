import { readFileSync } from "node:fs";
import { toJson, type JsonValue } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { ConversationOrder, ConversationService, ConversationSummarySchema, ForkResponseSchema, type ConversationSummary } from "#gen/contextd/v1/conversation_service_pb";
import { ConversationStateSchema } from "#gen/contextd/v1/state_pb";
import { Provider } from "#gen/contextd/v1/message_pb";
import { GetUsageResponseSchema, ListTenantUsageResponseSchema, UsageTotalsSchema, type ConversationUsage, type UsageTotals } from "#gen/contextd/v1/usage_ledger_pb";
import { helpText, parseCommand, table, UsageError, type CommandOutput, type OptionSpec, type Subcommand } from "./command-table.js";

/**
 * `contextd conversations list | show | usage | fork | export | delete`: what an operator asks a
 * running sidecar about its conversations, through the same RPCs (and the same token and tenant
 * scoping) as any client. Human tables by default, `--json` for scripts (protobuf JSON: 64-bit
 * numbers as strings); `export` always writes JSON Lines. One table entry per subcommand
 * (`subcommands`).
 */

/** What every subcommand runs against: the sidecar's ConversationService. */
export interface AdminContext {
  conversations: Client<typeof ConversationService>;
  json: boolean;
}

const program = "contextd conversations";

const sharedOptions: OptionSpec[] = [
  { name: "address", kind: "string", description: "the sidecar: host:port, or an http:// or https:// URL", env: "CONTEXTD_ADDRESS", default: "127.0.0.1:7420" },
  { name: "token", kind: "string", description: "bearer token, when the sidecar has auth on", env: "CONTEXTD_TOKEN" },
  { name: "ca-file", kind: "string", description: "PEM CA certificates for an https:// address", env: "CONTEXTD_CA_FILE" },
  { name: "json", kind: "flag", description: "print JSON instead of a table" },
  { name: "help", kind: "flag", description: "print this help" },
];

/** The most conversations `list` reads through pages for one command. */
const maxListed = 100_000;

const list: Subcommand<AdminContext> = {
  name: "list",
  positionals: [],
  summary: "conversations, by id or newest update first, filtered by id prefix, labels and update time (ListConversations)",
  options: [
    { name: "prefix", kind: "string", description: "only ids starting with this" },
    { name: "label", kind: "list", description: "only conversations with this label, key=value" },
    { name: "updated-since", kind: "string", description: "only those updated at or after this time: an ISO 8601 time or Unix milliseconds" },
    { name: "order", kind: "string", description: "id or updated (newest first)", default: "id" },
    { name: "limit", kind: "string", description: `at most this many, read page by page (1 to ${maxListed})`, default: "100" },
  ],
  async run(command, { conversations, json }, output) {
    const labels = Object.fromEntries(
      command.lists.label!.map((pair) => {
        const equals = pair.indexOf("=");
        if (equals <= 0) throw new UsageError(`--label ${pair}: expected key=value`);
        return [pair.slice(0, equals), pair.slice(equals + 1)];
      }),
    );
    const order = { id: ConversationOrder.ID, updated: ConversationOrder.UPDATED_DESC }[command.strings.order!];
    if (order === undefined) throw new UsageError(`--order ${command.strings.order}: expected id or updated`);
    const limit = integerOption("limit", command.strings.limit!, 1, maxListed);
    const updatedSinceUnixMs = command.strings["updated-since"] === undefined ? 0n : timeOption("updated-since", command.strings["updated-since"]);
    const listed: ConversationSummary[] = [];
    let pageToken = "";
    do {
      const page = await conversations.listConversations({ prefix: command.strings.prefix ?? "", labels, updatedSinceUnixMs, order, pageSize: Math.min(1_000, limit - listed.length), pageToken });
      listed.push(...page.conversations);
      pageToken = page.nextPageToken;
    } while (pageToken !== "" && listed.length < limit);
    if (json) {
      output.out(JSON.stringify({ conversations: listed.map((summary) => toJson(ConversationSummarySchema, summary)), more: pageToken !== "" }, undefined, 2));
      return;
    }
    output.out(
      table(
        ["CONVERSATION", "VERSION", "UPDATED", "TITLE", "LABELS"],
        listed.map((summary) => [summary.conversationId, String(summary.version), timeText(summary.updatedAtUnixMs), summary.title, labelsText(summary.labels)]),
      ),
    );
    if (pageToken !== "") output.err(`(more than ${limit}: raise --limit to see the rest)`);
  },
};

const show: Subcommand<AdminContext> = {
  name: "show",
  positionals: ["conversation-id"],
  summary: "one conversation: version, times, title, labels, message counts per segment and usage totals",
  options: [],
  async run(command, { conversations, json }, output) {
    const conversationId = command.positionals["conversation-id"]!;
    // Three reads, none of the messages themselves: the state without its messages, an empty
    // window for the segment sizes, the listing entry for the times; and the ledger's totals.
    const [{ state }, window, listing, usage] = await Promise.all([
      conversations.getState({ conversationId, withoutMessages: true }),
      conversations.readMessages({ conversationId, start: BigInt(Number.MAX_SAFE_INTEGER) }),
      conversations.listConversations({ prefix: conversationId, pageSize: 1 }),
      conversations.getUsage({ conversationId }),
    ]);
    const summary = listing.conversations.find((entry) => entry.conversationId === conversationId);
    const sizes = window.segmentSizes;
    const messages = { system: String(sizes?.system ?? 0n), history: String(sizes?.history ?? 0n), memory: String(sizes?.memory ?? 0n), tools: String(sizes?.tools ?? 0n) };
    if (json) {
      output.out(
        JSON.stringify(
          {
            conversationId,
            version: String(state?.version ?? 0n),
            createdAtUnixMs: String(summary?.createdAtUnixMs ?? 0n),
            updatedAtUnixMs: String(summary?.updatedAtUnixMs ?? 0n),
            title: state?.title ?? "",
            labels: state?.labels ?? {},
            messages,
            usage: toJson(UsageTotalsSchema, usage.totals ?? { $typeName: "contextd.v1.UsageTotals" } as UsageTotals, { alwaysEmitImplicit: true }),
          },
          undefined,
          2,
        ),
      );
      return;
    }
    const rows: [string, string][] = [
      ["conversation", conversationId],
      ["version", String(state?.version ?? 0n)],
      ["created", timeText(summary?.createdAtUnixMs ?? 0n)],
      ["updated", timeText(summary?.updatedAtUnixMs ?? 0n)],
      ["title", state?.title ?? ""],
      ["labels", labelsText(state?.labels ?? {})],
      ["messages", `system ${messages.system}, history ${messages.history}, memory ${messages.memory}, tools ${messages.tools}`],
      ...totalsRows(usage.totals),
    ];
    output.out(rows.map(([name, value]) => `${name.padEnd(14)} ${value}`.trimEnd()).join("\n"));
  },
};

const usage: Subcommand<AdminContext> = {
  name: "usage",
  positionals: ["conversation-id?"],
  summary: "a conversation's usage ledger (totals and its kept reports, GetUsage), or without an id a tenant's totals and its conversations' (ListTenantUsage)",
  options: [
    { name: "tenant", kind: "string", description: "the tenant to list without a conversation id (an unscoped token may name any); default the token's" },
    { name: "limit", kind: "string", description: `conversations listed for a tenant, read page by page (1 to ${maxListed})`, default: "100" },
  ],
  async run(command, { conversations, json }, output) {
    const conversationId = command.positionals["conversation-id"];
    if (conversationId !== undefined) {
      if (command.strings.tenant !== undefined) throw new UsageError("--tenant lists a tenant: give it without a conversation id");
      const ledger = await conversations.getUsage({ conversationId });
      if (json) {
        output.out(JSON.stringify(toJson(GetUsageResponseSchema, ledger, { alwaysEmitImplicit: true }), undefined, 2));
        return;
      }
      output.out(totalsRows(ledger.totals).map(([name, value]) => `${name.padEnd(14)} ${value}`).join("\n"));
      if (ledger.entriesRolledUp > 0n) output.out(`(${ledger.entriesRolledUp} older reports are counted in the totals only)`);
      output.out("");
      output.out(
        table(
          ["REPORTED", "TURN", "PROVIDER", "MODEL", "INPUT", "CACHED", "OUTPUT", "COMPILED", "REPORT"],
          ledger.entries.map((entry) => [
            timeText(entry.reportedAtUnixMs),
            entry.turnId,
            providerText(entry.provider),
            entry.model,
            String(entry.inputTokens),
            String(entry.cachedInputTokens),
            String(entry.outputTokens),
            String(entry.compiledTokens),
            entry.reportId,
          ]),
        ),
      );
      return;
    }
    const limit = integerOption("limit", command.strings.limit!, 1, maxListed);
    const rows: ConversationUsage[] = [];
    let pageToken = "";
    let first;
    do {
      const page = await conversations.listTenantUsage({ tenant: command.strings.tenant ?? "", pageSize: Math.min(1_000, limit - rows.length), pageToken });
      first ??= page;
      rows.push(...page.conversations);
      pageToken = page.nextPageToken;
    } while (pageToken !== "" && rows.length < limit);
    if (json) {
      output.out(JSON.stringify({ ...(toJson(ListTenantUsageResponseSchema, { ...first, conversations: rows, nextPageToken: "" }, { alwaysEmitImplicit: true }) as Record<string, JsonValue>), more: pageToken !== "" }, undefined, 2));
      return;
    }
    output.out(`tenant         ${first.tenant === "" ? '"" (conversations without a tenant)' : first.tenant}`);
    output.out(totalsRows(first.totals).map(([name, value]) => `${name.padEnd(14)} ${value}`).join("\n"));
    output.out("");
    output.out(
      table(
        ["CONVERSATION", "REPORTS", "INPUT", "CACHED", "OUTPUT", "COMPILED", "LAST REPORT"],
        rows.map(({ conversationId: id, totals }) => [id, String(totals?.reports ?? 0n), String(totals?.inputTokens ?? 0n), String(totals?.cachedInputTokens ?? 0n), String(totals?.outputTokens ?? 0n), String(totals?.compiledTokens ?? 0n), timeText(totals?.lastReportedAtUnixMs ?? 0n)]),
      ),
    );
    if (pageToken !== "") output.err(`(more than ${limit} conversations: raise --limit to see the rest)`);
  },
};

const fork: Subcommand<AdminContext> = {
  name: "fork",
  positionals: ["conversation-id", "new-conversation-id"],
  summary: "copy a conversation, at its latest version or one in its history window, into a new conversation (Fork)",
  options: [{ name: "at-version", kind: "string", description: "the version to copy; default the latest" }],
  async run(command, { conversations, json }, output) {
    const conversationId = command.positionals["conversation-id"]!;
    const newConversationId = command.positionals["new-conversation-id"]!;
    const atText = command.strings["at-version"];
    const atVersion = atText === undefined ? undefined : BigInt(integerOption("at-version", atText, 1, Number.MAX_SAFE_INTEGER));
    const forked = await conversations.fork({ conversationId, newConversationId, ...(atVersion !== undefined ? { atVersion } : {}) });
    if (json) {
      output.out(JSON.stringify(toJson(ForkResponseSchema, forked, { alwaysEmitImplicit: true }), undefined, 2));
      return;
    }
    output.out(`${newConversationId} version ${forked.version}: a fork of ${forked.forkedFrom?.conversationId ?? conversationId} at version ${forked.forkedFrom?.version ?? 0n}`);
  },
};

const exportStates: Subcommand<AdminContext> = {
  name: "export",
  positionals: [],
  summary: "every conversation under a prefix (a tenant's: <tenant>/), one JSON state per line, read from the store a few at a time (ExportConversations)",
  options: [
    { name: "prefix", kind: "string", description: "only ids starting with this; default every one the token sees" },
    { name: "resume-token", kind: "string", description: "go on after the conversation an earlier export's last line named (its resumeToken)" },
  ],
  async run(command, { conversations }, output) {
    // JSON Lines whatever --json says: an export is for another program. Each line carries the
    // resume token, so an export cut short goes on with --resume-token from its last line.
    for await (const exported of conversations.exportConversations({ prefix: command.strings.prefix ?? "", resumeToken: command.strings["resume-token"] ?? "" })) {
      output.out(JSON.stringify({ state: exported.state ? toJson(ConversationStateSchema, exported.state) : null, withoutMessages: exported.withoutMessages, resumeToken: exported.resumeToken }));
    }
  },
};

const remove: Subcommand<AdminContext> = {
  name: "delete",
  positionals: ["conversation-id?"],
  summary: "delete one conversation (DeleteConversation), or with --prefix every conversation under a prefix, page by page (DeleteConversations)",
  options: [
    { name: "expected-version", kind: "string", description: "delete the conversation only at this version (ABORTED otherwise)" },
    { name: "prefix", kind: "string", description: "delete every conversation whose id starts with this (a tenant's: <tenant>/); needs --yes" },
    { name: "yes", kind: "flag", description: "confirm a --prefix delete" },
  ],
  async run(command, { conversations, json }, output) {
    const conversationId = command.positionals["conversation-id"];
    const prefix = command.strings.prefix;
    if ((conversationId === undefined) === (prefix === undefined)) throw new UsageError("give a conversation id or --prefix, not both and not neither");
    if (conversationId !== undefined) {
      const expectedText = command.strings["expected-version"];
      const expectedVersion = expectedText === undefined ? undefined : BigInt(integerOption("expected-version", expectedText, 0, Number.MAX_SAFE_INTEGER));
      const deleted = await conversations.deleteConversation({ conversationId, ...(expectedVersion !== undefined ? { expectedVersion } : {}) });
      output.out(json ? JSON.stringify({ conversationId, deletedVersion: String(deleted.deletedVersion) }, undefined, 2) : `${conversationId}: ${deleted.deletedVersion === 0n ? "nothing stored" : `deleted at version ${deleted.deletedVersion}`}`);
      return;
    }
    if (command.strings["expected-version"] !== undefined) throw new UsageError("--expected-version is for one conversation, not a --prefix");
    if (!command.flags.yes) throw new UsageError(`--prefix ${prefix} deletes every conversation under it: add --yes`);
    let deleted = 0;
    let pageToken = "";
    do {
      const page = await conversations.deleteConversations({ prefix: prefix!, pageToken });
      deleted += page.deleted;
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
    output.out(json ? JSON.stringify({ prefix, deleted }, undefined, 2) : `${deleted} conversations under "${prefix}" deleted`);
  },
};

/** Every subcommand. A new one is one more entry. */
export const subcommands: Subcommand<AdminContext>[] = [list, show, usage, fork, exportStates, remove];

/**
 * Runs `contextd conversations <argv>`; answers the exit code: 0 done, 1 the sidecar refused or
 * could not be reached (the gRPC code and message printed), 2 a usage mistake (with the help).
 */
export async function runConversationsCommand(argv: string[], env: NodeJS.ProcessEnv, output: CommandOutput = { out: (text) => console.log(text), err: (text) => console.error(text) }): Promise<number> {
  const [name, ...rest] = argv;
  const subcommand = subcommands.find((entry) => entry.name === name);
  if (!subcommand) {
    if (name === undefined || name === "--help" || name === "-h" || name === "help") {
      output.out(helpText(program, subcommands, sharedOptions));
      return name === undefined ? 2 : 0;
    }
    output.err(`${program}: unknown command "${name}"; one of ${subcommands.map((entry) => entry.name).join(", ")}`);
    return 2;
  }
  try {
    const command = parseCommand(subcommand, sharedOptions, rest, env);
    if (command.flags.help) {
      output.out(helpText(program, subcommands, sharedOptions, subcommand));
      return 0;
    }
    await subcommand.run(command, { conversations: connect(command.strings), json: command.flags.json! }, output);
    return 0;
  } catch (error) {
    if (error instanceof UsageError) {
      output.err(`${program} ${subcommand.name}: ${error.message}\n\n${helpText(program, subcommands, sharedOptions, subcommand)}`);
      return 2;
    }
    const failure = ConnectError.from(error);
    output.err(`${program} ${subcommand.name}: ${Code[failure.code].replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase()}: ${failure.rawMessage}`);
    return 1;
  }
}

function connect(strings: Record<string, string | undefined>): Client<typeof ConversationService> {
  const address = strings.address!;
  const baseUrl = /^https?:\/\//.test(address) ? address : `http://${address}`;
  if (strings["ca-file"] !== undefined && !baseUrl.startsWith("https://")) throw new UsageError(`--ca-file is for an https:// address, not ${address}`);
  const token = strings.token ?? "";
  const bearer: Interceptor = (next) => (request) => {
    if (token !== "") request.header.set("authorization", `Bearer ${token}`);
    return next(request);
  };
  const ca = strings["ca-file"] === undefined ? undefined : readFileSync(strings["ca-file"], "utf8");
  return createClient(ConversationService, createGrpcTransport({ baseUrl, interceptors: [bearer], ...(ca !== undefined ? { nodeOptions: { ca } } : {}) }));
}

function integerOption(name: string, text: string, least: number, most: number): number {
  const value = Number(text);
  if (!Number.isInteger(value) || value < least || value > most) throw new UsageError(`--${name} ${text}: expected an integer from ${least} to ${most}`);
  return value;
}

/** Unix milliseconds from an ISO 8601 time or a number of milliseconds. */
function timeOption(name: string, text: string): bigint {
  if (/^\d+$/.test(text)) return BigInt(text);
  const ms = Date.parse(text);
  if (Number.isNaN(ms) || ms < 0) throw new UsageError(`--${name} ${text}: expected an ISO 8601 time (2026-01-31T12:00:00Z) or Unix milliseconds`);
  return BigInt(ms);
}

function timeText(unixMs: bigint): string {
  return unixMs === 0n ? "-" : new Date(Number(unixMs)).toISOString();
}

function labelsText(labels: Record<string, string>): string {
  return Object.entries(labels)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([key, value]) => `${key}=${value}`)
    .join(",");
}

function providerText(provider: Provider): string {
  return (Provider[provider] ?? String(provider)).toLowerCase();
}

function totalsRows(totals: UsageTotals | undefined): [string, string][] {
  return [
    ["reports", String(totals?.reports ?? 0n)],
    ["input tokens", String(totals?.inputTokens ?? 0n)],
    ["cached tokens", String(totals?.cachedInputTokens ?? 0n)],
    ["output tokens", String(totals?.outputTokens ?? 0n)],
    ["compiled", String(totals?.compiledTokens ?? 0n)],
    ["first report", timeText(totals?.firstReportedAtUnixMs ?? 0n)],
    ["last report", timeText(totals?.lastReportedAtUnixMs ?? 0n)],
  ];
}
