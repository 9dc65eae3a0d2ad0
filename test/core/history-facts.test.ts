import { describe, expect, it } from "vitest";
import { Role, type Message } from "#gen/contextd/v1/message_pb";
import { HistoryFacts } from "../../src/core/compile/history-facts.js";
import { MessageListLineage } from "../../src/core/model/message-list-lineage.js";
import { DeadlineCheck } from "../../src/core/compile/deadline.js";
import { createEstimator } from "../../src/core/tokens/estimator.js";
import { TokenCountCache } from "../../src/core/tokens/token-count-cache.js";
import { HistoryFactsCache } from "../../src/application/history-facts-cache.js";
import { collectGarbage } from "../support/forced-gc.js";
import { randomSource } from "../support/random-messages.js";
import { call, message, result, toolRound, user } from "./messages.js";

/** What a compile reads of facts, for comparing two of them. */
async function observed(facts: HistoryFacts) {
  const tokenCounts = new TokenCountCache();
  const estimator = await createEstimator(undefined, 0, "budget.estimator", tokenCounts, "", DeadlineCheck.none);
  const { counts, prefix } = await facts.tokenPrefix(estimator, tokenCounts, DeadlineCheck.none);
  // Unclean facts are never used past `clean` (the compile walks the whole history).
  if (!facts.clean) return { clean: false };
  return { clean: facts.clean, unitStarts: [...facts.unitStarts], lastUser: facts.lastUser, characters: [...facts.characters], counts: [...counts], prefix: [...prefix], ids: facts.history!.map((m) => facts.hasId(m.id)) };
}

describe("HistoryFacts", () => {
  it("extended message by message equal the facts built from the whole history, across tool rounds opened in one append and closed in the next", async () => {
    const random = randomSource(3);
    let clean = 0;
    for (let run = 0; run < 20; run++) {
      let history: Message[] = [];
      let facts: HistoryFacts | undefined;
      const tokenCounts = new TokenCountCache();
      const estimator = await createEstimator(undefined, 0, "budget.estimator", tokenCounts, "", DeadlineCheck.none);
      for (let step = 0; step < 30; step++) {
        const roll = random();
        const id = `${run}-${step}`;
        const added =
          roll < 0.4
            ? [user(`u${id}`, "hello ".repeat(1 + Math.floor(random() * 9)))]
            : roll < 0.6
              ? toolRound(`t${id}`, [`c${id}`])
              : roll < 0.75
                ? [message(Role.ASSISTANT, `a${id}`, call(`open${id}`))]
                : roll < 0.9
                  ? [message(Role.TOOL, `r${id}`, result(`open${run}-${step - 1}`, "late result"))]
                  : [message(Role.ASSISTANT, `x${id}`, "plain")];
        history = [...history, ...added];
        facts = HistoryFacts.of(history, facts);
        // Counted every few steps, so a column also grows by several messages at once.
        if (step % 3 === 0) await facts.tokenPrefix(estimator, tokenCounts, DeadlineCheck.none);
        expect(await observed(facts), `run ${run} step ${step}`).toEqual(await observed(HistoryFacts.of(history, undefined)));
        if (facts.clean) clean++;
      }
    }
    // Clean and unclean histories both occurred (a late result without its round makes one unclean).
    expect(clean).toBeGreaterThan(50);
    expect(clean).toBeLessThan(600);
  });

  it("follow a head of their history the lineage knows of (a rewind) in place, then its appends, equal to the facts built from the whole history", async () => {
    const random = randomSource(7);
    let followed = 0;
    for (let run = 0; run < 20; run++) {
      const lineage = new MessageListLineage();
      let history: Message[] = [];
      let facts: HistoryFacts | undefined;
      for (let step = 0; step < 30; step++) {
        const roll = random();
        const id = `${run}-${step}`;
        if (step % 6 === 5 && history.length > 0) {
          const head = history.slice(0, Math.floor(random() * history.length));
          lineage.truncated(history, head);
          const before = facts!;
          const wasClean = before.clean;
          facts = HistoryFacts.of(head, before, lineage);
          if (wasClean) {
            expect(facts).toBe(before);
            followed++;
          }
          history = head;
        } else {
          const added = roll < 0.4 ? [user(`u${id}`, "hello ".repeat(1 + Math.floor(random() * 9)))] : roll < 0.7 ? toolRound(`t${id}`, [`c${id}`]) : [message(Role.ASSISTANT, `a${id}`, call(`open${id}`))];
          const next = history.concat(added);
          lineage.appended(history, next);
          history = next;
          facts = HistoryFacts.of(history, facts, lineage);
        }
        expect(await observed(facts), `run ${run} step ${step}`).toEqual(await observed(HistoryFacts.of(history, undefined)));
      }
    }
    // Seeded: 14 clean heads followed in place (the open calls make other histories unclean, rebuilt instead).
    expect(followed).toBeGreaterThan(10);
  });

  it("are extended without reading the kept messages again when the store's lineage says the history extends them", async () => {
    const base = Array.from({ length: 50 }, (_, index) => user(`u${index}`, `message ${index}`));
    const appended = base.concat([user("u50", "more")]);
    // Counts reads of the messages the facts already describe.
    let earlyReads = 0;
    const watched = new Proxy(appended, {
      get(target, key, receiver) {
        if (typeof key === "string" && /^\d+$/.test(key) && Number(key) < base.length) earlyReads++;
        return Reflect.get(target, key, receiver);
      },
    });
    const lineage = new MessageListLineage();
    lineage.appended(base, watched);
    const facts = HistoryFacts.of(base, undefined);
    const extended = HistoryFacts.of(watched, facts, lineage);
    expect(extended).toBe(facts);
    // At most the last kept message (where the appended messages' tool round may begin).
    expect(earlyReads).toBeLessThanOrEqual(1);
    expect(await observed(extended)).toEqual(await observed(HistoryFacts.of(appended, undefined)));
    // Without the lineage the same extension compares every kept message.
    const compared = HistoryFacts.of(watched, HistoryFacts.of(base, undefined));
    expect(await observed(compared)).toEqual(await observed(extended));
    expect(earlyReads).toBeGreaterThanOrEqual(base.length);
  });

  it("hold their history weakly, and once it is gone still extend to a list the lineage says continues it", async () => {
    const lineage = new MessageListLineage();
    let base: Message[] | undefined = Array.from({ length: 20 }, (_, index) => user(`u${index}`, `message ${index}`));
    const facts = HistoryFacts.of(base, undefined, lineage);
    const next = base.concat([user("u20", "more")]);
    lineage.appended(base, next);
    // Only the store's newer list (and its messages) stays: the facts must not keep the old list.
    const held = new WeakRef(base);
    base = undefined;
    await collectGarbage();
    expect(held.deref()).toBeUndefined();
    expect(facts.history).toBeUndefined();
    const extended = HistoryFacts.of(next, facts, lineage);
    expect(extended).toBe(facts);
    expect(await observed(extended)).toEqual(await observed(HistoryFacts.of(next, undefined)));
    // A list with the same messages that the lineage does not know to continue the gone one gets facts built anew.
    let short: Message[] | undefined = next.slice(0, 5);
    const shortFacts = HistoryFacts.of(short, undefined, lineage);
    short = undefined;
    await collectGarbage();
    expect(shortFacts.history).toBeUndefined();
    const copy = [...next];
    const rebuilt = HistoryFacts.of(copy, shortFacts, lineage);
    expect(rebuilt).not.toBe(shortFacts);
    expect(await observed(rebuilt)).toEqual(await observed(HistoryFacts.of(next, undefined)));
  });

  it("are rebuilt when the history is not an extension (a message replaced or removed), and turn unclean on a duplicate id or a broken round", async () => {
    const history = [user("u1", "a"), user("u2", "b"), user("u3", "c")];
    const facts = HistoryFacts.of(history, undefined);
    const replaced = [history[0]!, user("u2", "B"), history[2]!];
    const rebuilt = HistoryFacts.of(replaced, facts);
    expect(rebuilt).not.toBe(facts);
    expect(await observed(rebuilt)).toEqual(await observed(HistoryFacts.of(replaced, undefined)));
    expect(HistoryFacts.of([...history, user("u1", "again")], HistoryFacts.of(history, undefined)).clean).toBe(false);
    expect(HistoryFacts.of([...history, message(Role.ASSISTANT, "a", call("c1")), user("u4", "no result")], undefined).clean).toBe(false);
    expect(HistoryFacts.of([...history, message(Role.ASSISTANT, "a", call("c1"))], undefined).clean).toBe(true);
  });
});

