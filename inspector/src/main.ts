import { Code, ConnectError } from "@connectrpc/connect";
import { html } from "htm/preact";
import { render } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import {
  CompileResultPart,
  TransformationAction,
  TransformationReason,
  type CompileResult,
  type Transformation,
} from "#gen/contextd/v1/compile_pb";
import { ConversationOrder, type Change, type ConversationSummary } from "#gen/contextd/v1/conversation_service_pb";
import { Provider, type Message } from "#gen/contextd/v1/message_pb";
import { Segment, type ConversationState } from "#gen/contextd/v1/state_pb";
import type { GetUsageResponse, UsageTotals } from "#gen/contextd/v1/usage_ledger_pb";
import { contexts, conversations, credentials } from "./api.js";
import { groupToolRounds, isSummary, partText, roleName } from "./messages.js";
import "./style.css";

type Tab = "messages" | "compile" | "usage";
/** `at`: the version the messages tab shows, as typed in the address (checked by the page); absent = the latest. */
type Route = { page: "list" } | { page: "conversation"; id: string; tab: Tab; at: string | undefined };

function routeOf(hash: string): Route {
  const match = /^#\/c\/([^?]+)(?:\?(.*))?$/.exec(hash);
  if (!match) return { page: "list" };
  const query = new URLSearchParams(match[2] ?? "");
  const tab = query.get("tab");
  return { page: "conversation", id: decodeURIComponent(match[1]!), tab: tab === "compile" || tab === "usage" ? tab : "messages", at: query.get("at") ?? undefined };
}

/** A page's address; `at` (a past version) only on the messages tab, the one that reads past versions. */
function conversationHref(id: string, tab: Tab = "messages", at?: bigint): string {
  const query = tab !== "messages" ? `?tab=${tab}` : at !== undefined ? `?at=${at}` : "";
  return `#/c/${encodeURIComponent(id)}${query}`;
}

/** Labels as people read them, sorted by key. */
function labelsText(labels: Record<string, string>): string {
  return Object.entries(labels)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([key, value]) => `${key}=${value}`)
    .join(", ");
}

/** A ledger's totals in one line: reports, then input (cached), output tokens. */
function usageText(totals: UsageTotals | undefined): string {
  if (!totals || totals.reports === 0n) return "none reported";
  return `${totals.reports} reports: ${totals.inputTokens} in (${totals.cachedInputTokens} cached), ${totals.outputTokens} out`;
}

/**
 * The usage totals of the listed conversations, one GetUsage each (at most the rows shown, read
 * when the list is read, not on every refresh). A sidecar without a ledger answers UNIMPLEMENTED:
 * the column then says so once instead of failing the list.
 */
async function readUsageTotals(ids: string[]): Promise<Map<string, UsageTotals | "off">> {
  const read = await Promise.all(
    ids.map(async (conversationId): Promise<[string, UsageTotals | "off"]> => {
      try {
        return [conversationId, (await conversations.getUsage({ conversationId })).totals!];
      } catch (failure) {
        if (failure instanceof ConnectError && failure.code === Code.Unimplemented) return [conversationId, "off"];
        throw failure;
      }
    }),
  );
  return new Map(read);
}

function errorText(error: unknown): string {
  return error instanceof ConnectError ? `${ConnectError.from(error).code === 16 ? "unauthenticated" : "error"}: ${error.rawMessage}` : String(error);
}

function App() {
  const [route, setRoute] = useState(routeOf(location.hash));
  useEffect(() => {
    const changed = () => setRoute(routeOf(location.hash));
    addEventListener("hashchange", changed);
    return () => removeEventListener("hashchange", changed);
  }, []);
  const [token, setToken] = useState(credentials.token);
  const [generation, setGeneration] = useState(0);
  return html`
    <header>
      <a href="#/" class="brand">contextd inspector</a>
      <form
        class="token"
        onSubmit=${(event: Event) => {
          event.preventDefault();
          credentials.token = token.trim();
          setGeneration(generation + 1);
        }}
      >
        <input type="password" placeholder="bearer token (when auth is on)" value=${token} onInput=${(event: Event) => setToken((event.target as HTMLInputElement).value)} data-testid="token" />
        <button type="submit">use token</button>
      </form>
    </header>
    <main key=${generation}>
      ${route.page === "list" ? html`<${ConversationList} />` : html`<${ConversationPage} id=${route.id} tab=${route.tab} at=${route.tab === "messages" ? route.at : undefined} />`}
    </main>
  `;
}

/** How often the list reads itself again while the tab is visible (and on focus). */
const listRefreshMs = 3_000;
/** The most a refresh re-reads: the rows shown, up to ListConversations' largest page. */
const listRefreshMax = 1_000;

/** A listing's update time for people; conversations last written before the sidecar kept it have none. */
function updatedText(summary: ConversationSummary): string {
  return summary.updatedAtUnixMs === 0n ? "unknown" : new Date(Number(summary.updatedAtUnixMs)).toLocaleString();
}

