import { Code, ConnectError } from "@connectrpc/connect";
import { html } from "htm/preact";
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import {
  CompileResultPart,
  TransformationAction,
  TransformationReason,
  type CompileResult,
  type Transformation,
} from "../../gen/ts/contextd/v1/compile_pb.js";
import type { Change, ConversationSummary } from "../../gen/ts/contextd/v1/conversation_service_pb.js";
import { Provider, type Message } from "../../gen/ts/contextd/v1/message_pb.js";
import { Segment, type ConversationState } from "../../gen/ts/contextd/v1/state_pb.js";
import { contexts, conversations, credentials } from "./api.js";
import { groupToolRounds, isSummary, partText, roleName } from "./messages.js";
import "./style.css";

type Route = { page: "list" } | { page: "conversation"; id: string; tab: "messages" | "compile" };

function routeOf(hash: string): Route {
  const match = /^#\/c\/([^?]+)(?:\?tab=(\w+))?$/.exec(hash);
  if (!match) return { page: "list" };
  return { page: "conversation", id: decodeURIComponent(match[1]!), tab: match[2] === "compile" ? "compile" : "messages" };
}

const conversationHref = (id: string, tab = "messages") => `#/c/${encodeURIComponent(id)}${tab === "compile" ? "?tab=compile" : ""}`;

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
      ${route.page === "list" ? html`<${ConversationList} />` : html`<${ConversationPage} id=${route.id} tab=${route.tab} />`}
    </main>
  `;
}

function ConversationList() {
  const [prefix, setPrefix] = useState(sessionStorage.getItem("contextd-inspector-prefix") ?? "");
  const [items, setItems] = useState<ConversationSummary[] | undefined>();
  const [next, setNext] = useState("");
  const [error, setError] = useState("");
  const load = async (pageToken: string) => {
    setError("");
    try {
      const page = await conversations.listConversations({ prefix, pageSize: 100, pageToken });
      setItems([...(pageToken === "" ? [] : (items ?? [])), ...page.conversations]);
      setNext(page.nextPageToken);
    } catch (failure) {
      setItems(undefined);
      setError(errorText(failure));
    }
  };
  useEffect(() => void load(""), []);
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
        <input placeholder="id prefix (a tenant's token needs tenant/)" value=${prefix} onInput=${(event: Event) => setPrefix((event.target as HTMLInputElement).value)} data-testid="prefix" />
        <button type="submit">list</button>
      </form>
      ${error && html`<p class="error" data-testid="error">${error}</p>`}
      ${items &&
      html`<table data-testid="conversations">
        <thead><tr><th>conversation</th><th>version</th></tr></thead>
        <tbody>
          ${items.map((item) => html`<tr><td><a href=${conversationHref(item.conversationId)}>${item.conversationId}</a></td><td class="number">${String(item.version)}</td></tr>`)}
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

function ConversationPage({ id, tab }: { id: string; tab: "messages" | "compile" }) {
  const [view, setView] = useState<ConversationView | undefined>();
  const [historyShown, setHistoryShown] = useState(historyStep);
  const [changes, setChanges] = useState<Change[]>([]);
  const [error, setError] = useState("");
  const [live, setLive] = useState(false);
  // A new id is a new page: nothing of the previous conversation stays (its versions and keys
  // were listed under the next one's), and nothing its calls still answer is shown.
  useEffect(() => {
    setView(undefined);
    setError("");
    setHistoryShown(historyStep);
  }, [id]);
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
      refreshing = readView(id, historyShown, stop.signal)
        .then((read) => {
          if (stop.signal.aborted) return;
          setView(read);
          setError("");
        })
        .catch((failure: unknown) => {
          if (!stop.signal.aborted && !(failure instanceof ConnectError && failure.code === Code.Aborted)) setError(errorText(failure));
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
          void refresh();
        }
      } catch (failure) {
        if (!stop.signal.aborted) setError(errorText(failure));
      } finally {
        if (!stop.signal.aborted) setLive(false);
      }
    })();
    return () => stop.abort();
  }, [id, historyShown]);
  const state = view?.state;
  return html`
    <section>
      <h1><span data-testid="conversation-id">${id}</span> <span class="version" data-testid="version">v${state ? String(state.version) : "…"}</span> ${live && html`<span class="live" data-testid="live">live</span>`}</h1>
      <nav class="tabs">
        <a href=${conversationHref(id)} class=${tab === "messages" ? "active" : ""}>messages</a>
        <a href=${conversationHref(id, "compile")} class=${tab === "compile" ? "active" : ""}>compile</a>
      </nav>
      ${error && html`<p class="error" data-testid="error">${error}</p>`}
      <div class="columns">
        <${Timeline} changes=${changes} />
        <div class="main">
          ${tab === "messages"
            ? view && html`<${StateView} view=${view} onEarlier=${() => setHistoryShown((shown) => shown + historyStep)} />`
            : html`<${CompileView} id=${id} version=${state?.version} />`}
        </div>
      </div>
    </section>
  `;
}