describe("HistoryFactsCache", () => {
  const history = (prefix: string, length: number) => Array.from({ length }, (_, index) => user(`${prefix}${index}`, "x"));

  it("forgets facts whose history nothing else holds, so a compile takes the cold path instead of walking the whole history", async () => {
    const cache = new HistoryFactsCache({ maxBytes: 1 << 20, maxConversations: 10 });
    let messages: Message[] | undefined = history("gone", 50);
    const lent = cache.lend("gone");
    lent.facts(messages);
    lent.giveBack();
    const kept = history("kept", 5);
    const other = cache.lend("kept");
    other.facts(kept);
    other.giveBack();
    expect(cache.stats.conversations).toBe(2);
    messages = undefined;
    await collectGarbage();
    expect([cache.has("gone"), cache.has("kept")]).toEqual([false, true]);
    expect(cache.stats.conversations).toBe(1);
    expect(kept.length).toBe(5);
  });

  it("lends a conversation's facts to one compile at a time and keeps what it gives back", () => {
    const cache = new HistoryFactsCache({ maxBytes: 1 << 20, maxConversations: 10 });
    const messages = history("a", 5);
    const first = cache.lend("a");
    const facts = first.facts(messages)!;
    // While lent, a second compile of the conversation builds its own.
    const second = cache.lend("a");
    expect(second.facts(messages)).not.toBe(facts);
    first.giveBack();
    expect(cache.stats.conversations).toBe(1);
    expect(cache.lend("a").facts([...messages, user("more", "y")])).toBe(facts);
  });

  it("forgets the least recently given back past its conversation and byte bounds, and keeps nothing at 0", () => {
    const byCount = new HistoryFactsCache({ maxBytes: 1 << 20, maxConversations: 2 });
    for (const id of ["a", "b", "c"]) {
      const lent = byCount.lend(id);
      lent.facts(history(id, 3));
      lent.giveBack();
    }
    expect(byCount.stats.conversations).toBe(2);
    const one = HistoryFacts.of(history("z", 100), undefined).approximateBytes;
    const byBytes = new HistoryFactsCache({ maxBytes: Math.floor(one * 2.5), maxConversations: 100 });
    for (const id of ["a", "b", "c", "d"]) {
      const lent = byBytes.lend(id);
      lent.facts(history(id, 100));
      lent.giveBack();
    }
    expect(byBytes.stats.conversations).toBe(2);
    expect(byBytes.stats.bytes).toBeLessThanOrEqual(Math.floor(one * 2.5));
    const off = new HistoryFactsCache({ maxBytes: 0, maxConversations: 10 });
    expect(off.lend("a").facts(history("a", 3))).toBeUndefined();
  });
});