function ConversationList() {
  const [prefix, setPrefix] = useState(sessionStorage.getItem("contextd-inspector-prefix") ?? "");
  const [items, setItems] = useState<ConversationSummary[] | undefined>();
  const [next, setNext] = useState("");
  const [error, setError] = useState("");
  const [readAt, setReadAt] = useState<Date | undefined>();
  const [usage, setUsage] = useState<Map<string, UsageTotals | "off">>(new Map());
  const shown = useRef({ prefix, count: 100 });
  const load = async (pageToken: string) => {
    // What the refresh reads from now on, also when this read fails (it then keeps saying why).
    if (pageToken === "") shown.current = { prefix, count: 100 };
    try {
      const page = await conversations.listConversations({ prefix, pageSize: 100, pageToken, order: ConversationOrder.UPDATED_DESC });
      const all = [...(pageToken === "" ? [] : (items ?? [])), ...page.conversations];
      if (shown.current.prefix !== prefix) return;
      shown.current = { prefix, count: Math.max(100, all.length) };
      setItems(all);
      setNext(page.nextPageToken);
      setReadAt(new Date());
      setError("");
      const totals = await readUsageTotals(page.conversations.map((item) => item.conversationId));
      setUsage((known) => new Map([...(pageToken === "" ? [] : known), ...totals]));
    } catch (failure) {
      setItems(undefined);
      setError(errorText(failure));
    }
  };
  useEffect(() => {
    void load("");
    // Live: the rows shown are read again (one page, at most listRefreshMax) every few seconds
    // while the tab is visible, and when it gets focus.
    let reading = false;
    const refresh = async () => {
      if (reading || document.hidden) return;
      reading = true;
      try {
        const { prefix: listed, count } = shown.current;
        const page = await conversations.listConversations({ prefix: listed, pageSize: Math.min(count, listRefreshMax), order: ConversationOrder.UPDATED_DESC });
        if (shown.current.prefix !== listed) return;
        setItems(page.conversations);
        setNext(page.nextPageToken);
        setReadAt(new Date());
        setError("");
      } catch (failure) {
        // The last rows stay for a failure that passes (the sidecar restarting); a refusal says why in place of them.
        if (failure instanceof ConnectError && (failure.code === Code.PermissionDenied || failure.code === Code.Unauthenticated)) setItems(undefined);
        setError(errorText(failure));
      } finally {
        reading = false;
      }
    };
    const timer = setInterval(() => void refresh(), listRefreshMs);
    addEventListener("focus", refresh);
    return () => {
      clearInterval(timer);
      removeEventListener("focus", refresh);
    };
  }, []);
  return html`
    <section>
      <h1>Conversations</h1>
      <form
        class="row"
        onSubmit=${(event: Event) => {
          event.preventDefault();
          sessionStorage.setItem("contextd-inspector-prefix", prefix);
          void load("");
        }}
      >
        <input placeholder="id prefix (optional: a tenant's token lists its tenant)" value=${prefix} onInput=${(event: Event) => setPrefix((event.target as HTMLInputElement).value)} data-testid="prefix" />
        <button type="submit">list</button>
      </form>
      ${error && html`<p class="error" data-testid="error">${error}</p>`}
      ${readAt && html`<p class="note" data-testid="list-read-at">newest update first, read again every ${listRefreshMs / 1000} s; last read ${readAt.toLocaleTimeString()}</p>`}
      ${items &&
      html`<table data-testid="conversations">
        <thead><tr><th>conversation</th><th>title</th><th>labels</th><th>updated</th><th>version</th><th>usage</th></tr></thead>
        <tbody>
          ${items.map(
            (item) =>
              html`<tr>
                <td><a href=${conversationHref(item.conversationId)}>${item.conversationId}</a></td>
                <td>${item.title}</td>
                <td class="labels" data-testid="labels">${labelsText(item.labels)}</td>
                <td class="updated" data-updated=${String(item.updatedAtUnixMs)}>${updatedText(item)}</td>
                <td class="number">${String(item.version)}</td>
                <td class="usage" data-testid="usage">${((totals) => (totals === "off" ? "no ledger" : totals === undefined ? "…" : usageText(totals)))(usage.get(item.conversationId))}</td>
              </tr>`,
          )}
        </tbody>
      </table>
      ${items.length === 0 && html`<p>No conversations${prefix ? ` under "${prefix}"` : ""}.</p>`}
      ${next && html`<button onClick=${() => load(next)}>more</button>`}`}
    </section>
  `;
}

/** How many of the newest history messages the page shows at first, and how many more each "earlier" adds. */
const historyStep = 200;

/**
 * What the messages tab shows, read with ReadMessages and GetState without messages, all at one
 * version: the system, memory and tools segments whole, the newest `historyShown` history
 * messages, experiences and artifacts. A conversation over the message limit, which GetState
 * refuses whole, shows the same way, and a long one costs what is on the screen.
 */
interface ConversationView {
  state: ConversationState;
  system: Message[];
  memory: Message[];
  tools: Message[];
  history: Message[];
  historyTotal: bigint;
}