function Timeline({ changes }: { changes: Change[] }) {
  return html`
    <aside class="timeline" data-testid="timeline">
      <h2>Versions</h2>
      <ol>
        ${[...changes].reverse().map(
          (change) => html`<li data-version=${String(change.version)}>
            <strong>v${String(change.version)}</strong>
            <time>${new Date(Number(change.committedAtUnixMs)).toLocaleTimeString()}</time>
            <div class="deltas">${change.cleared ? "cleared" : change.deltas.map((delta) => delta.operation.case ?? "?").join(", ")}</div>
            ${change.idempotencyKey && html`<div class="key">key ${change.idempotencyKey}</div>`}
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
    <span class="text">${message.parts.map(partText).join(" ")}</span>
    <span class="id">${message.id}</span>
  </div>`;
}

const providers: [string, Provider][] = [
  ["none (payload only)", Provider.UNSPECIFIED],
  ["openai chat", Provider.OPENAI_CHAT],
  ["openai responses", Provider.OPENAI_RESPONSES],
  ["anthropic messages", Provider.ANTHROPIC_MESSAGES],
  ["gemini", Provider.GEMINI],
];

/** What happened to a message, in the words of the compile view. */
function outcome(record: Transformation): string {
  if (record.action === TransformationAction.PASSED) return "kept";
  if (record.reason === TransformationReason.TOOL_RESULT_CLEARED || record.reason === TransformationReason.REASONING_CLEARED) return "cleared";
  if (record.action === TransformationAction.FORMATTED) {
    return [TransformationReason.TRANSFORM_HOOK, TransformationReason.REPLACED_BY_HOOK, TransformationReason.TEXT_REPLACEMENT].includes(record.reason) ? "redacted" : "formatted";
  }
  if (record.reason === TransformationReason.TOKEN_BUDGET_EXCEEDED || record.reason === TransformationReason.HISTORY_ALIGNMENT) return "trimmed";
  if (record.reason === TransformationReason.SUMMARIZED) return "summarized";
  return "dropped";
}

function CompileView({ id, version }: { id: string; version: bigint | undefined }) {
  const [maxTokens, setMaxTokens] = useState("2000");
  const [provider, setProvider] = useState(Provider.OPENAI_CHAT);
  const [model, setModel] = useState("gpt-4o");
  const [result, setResult] = useState<CompileResult | undefined>();
  const [previousFingerprint, setPreviousFingerprint] = useState<string | undefined>();
  const [error, setError] = useState("");
  const run = async () => {
    setError("");
    try {
      const response = await contexts.compile({
        conversationId: id,
        budget: { maxTokens: BigInt(maxTokens || "0") },
        render: provider === Provider.UNSPECIFIED ? undefined : { provider, model },
        include: [CompileResultPart.ALL_TRANSFORMATIONS],
      });
      setPreviousFingerprint(result?.prefixFingerprint);
      setResult(response.result);
    } catch (failure) {
      setError(errorText(failure));
    }
  };
  return html`
    <div class="compile">
      <form
        class="row"
        onSubmit=${(event: Event) => {
          event.preventDefault();
          void run();
        }}
      >
        <label>budget <input type="number" min="0" value=${maxTokens} onInput=${(event: Event) => setMaxTokens((event.target as HTMLInputElement).value)} data-testid="budget" /></label>
        <label>provider
          <select value=${provider} onChange=${(event: Event) => setProvider(Number((event.target as HTMLSelectElement).value) as Provider)} data-testid="provider">
            ${providers.map(([name, value]) => html`<option value=${value}>${name}</option>`)}
          </select>
        </label>
        <label>model <input value=${model} onInput=${(event: Event) => setModel((event.target as HTMLInputElement).value)} /></label>
        <button type="submit" data-testid="run-compile">compile v${version === undefined ? "…" : String(version)}</button>
      </form>
      ${error && html`<p class="error" data-testid="error">${error}</p>`}
      ${result && html`<${CompileResultView} result=${result} previousFingerprint=${previousFingerprint} />`}
    </div>
  `;
}

function CompileResultView({ result, previousFingerprint }: { result: CompileResult; previousFingerprint: string | undefined }) {
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
  const trimmed = usage.historyBeforeTrim - usage.history;
  const records = Object.entries(result.transformations);
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
      <p data-testid="trimmed">history ${String(usage.historyBeforeTrim)} tokens before trimming, ${String(usage.history)} after: <strong>${String(trimmed)} trimmed</strong>, ${String(result.budgetDroppedMessages)} message(s) dropped by the budget.</p>
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
      <table data-testid="records">
        <thead><tr><th>message</th><th>segment</th><th>outcome</th><th>why</th></tr></thead>
        <tbody>
          ${records.map(
            ([messageId, record]) => html`<tr class=${outcome(record)} data-id=${messageId}>
              <td>${messageId}</td>
              <td>${(Segment[record.segment] ?? "").toLowerCase()}</td>
              <td>${outcome(record)}</td>
              <td>${(TransformationReason[record.reason] ?? String(record.reason)).toLowerCase()}</td>
            </tr>`,
          )}
        </tbody>
      </table>
      ${rendered && html`<h2>Rendered body <small>${(Provider[result.rendered!.provider] ?? "").toLowerCase()}</small></h2><pre data-testid="rendered">${rendered}</pre>`}
    </div>
  `;
}

render(html`<${App} />`, document.getElementById("app")!);