async function readSegment(conversationId: string, segment: Segment, version: bigint, last: number, signal: AbortSignal): Promise<{ messages: Message[]; total: bigint }> {
  const messages: Message[] = [];
  let total = 0n;
  let pageToken = "";
  do {
    const page = await conversations.readMessages({ conversationId, segment, version, last, pageToken }, { signal });
    messages.push(...page.messages);
    const sizes = page.segmentSizes;
    total = segment === Segment.HISTORY ? (sizes?.history ?? 0n) : segment === Segment.SYSTEM ? (sizes?.system ?? 0n) : segment === Segment.MEMORY ? (sizes?.memory ?? 0n) : (sizes?.tools ?? 0n);
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
  return { messages, total };
}

async function readView(conversationId: string, historyShown: number, signal: AbortSignal): Promise<ConversationView> {
  const state = (await conversations.getState({ conversationId, withoutMessages: true }, { signal })).state!;
  // Pinned to the version just read; one that has moved on since is ABORTED and read again by the next change's refresh.
  const [system, memory, tools, history] = await Promise.all(
    [Segment.SYSTEM, Segment.MEMORY, Segment.TOOLS, Segment.HISTORY].map((segment) =>
      readSegment(conversationId, segment, state.version, segment === Segment.HISTORY ? historyShown : 0, signal),
    ),
  );
  return { state, system: system!.messages, memory: memory!.messages, tools: tools!.messages, history: history!.messages, historyTotal: history!.total };
}

/**
 * A past version for the messages tab, from GetState with `at_version`: the sidecar rebuilds it
 * from the change log, so it comes whole (a state over the message limit is refused, and says
 * so) and of its history the newest `historyShown` are shown, as for the latest version.
 */
async function readViewAt(conversationId: string, atVersion: bigint, historyShown: number, signal: AbortSignal): Promise<ConversationView> {
  const state = (await conversations.getState({ conversationId, atVersion }, { signal })).state!;
  const history = state.history.slice(Math.max(0, state.history.length - historyShown));
  return { state, system: state.system, memory: state.memory, tools: state.tools, history, historyTotal: BigInt(state.history.length) };
}

/** The `at` of an address as a version, or why it is not one. */
function versionOf(at: string | undefined): { version: bigint | undefined; problem: string } {
  if (at === undefined) return { version: undefined, problem: "" };
  if (!/^\d{1,18}$/.test(at)) return { version: undefined, problem: `version "${at}" in the address is not a version: a whole number from 0 (the empty state) to the latest` };
  return { version: BigInt(at), problem: "" };
}

function ConversationPage({ id, tab, at }: { id: string; tab: Tab; at: string | undefined }) {
  const { version: atVersion, problem: atProblem } = versionOf(at);
  const [view, setView] = useState<ConversationView | undefined>();
  const [versionError, setVersionError] = useState("");
  const [historyShown, setHistoryShown] = useState(historyStep);
  const [changes, setChanges] = useState<Change[]>([]);
  const [error, setError] = useState("");
  const [live, setLive] = useState(false);
  // A new id is a new page: nothing of the previous conversation stays (its versions and keys
  // were listed under the next one's), and nothing its calls still answer is shown. Another
  // version is another view too: the one shown before must not pass for it while it is read.
  useEffect(() => {
    setView(undefined);
    setError("");
    setVersionError("");
    setHistoryShown(historyStep);
  }, [id, at]);
  useEffect(() => {
    // The watch below replays from version 0, so the timeline starts empty each time it starts.
    setChanges([]);
    setLive(false);
    const stop = new AbortController();
    let refreshing: Promise<void> | undefined;
    let again = false;
    const refresh = (): Promise<void> => {
      if (refreshing) {
        // A change landed while reading: read once more after this read.
        again = true;
        return refreshing;
      }
      if (atProblem !== "") return Promise.resolve();
      refreshing = (atVersion === undefined ? readView(id, historyShown, stop.signal) : readViewAt(id, atVersion, historyShown, stop.signal))
        .then((read) => {
          if (stop.signal.aborted) return;
          setView(read);
          setError("");
          setVersionError("");
        })
        .catch((failure: unknown) => {
          if (stop.signal.aborted || (failure instanceof ConnectError && failure.code === Code.Aborted)) return;
          // A version outside the history window (or past the latest): the sidecar's OUT_OF_RANGE
          // names the oldest readable one; it replaces the view rather than leave the page blank.
          if (atVersion !== undefined && failure instanceof ConnectError && failure.code === Code.OutOfRange) setVersionError(failure.rawMessage);
          else setError(errorText(failure));
        })
        .finally(() => {
          refreshing = undefined;
          if (again && !stop.signal.aborted) {
            again = false;
            void refresh();
          }
        });
      return refreshing;
    };
    void refresh();
    // Every version from the first, then live ones: the timeline, and a reload of what is shown per change.
    (async () => {
      try {
        for await (const response of conversations.watch({ conversationId: id, fromVersion: 0n }, { signal: stop.signal })) {
          if (stop.signal.aborted) break;
          setLive(true);
          if (response.kind.case !== "change") continue;
          const change = response.kind.value;
          setChanges((known) => (known.some((seen) => seen.version === change.version) ? known : [...known, change]));
          // A past version does not change: only the latest is read again per change.
          if (atVersion === undefined) void refresh();
        }
      } catch (failure) {
        if (!stop.signal.aborted) setError(errorText(failure));
      } finally {
        if (!stop.signal.aborted) setLive(false);
      }
    })();
    return () => stop.abort();
  }, [id, historyShown, at]);
  const state = view?.state;
  // Version 0 is the one a conversation has before its first commit: nothing is stored under the
  // id (a cleared one is past 0). Watch stays open, so a first commit still shows up. (Version 0
  // asked for is the empty state every conversation starts from.)
  const missing = atVersion === undefined && state !== undefined && state.version === 0n;
  const latest = changes.reduce((newest, change) => (change.version > newest ? change.version : newest), 0n);
  const origin = state?.forkedFrom;
  return html`
    <section>
      <h1><span data-testid="conversation-id">${id}</span> <span class="version" data-testid="version">${missing ? "no such conversation" : `v${state ? String(state.version) : atVersion !== undefined ? String(atVersion) : "…"}`}</span> ${atVersion !== undefined ? html`<span class="past" data-testid="past">earlier version${latest > 0n ? ` (latest v${latest})` : ""}</span>` : live && html`<span class="live" data-testid="live">live</span>`}</h1>
      <nav class="tabs">
        <a href=${conversationHref(id)} class=${tab === "messages" ? "active" : ""}>messages</a>
        <a href=${conversationHref(id, "compile")} class=${tab === "compile" ? "active" : ""}>compile</a>
        <a href=${conversationHref(id, "usage")} class=${tab === "usage" ? "active" : ""}>usage</a>
      </nav>
      ${state && !missing && html`<p class="metadata"><span data-testid="title">${state.title === "" ? "untitled" : state.title}</span>${Object.keys(state.labels).length > 0 && html` · <span data-testid="conversation-labels">${labelsText(state.labels)}</span>`}</p>`}
      ${origin && html`<p class="origin" data-testid="forked-from">forked from <a href=${conversationHref(origin.conversationId, "messages", origin.version)} data-testid="fork-source">${origin.conversationId}</a> at <span data-testid="fork-version">v${String(origin.version)}</span></p>`}
      ${tab === "messages" && !missing && html`<${VersionPicker} id=${id} at=${atVersion} latest=${latest} />`}
      ${error && html`<p class="error" data-testid="error">${error}</p>`}
      ${atProblem && html`<p class="error" data-testid="version-error">${atProblem}</p>`}
      ${versionError && html`<p class="error" data-testid="version-error">version ${at} cannot be read: ${versionError}</p>`}
      <div class="columns">
        <${Timeline} id=${id} changes=${changes} viewing=${atVersion ?? (latest > 0n ? latest : undefined)} />
        <div class="main">
          ${missing
            ? html`<p data-testid="not-found">No such conversation: nothing is stored under "${id}" (version 0). A first commit to it shows up here.</p>`
            : tab === "messages"
              ? view && html`<${StateView} view=${view} onEarlier=${() => setHistoryShown((shown) => shown + historyStep)} />`
              : tab === "compile"
                ? html`<${CompileView} id=${id} version=${state?.version} known=${view} />`
                : html`<${UsageView} id=${id} version=${state?.version} />`}
        </div>
      </div>
    </section>
  `;
}

/**
 * The conversation's usage ledger: its totals and its kept reports, one row per report (per turn
 * where the report named it). Read again with each new version (a turn's report usually follows
 * its commit) and with the button; reports carry no version of their own.
 */
function UsageView({ id, version }: { id: string; version: bigint | undefined }) {
  const [ledger, setLedger] = useState<GetUsageResponse | undefined>();
  const [error, setError] = useState("");
  const [readAt, setReadAt] = useState<Date | undefined>();
  const read = async () => {
    try {
      setLedger(await conversations.getUsage({ conversationId: id }));
      setReadAt(new Date());
      setError("");
    } catch (failure) {
      setError(failure instanceof ConnectError && failure.code === Code.Unimplemented ? "this sidecar keeps no usage ledger (--usage-entries-per-conversation 0)" : errorText(failure));
    }
  };
  useEffect(() => void read(), [id, version]);
  const totals = ledger?.totals;
  return html`
    <div data-testid="usage-view">
      ${error && html`<p class="error" data-testid="usage-error">${error}</p>`}
      ${ledger &&
      html`<h2>totals <button class="more" onClick=${() => void read()}>read again</button></h2>
        <table data-testid="usage-totals">
          <tbody>
            <tr><th>reports</th><td class="number" data-testid="usage-reports">${String(totals?.reports ?? 0n)}</td></tr>
            <tr><th>input tokens</th><td class="number" data-testid="usage-input">${String(totals?.inputTokens ?? 0n)}</td></tr>
            <tr><th>cached input tokens</th><td class="number" data-testid="usage-cached">${String(totals?.cachedInputTokens ?? 0n)}</td></tr>
            <tr><th>output tokens</th><td class="number" data-testid="usage-output">${String(totals?.outputTokens ?? 0n)}</td></tr>
            <tr><th>compiled (estimated) tokens</th><td class="number" data-testid="usage-compiled">${String(totals?.compiledTokens ?? 0n)}</td></tr>
          </tbody>
        </table>
        ${readAt && html`<p class="note">read ${readAt.toLocaleTimeString()}${ledger.entriesRolledUp > 0n ? `; ${ledger.entriesRolledUp} older reports are counted in the totals only` : ""}</p>`}
        <h2>per turn <small>${ledger.entries.length}</small></h2>
        ${ledger.entries.length === 0
          ? html`<p data-testid="usage-none">No usage reported for this conversation (ReportUsage with its conversation_id).</p>`
          : html`<table class="records" data-testid="usage-entries">
              <thead><tr><th>reported</th><th>turn</th><th>provider</th><th>model</th><th>input</th><th>cached</th><th>output</th><th>compiled</th><th>report</th></tr></thead>
              <tbody>
                ${ledger.entries.map(
                  (entry) => html`<tr>
                    <td>${new Date(Number(entry.reportedAtUnixMs)).toLocaleString()}</td>
                    <td class="turn">${entry.turnId}</td>
                    <td>${Provider[entry.provider]?.toLowerCase() ?? String(entry.provider)}</td>
                    <td>${entry.model}</td>
                    <td class="number">${String(entry.inputTokens)}</td>
                    <td class="number">${String(entry.cachedInputTokens)}</td>
                    <td class="number">${String(entry.outputTokens)}</td>
                    <td class="number">${String(entry.compiledTokens)}</td>
                    <td class="id">${entry.reportId}</td>
                  </tr>`,
                )}
              </tbody>
            </table>`}`}
    </div>
  `;
}

/** The messages tab at another version: typed, or "latest" to follow the conversation live again. */
function VersionPicker({ id, at, latest }: { id: string; at: bigint | undefined; latest: bigint }) {
  const [typed, setTyped] = useState(at === undefined ? "" : String(at));
  useEffect(() => setTyped(at === undefined ? "" : String(at)), [at]);
  return html`<form
    class="row picker"
    onSubmit=${(event: Event) => {
      event.preventDefault();
      const value = typed.trim();
      location.hash = value === "" ? conversationHref(id) : `#/c/${encodeURIComponent(id)}?at=${encodeURIComponent(value)}`;
    }}
  >
    <label>show version <input type="number" min="0" class="small" placeholder=${latest > 0n ? String(latest) : ""} value=${typed} onInput=${(event: Event) => setTyped((event.target as HTMLInputElement).value)} data-testid="version-picker" /></label>
    <button type="submit" data-testid="show-version">show</button>
    ${at !== undefined && html`<a href=${conversationHref(id)} data-testid="latest">latest (live)</a>`}
  </form>`;
}

/** What a change was, for the timeline: a rewind and a fork's first version carry no deltas of their own. */
function changeText(change: Change) {
  if (change.rewoundToVersion !== undefined) return html`<span class="mark" data-testid="rewound">rewound to version ${String(change.rewoundToVersion)}</span>`;
  if (change.forkedFrom) return html`<span class="mark" data-testid="fork-start">forked from ${change.forkedFrom.conversationId} at v${String(change.forkedFrom.version)}</span>`;
  return change.cleared ? "cleared" : change.deltas.map((delta) => delta.operation.case ?? "?").join(", ");
}

function Timeline({ id, changes, viewing }: { id: string; changes: Change[]; viewing: bigint | undefined }) {
  const latest = changes.reduce((newest, change) => (change.version > newest ? change.version : newest), 0n);
  // The newest version links to the live page; an older one to that version's messages.
  return html`
    <aside class="timeline" data-testid="timeline">
      <h2>Versions</h2>
      <ol>
        ${[...changes].reverse().map(
          (change) => html`<li data-version=${String(change.version)} class=${change.version === viewing ? "viewing" : ""}>
            <a href=${conversationHref(id, "messages", change.version === latest ? undefined : change.version)} class="version-link"><strong>v${String(change.version)}</strong></a>
            <time>${new Date(Number(change.committedAtUnixMs)).toLocaleTimeString()}</time>
            <div class="deltas">${changeText(change)}</div>
            ${change.idempotencyKey && html`<div class="key" title=${change.idempotencyKey} data-testid="idempotency-key">key ${change.idempotencyKey}</div>`}
          </li>`,
        )}
      </ol>
    </aside>
  `;
}

const segments: [string, "system" | "memory" | "tools" | "history"][] = [
  ["system", "system"],
  ["memory", "memory"],
  ["tools", "tools"],
  ["history", "history"],
];

function StateView({ view, onEarlier }: { view: ConversationView; onEarlier: () => void }) {
  const { state } = view;
  const hidden = view.historyTotal - BigInt(view.history.length);
  return html`
    <div data-testid="messages">
      ${segments.map(([title, field]) =>
        view[field].length === 0
          ? null
          : html`<h2>${title} <small>${field === "history" ? String(view.historyTotal) : view[field].length}</small></h2>
              ${field === "history"
                ? html`${hidden > 0n &&
                    html`<p data-testid="history-window">the newest ${view.history.length} of ${String(view.historyTotal)} shown
                      <button data-testid="earlier" onClick=${onEarlier}>${String(hidden < BigInt(historyStep) ? hidden : BigInt(historyStep))} earlier</button></p>`}
                  ${groupToolRounds(view.history).map((item) =>
                    item.kind === "message"
                      ? html`<${MessageView} message=${item.message} />`
                      : html`<div class="round" data-testid="tool-round">
                          <div class="round-title">tool round: ${item.call.parts.filter((part) => part.kind.case === "toolCall").length} call(s), ${item.results.length} result(s)</div>
                          <${MessageView} message=${item.call} />
                          ${item.results.map((result) => html`<${MessageView} message=${result} />`)}
                        </div>`,
                  )}`
                : view[field].map((message) => html`<${MessageView} message=${message} />`)}`,
      )}
      ${state.experiences.length > 0 &&
      html`<h2>experiences <small>${state.experiences.length}</small></h2>
        ${state.experiences.map((experience) => html`<div class="message experience" data-testid="experience"><span class="badge">experience</span> ${experience.text}</div>`)}`}
      ${state.artifacts.length > 0 && html`<h2>artifacts <small>${state.artifacts.length}</small></h2>`}
    </div>
  `;
}

function MessageView({ message }: { message: Message }) {
  const summary = isSummary(message);
  return html`<div class=${`message ${roleName(message.role)}${summary ? " summary" : ""}`} data-testid="message" data-id=${message.id}>
    <span class="role">${roleName(message.role)}</span>
    ${summary && html`<span class="badge" data-testid="summary">summary</span>`}
    <${LongText} text=${message.parts.map(partText).join(" ")} />
    <span class="id">${message.id}</span>
  </div>`;
}

/** Text over this many lines or characters shows its start and a "show all" button. */
const collapsedLines = 6;
const collapsedCharacters = 600;

/** A message's text, collapsed to its first lines when long, so one 20 KB tool result does not fill the screen. */
function LongText({ text }: { text: string }) {
  const [open, setOpen] = useState(false);
  const lines = text.split("\n", collapsedLines + 1);
  const long = lines.length > collapsedLines || text.length > collapsedCharacters;
  if (!long || open) {
    return html`<span class="text">${text}${long && html` <button class="more" data-testid="show-less" onClick=${() => setOpen(false)}>show less</button>`}</span>`;
  }
  const start = lines.slice(0, collapsedLines).join("\n").slice(0, collapsedCharacters);
  return html`<span class="text collapsed" data-testid="collapsed">${start}… <button class="more" data-testid="show-all" onClick=${() => setOpen(true)}>show all (${sizeText(text)})</button></span>`;
}

function sizeText(text: string): string {
  const bytes = new TextEncoder().encode(text).length;
  return bytes < 1024 ? `${bytes} bytes` : `${(bytes / 1024).toFixed(1)} KB`;
}

const providers: [string, Provider][] = [
  ["none (payload only)", Provider.UNSPECIFIED],
  ["openai chat", Provider.OPENAI_CHAT],
  ["openai responses", Provider.OPENAI_RESPONSES],
  ["anthropic messages", Provider.ANTHROPIC_MESSAGES],
  ["gemini", Provider.GEMINI],
];

/**
 * What happened to a message, in the one vocabulary of the records (docs/errors.md, "One
 * vocabulary"): sent (PASSED), sent changed (FORMATTED, clearing included) or dropped (DROPPED,
 * whatever dropped it: the reason column says which). Trimming is what the budget does to history;
 * the messages it leaves out are dropped.
 */
function outcome(record: Transformation): "sent" | "sent changed" | "dropped" {
  if (record.action === TransformationAction.DROPPED) return "dropped";
  return record.action === TransformationAction.FORMATTED ? "sent changed" : "sent";
}

const outcomeClass = { sent: "sent", "sent changed": "changed", dropped: "dropped" } as const;

function reasonText(reason: TransformationReason): string {
  return (TransformationReason[reason] ?? String(reason)).toLowerCase().replaceAll("_", " ");
}

/** One line of a message for a table row: its text with whitespace folded, cut at `length` characters. */
function excerpt(message: Message, length = 120): string {
  const text = message.parts.map(partText).join(" ").replace(/\s+/g, " ").trim();
  return text.length > length ? `${text.slice(0, length)}…` : text;
}

/** The rows the compile view's table shows before "show all": a long conversation's records are thousands. */
const rowsShown = 500;

/** The most history messages a compile view reads to name the dropped messages the page has not read. */
const namingReadMax = 1_000;

/** The settings of the compile form that are not a plain number. */
interface ClearingForm {
  toolResults: boolean;
  triggerTokens: string;
  keepRecent: string;
  clearAtLeastTokens: string;
  excludeTools: string;
  clearInputs: boolean;
  reasoning: boolean;
  keepRecentTurns: string;
}

const noClearing: ClearingForm = { toolResults: false, triggerTokens: "0", keepRecent: "3", clearAtLeastTokens: "0", excludeTools: "", clearInputs: false, reasoning: false, keepRecentTurns: "1" };

function CompileView({ id, version, known }: { id: string; version: bigint | undefined; known: ConversationView | undefined }) {
  const [maxTokens, setMaxTokens] = useState("2000");
  const [provider, setProvider] = useState(Provider.OPENAI_CHAT);
  const [model, setModel] = useState("gpt-4o");
  const [clearing, setClearing] = useState<ClearingForm>(noClearing);
  const [result, setResult] = useState<CompileResult | undefined>();
  const [messages, setMessages] = useState<Map<string, Message>>(new Map());
  const [previousFingerprint, setPreviousFingerprint] = useState<string | undefined>();
  const [error, setError] = useState("");
  const set = (field: keyof ClearingForm) => (event: Event) => {
    const input = event.target as HTMLInputElement;
    setClearing({ ...clearing, [field]: input.type === "checkbox" ? input.checked : input.value });
  };
  const run = async () => {
    setError("");
    try {
      const response = await contexts.compile({
        conversationId: id,
        budget: {
          maxTokens: BigInt(maxTokens || "0"),
          toolResultClearing: clearing.toolResults
            ? {
                triggerTokens: BigInt(clearing.triggerTokens || "0"),
                keepRecent: Number(clearing.keepRecent || "0"),
                clearAtLeastTokens: BigInt(clearing.clearAtLeastTokens || "0"),
                excludeTools: clearing.excludeTools.split(",").map((name) => name.trim()).filter((name) => name !== ""),
                clearInputs: clearing.clearInputs,
              }
            : undefined,
          reasoningClearing: clearing.reasoning ? { keepRecentTurns: Number(clearing.keepRecentTurns || "0") } : undefined,
        },
        render: provider === Provider.UNSPECIFIED ? undefined : { provider, model },
        include: [CompileResultPart.ALL_TRANSFORMATIONS, CompileResultPart.MESSAGE_TOKENS, CompileResultPart.PAYLOAD],
      });
      const compiled = response.result!;
      setPreviousFingerprint(result?.prefixFingerprint);
      setMessages(await nameMessages(id, compiled, known));
      setResult(compiled);
    } catch (failure) {
      setError(errorText(failure));
    }
  };
  const number = (field: keyof ClearingForm, label: string, testId: string) =>
    html`<label>${label} <input type="number" min="0" class="small" value=${clearing[field] as string} onInput=${set(field)} data-testid=${testId} /></label>`;
  return html`
    <div class="compile">
      <form
        onSubmit=${(event: Event) => {
          event.preventDefault();
          void run();
        }}
      >
        <div class="row">
          <label>budget <input type="number" min="0" value=${maxTokens} onInput=${(event: Event) => setMaxTokens((event.target as HTMLInputElement).value)} data-testid="budget" /></label>
          <label>provider
            <select value=${provider} onChange=${(event: Event) => setProvider(Number((event.target as HTMLSelectElement).value) as Provider)} data-testid="provider">
              ${providers.map(([name, value]) => html`<option value=${value}>${name}</option>`)}
            </select>
          </label>
          <label>model <input value=${model} onInput=${(event: Event) => setModel((event.target as HTMLInputElement).value)} /></label>
          <button type="submit" data-testid="run-compile">compile v${version === undefined ? "…" : String(version)}</button>
        </div>
        <fieldset class="row">
          <label><input type="checkbox" checked=${clearing.toolResults} onChange=${set("toolResults")} data-testid="clear-tool-results" /> clear old tool results</label>
          ${clearing.toolResults &&
          html`${number("triggerTokens", "over (tokens, 0 = the budget)", "clear-trigger")}
            ${number("keepRecent", "keep the newest", "clear-keep-recent")}
            ${number("clearAtLeastTokens", "free at least (tokens)", "clear-at-least")}
            <label>except tools <input placeholder="name, name" value=${clearing.excludeTools} onInput=${set("excludeTools")} data-testid="clear-exclude" /></label>
            <label><input type="checkbox" checked=${clearing.clearInputs} onChange=${set("clearInputs")} /> their calls' arguments too</label>`}
        </fieldset>
        <fieldset class="row">
          <label><input type="checkbox" checked=${clearing.reasoning} onChange=${set("reasoning")} data-testid="clear-reasoning" /> clear old reasoning</label>
          ${clearing.reasoning && number("keepRecentTurns", "keep the last turns'", "reasoning-keep-turns")}
        </fieldset>
      </form>
      ${error && html`<p class="error" data-testid="error">${error}</p>`}
      ${result && html`<${CompileResultView} result=${result} messages=${messages} previousFingerprint=${previousFingerprint} />`}
    </div>
  `;
}

/**
 * The messages a compile's records name, by id: as sent, from the compile's payload; the others
 * (dropped) as stored, from what the page has read, or else from one read of the newest history
 * at the compiled version (at most `namingReadMax` messages: older ones are named by id only).
 */
async function nameMessages(conversationId: string, result: CompileResult, known: ConversationView | undefined): Promise<Map<string, Message>> {
  const named = new Map<string, Message>();
  const payload = result.payload;
  if (payload) for (const message of [...payload.system, ...payload.memory, ...payload.tools, ...payload.history, ...payload.scratch]) named.set(message.id, message);
  if (known) for (const message of [...known.system, ...known.memory, ...known.tools, ...known.history]) if (!named.has(message.id)) named.set(message.id, message);
  const missing = Object.keys(result.transformations).filter((messageId) => !named.has(messageId));
  if (missing.length === 0) return named;
  const historyRecords = Object.values(result.transformations).filter((record) => record.segment === Segment.HISTORY).length;
  const last = Math.min(historyRecords, namingReadMax);
  let pageToken = "";
  try {
    do {
      const page = await conversations.readMessages({ conversationId, segment: Segment.HISTORY, version: result.version, last, pageToken });
      for (const message of page.messages) if (!named.has(message.id)) named.set(message.id, message);
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
  } catch (failure) {
    // ABORTED: the conversation moved past the compiled version; its rows name those messages by id.
    if (!(failure instanceof ConnectError && failure.code === Code.Aborted)) throw failure;
  }
  return named;
}

function CompileResultView({ result, messages, previousFingerprint }: { result: CompileResult; messages: Map<string, Message>; previousFingerprint: string | undefined }) {
  const usage = result.usage!;
  const limit = Number(usage.limit) || Number(usage.total) || 1;
  const bars: [string, bigint][] = [
    ["system", usage.system],
    ["memory", usage.memory],
    ["tools", usage.tools],
    ["tool definitions", usage.toolDefinitions],
    ["history", usage.history],
    ["pending", usage.pending],
  ];
  const inDropped = usage.historyBeforeTrim - usage.clearedTokens - usage.history;
  const [allRows, setAllRows] = useState(false);
  const records = Object.entries(result.transformations);
  const rows = allRows ? records : records.slice(0, rowsShown);
  const dropped = records.filter(([, record]) => record.action === TransformationAction.DROPPED).length;
  const rendered = result.rendered ? JSON.stringify(JSON.parse(new TextDecoder().decode(result.rendered.json)), null, 2) : undefined;
  return html`
    <div data-testid="compile-result">
      <h2>Tokens <small data-testid="total">${String(usage.total)} of ${String(usage.limit)}</small></h2>
      <div class="bars">
        ${bars.map(
          ([name, count]) => html`<div class="bar-row" data-segment=${name}>
            <span class="bar-name">${name}</span>
            <span class="bar"><span class="fill" style=${`width:${Math.min(100, (Number(count) / limit) * 100)}%`}></span></span>
            <span class="number">${String(count)}</span>
          </div>`,
        )}
      </div>
      <p data-testid="trimmed">history: ${String(usage.historyBeforeTrim)} tokens before trimming, ${String(usage.history)} after (<span data-testid="cleared-tokens">${String(usage.clearedTokens)}</span> cleared, <span data-testid="dropped-tokens">${String(inDropped)}</span> in dropped messages); <strong>${dropped} message(s) dropped</strong>, ${String(result.budgetDroppedMessages)} of them by the budget.</p>
      <p data-testid="cache">
        prefix fingerprint <code>${result.prefixFingerprint.slice(0, 16)}</code>
        ${previousFingerprint === undefined ? "" : previousFingerprint === result.prefixFingerprint ? " — unchanged since the last compile: a provider prompt cache can hit" : " — changed since the last compile: a provider prompt cache will miss"}
      </p>
      ${result.cacheImpact &&
      html`<p data-testid="cache-impact">
        ${result.cacheImpact.previousVersion === 0n
          ? "no previous compile of this conversation remembered: every token is written to the provider's cache anew"
          : `against the previous compile (v${result.cacheImpact.previousVersion}): ${result.cacheImpact.unchangedPrefixTokens} tokens unchanged (${result.cacheImpact.unchangedPrefixMessages} messages), ${result.cacheImpact.rewrittenTokens} re-written`}
      </p>`}
      ${result.warnings.length > 0 && html`<ul class="warnings">${result.warnings.map((warning) => html`<li><code>${warning.code}</code> ${warning.message}</li>`)}</ul>`}
      <h2>Messages <small>${records.length}</small></h2>
      <table data-testid="records" class="records">
        <thead><tr><th>role</th><th>message</th><th class="number">tokens</th><th>segment</th><th>outcome</th><th>why</th></tr></thead>
        <tbody>
          ${rows.map(([messageId, record]) => {
            const message = messages.get(messageId);
            const tokens = result.messageTokens[messageId];
            const word = outcome(record);
            return html`<tr class=${outcomeClass[word]} data-id=${messageId} data-reason=${reasonText(record.reason)}>
              <td class="role">${message ? roleName(message.role) : ""}</td>
              <td class="excerpt" title=${messageId}>${message ? excerpt(message) : html`<span class="id">${messageId} (not read: older than the newest ${namingReadMax})</span>`}</td>
              <td class="number" data-testid="message-tokens">${tokens === undefined ? "" : String(tokens)}</td>
              <td>${(Segment[record.segment] ?? "").toLowerCase()}</td>
              <td class="outcome">${word}</td>
              <td>${reasonText(record.reason)}</td>
            </tr>`;
          })}
        </tbody>
      </table>
      ${rows.length < records.length && html`<p><button data-testid="all-rows" onClick=${() => setAllRows(true)}>show all ${records.length} messages</button> (the first ${rowsShown} shown)</p>`}
      ${rendered && html`<h2>Rendered body <small>${(Provider[result.rendered!.provider] ?? "").toLowerCase()}</small></h2><pre data-testid="rendered">${rendered}</pre>`}
    </div>
  `;
}

render(html`<${App} />`, document.getElementById("app")!);
