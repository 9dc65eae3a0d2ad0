import { describe, expect, it } from "vitest";
import { Role, type Message, type Part } from "#gen/contextd/v1/message_pb";
import { analyzeToolRounds, assertValidExtension, assertValidRemoval, assertValidToolRounds, pairingRules, unitsHolding, type HistoryUnit, type ToolRoundAnalysis, type ToolRoundCheck } from "../../src/core/model/tool-rounds.js";
import { randomSource } from "../support/random-messages.js";
import { call, message, result, text } from "./messages.js";

/**
 * The round bookkeeping as it was written before the per-round Sets and Map were replaced
 * (call ids, names, expected and answered calls, missing calls): the reference the analysis must
 * keep matching.
 */
function referenceRound(messages: readonly Message[], index: number) {
  const opening = messages[index]!;
  const callIds: string[] = [];
  const callNames = new Map<string, string>();
  const expected = new Set<string>();
  for (const part of opening.parts) {
    if (part.kind.case !== "toolCall") continue;
    callIds.push(part.kind.value.id);
    callNames.set(part.kind.value.id, part.kind.value.name);
    if (part.kind.value.id !== "") expected.add(part.kind.value.id);
  }
  const outcomes: string[] = [];
  const answered = new Set<string>();
  let next = index + 1;
  const carriesResults = (m: Message) => m.role === Role.TOOL || m.parts.some((p) => p.kind.case === "toolResult");
  const opensRound = (m: Message) => m.role === Role.ASSISTANT && m.parts.some((p) => p.kind.case === "toolCall");
  while (next < messages.length && carriesResults(messages[next]!) && !opensRound(messages[next]!)) {
    for (const part of messages[next]!.parts) {
      if (part.kind.case !== "toolResult") continue;
      const id = part.kind.value.toolCallId;
      if (id === "") outcomes.push(`${next}:empty`);
      else if (!expected.has(id)) outcomes.push(`${next}:unknown ${id}`);
      else if (answered.has(id)) outcomes.push(`${next}:duplicate ${id}`);
      else answered.add(id);
    }
    next++;
  }
  const missingCallIds = [...expected].filter((id) => !answered.has(id));
  return { end: next, callIds, callNames: [...callNames], missingCallIds, outcomes };
}

// The same outcomes read back from the analysis, for comparison with the reference.
function analysedRound(analysis: ToolRoundAnalysis, unit: HistoryUnit) {
  const outcomes = analysis.violations
    .filter((violation) => violation.index > unit.start && violation.index < unit.end && violation.rule.startsWith("tool_result_") && violation.rule !== "tool_result_not_in_tool_message")
    .map((violation) => {
      const id = /"([^"]*)"/.exec(violation.detail)?.[1];
      if (violation.rule === "tool_result_empty_call_id") return `${violation.index}:empty`;
      if (violation.rule === "tool_result_unknown_call_id") return `${violation.index}:unknown ${id}`;
      return `${violation.index}:duplicate ${id}`;
    });
  return { end: unit.end, callIds: [...unit.round!.callIds], callNames: [...unit.round!.callNames], missingCallIds: unit.round!.missingCallIds, outcomes };
}

function randomSequence(random: () => number): Message[] {
  const pool = ["", "c1", "c2", "c3", "c4"];
  const pickId = (wide: boolean) => (wide ? `w${Math.floor(random() * 30)}` : pool[Math.floor(random() * pool.length)]!);
  const messages: Message[] = [];
  const length = 1 + Math.floor(random() * 12);
  for (let index = 0; index < length; index++) {
    const roll = random();
    if (roll < 0.35) {
      // A round opener: usually a few calls, sometimes many (past the lookup's scan limit).
      const wide = random() < 0.2;
      const count = wide ? 10 + Math.floor(random() * 30) : 1 + Math.floor(random() * 4);
      const parts: Part[] = [];
      if (random() < 0.3) parts.push(text("thinking"));
      for (let c = 0; c < count; c++) parts.push(call(pickId(wide), `tool${Math.floor(random() * 3)}`));
      messages.push(message(Role.ASSISTANT, `m${index}`, ...parts));
    } else if (roll < 0.8) {
      const wide = random() < 0.3;
      const count = random() < 0.1 ? 0 : 1 + Math.floor(random() * (wide ? 20 : 3));
      const parts: Part[] = [];
      for (let r = 0; r < count; r++) parts.push(result(pickId(wide), "out"));
      if (count === 0 || random() < 0.1) parts.push(text("note"));
      messages.push(message(random() < 0.9 ? Role.TOOL : Role.USER, `m${index}`, ...parts));
    } else {
      messages.push(message(random() < 0.7 ? Role.USER : Role.ASSISTANT, `m${index}`, "plain"));
    }
  }
  return messages;
}

describe("analyzeToolRounds", () => {
  it("keeps the reference bookkeeping of calls, results and missing calls on random sequences", () => {
    let state = 11;
    const random = () => ((state = (state * 1103515245 + 12345) >>> 0) / 2 ** 32);
    let rounds = 0;
    let wideRounds = 0;
    let withViolations = 0;
    for (let sample = 0; sample < 3_000; sample++) {
      const messages = randomSequence(random);
      const analysis = analyzeToolRounds(messages, { allowOpenTail: random() < 0.5 });
      if (analysis.violations.length > 0) withViolations++;
      for (const unit of analysis.units) {
        if (!unit.round) continue;
        rounds++;
        if (unit.round.callIds.length > 16) wideRounds++;
        expect(analysedRound(analysis, unit), `sample ${sample} unit at ${unit.start}`).toEqual(referenceRound(messages, unit.start));
        expect(unit.round.open).toBe(unit.round.missingCallIds.length > 0 && unit.end === messages.length);
      }
    }
    expect(rounds).toBeGreaterThan(2_000);
    expect(wideRounds).toBeGreaterThan(100);
    expect(withViolations).toBeGreaterThan(500);
  });
});

/** A sequence that passes the check: plain messages and complete rounds, maybe an open round last. */
function randomValidSequence(random: () => number, allowOpenTail: boolean, callIds: string[]): Message[] {
  const messages: Message[] = [];
  const units = Math.floor(random() * 8);
  for (let unit = 0; unit < units; unit++) {
    if (random() < 0.5) {
      messages.push(message(random() < 0.5 ? Role.USER : Role.ASSISTANT, `v${messages.length}`, "plain"));
      continue;
    }
    const ids = Array.from({ length: 1 + Math.floor(random() * 3) }, () => `p${callIds.push("") - 1}`);
    ids.forEach((id, index) => (callIds[callIds.length - ids.length + index] = id));
    messages.push(message(Role.ASSISTANT, `v${messages.length}`, ...ids.map((id) => call(id))));
    const open = allowOpenTail && unit === units - 1 && random() < 0.5;
    const answered = open ? ids.slice(0, Math.floor(random() * ids.length)) : ids;
    // One TOOL message per result, or all results in one.
    if (random() < 0.5) for (const id of answered) messages.push(message(Role.TOOL, `v${messages.length}`, result(id, "out")));
    else if (answered.length > 0) messages.push(message(Role.TOOL, `v${messages.length}`, ...answered.map((id) => result(id, "out"))));
  }
  return messages;
}

/** Messages to append: results (some for the prefix's calls), new rounds reusing call ids, plain ones. */
function randomAddition(random: () => number, callIds: string[]): Message[] {
  // A quarter of additions are a plain message or a fresh complete round, which usually pass.
  if (random() < 0.25) {
    if (random() < 0.5) return [message(Role.USER, "a0", "plain")];
    return [message(Role.ASSISTANT, "a0", call("fresh1"), call("fresh2")), message(Role.TOOL, "a1", result("fresh1", "out"), result("fresh2", "out"))];
  }
  const pickId = () => (callIds.length > 0 && random() < 0.5 ? callIds[Math.floor(random() * callIds.length)]! : `n${Math.floor(random() * 4)}`);
  return Array.from({ length: 1 + Math.floor(random() * 4) }, (_, index) => {
    const roll = random();
    if (roll < 0.3) return message(Role.ASSISTANT, `a${index}`, ...Array.from({ length: 1 + Math.floor(random() * 2) }, () => call(pickId())));
    if (roll < 0.75) return message(random() < 0.9 ? Role.TOOL : Role.USER, `a${index}`, ...Array.from({ length: 1 + Math.floor(random() * 2) }, () => result(pickId(), "out")));
    return message(random() < 0.5 ? Role.USER : Role.ASSISTANT, `a${index}`, "plain");
  });
}

function thrownMessage(check: () => void): string | undefined {
  try {
    check();
    return undefined;
  } catch (error) {
    return (error as Error).message;
  }
}

describe("assertValidExtension", () => {
  it("answers as the full check of the whole sequence, for random valid prefixes and random additions", () => {
    let state = 29;
    const random = () => ((state = (state * 1103515245 + 12345) >>> 0) / 2 ** 32);
    let rejected = 0;
    let accepted = 0;
    for (let sample = 0; sample < 5_000; sample++) {
      const allowOpenTail = random() < 0.5;
      const callIds: string[] = [];
      const prefix = randomValidSequence(random, allowOpenTail, callIds);
      // Checked once in full (as a segment is when first written), which lets later appends to it
      // take the short path; the empty prefix always takes it.
      assertValidExtension([], prefix, "history", { allowOpenTail });
      const messages = [...prefix, ...randomAddition(random, callIds)];
      const expected = thrownMessage(() => assertValidToolRounds(messages, "history", { allowOpenTail }));
      expect(thrownMessage(() => assertValidExtension(prefix, messages, "history", { allowOpenTail })), `sample ${sample}`).toBe(expected);
      if (expected === undefined) accepted++;
      else rejected++;
    }
    expect(accepted).toBeGreaterThan(500);
    expect(rejected).toBeGreaterThan(2_000);
  });

  it("checks the whole sequence when the prefix was never checked", () => {
    const invalidPrefix = [message(Role.TOOL, "t1", result("c1", "out"))];
    expect(() => assertValidExtension(invalidPrefix, [...invalidPrefix, message(Role.USER, "u1", "hi")], "history", { allowOpenTail: true })).toThrow(
      /tool_result_without_call\) at history\[0\]/,
    );
  });
});

describe("unitsHolding", () => {
  it("finds the units analyzeToolRounds splits a sequence into, for random positions of random sequences", () => {
    // An LCG whose products stay exact in a double: consecutive draws of the one above are
    // correlated enough that a unit and the next were removed together nearly always.
    const random = randomSource(37);
    for (let sample = 0; sample < 3_000; sample++) {
      const messages = randomSequence(random);
      const positions = messages.flatMap((_, index) => (random() < 0.3 ? [index] : []));
      const expected = analyzeToolRounds(messages, { allowOpenTail: true }).units.filter((unit) => positions.some((position) => position >= unit.start && position < unit.end));
      expect(unitsHolding(messages, positions).map(({ start, end }) => [start, end]), `sample ${sample}`).toEqual(expected.map(({ start, end }) => [start, end]));
    }
  });
});

/**
 * Units as conversations store them under the lenient check too: plain messages, complete and
 * incomplete rounds, and messages carrying results that stand alone (a TOOL message with results,
 * one without, a USER message with a result), which join a round once what separates them goes.
 */
function randomStoredUnits(random: () => number): Message[] {
  const messages: Message[] = [];
  const units = 1 + Math.floor(random() * 10);
  let calls = 0;
  for (let unit = 0; unit < units; unit++) {
    const roll = random();
    const id = () => `m${messages.length}`;
    if (roll < 0.2) messages.push(message(random() < 0.5 ? Role.USER : Role.ASSISTANT, id(), "plain"));
    else if (roll < 0.35) {
      // A round, a plain message and a message that would break the round's rules were it next to it.
      messages.push(message(Role.ASSISTANT, id(), call(`k${calls}`)), message(Role.TOOL, id(), result(`k${calls++}`, "out")), message(Role.USER, id(), "plain"));
      messages.push(random() < 0.5 ? message(Role.TOOL, id(), "note") : message(Role.USER, id(), result("k0", "out")));
    }
    else if (roll < 0.6) {
      const ids = Array.from({ length: 1 + Math.floor(random() * 3) }, () => `k${calls++}`);
      messages.push(message(Role.ASSISTANT, id(), ...ids.map((callId) => call(callId))));
      const answered = random() < 0.7 ? ids : ids.slice(0, Math.floor(random() * ids.length));
      for (const callId of answered) messages.push(message(Role.TOOL, id(), result(callId, "out")));
    } else if (roll < 0.75) messages.push(message(Role.TOOL, id(), result(`k${Math.floor(random() * (calls + 1))}`, "out")));
    else if (roll < 0.9) messages.push(message(Role.TOOL, id(), "note"));
    else messages.push(message(Role.USER, id(), result(`k${Math.floor(random() * (calls + 1))}`, "out")));
  }
  return messages;
}

/** About a third of `base`'s units (as `check` splits them) taken out whole: their positions, and what is left. */
function randomUnitsRemoved(base: readonly Message[], check: ToolRoundCheck, random: () => number): { positions: number[]; kept: Message[] } {
  const positions = analyzeToolRounds(base, check).units.flatMap((unit) => (random() < 0.35 ? Array.from({ length: unit.end - unit.start }, (_, k) => unit.start + k) : []));
  return { positions, kept: base.filter((_, index) => !positions.includes(index)) };
}

describe("assertValidRemoval", () => {
  const checks: ToolRoundCheck[] = [{ allowOpenTail: true, tolerated: pairingRules }, { allowOpenTail: true }, { allowOpenTail: false }];

  it("answers as the full check of what is left, for random whole units removed from random sequences that passed", () => {
    // An LCG whose products stay exact in a double: consecutive draws of the one above are
    // correlated enough that a unit and the next were removed together nearly always.
    const random = randomSource(41);
    let rejected = 0;
    let accepted = 0;
    for (let sample = 0; sample < 20_000; sample++) {
      const check = checks[sample % checks.length]!;
      const base = sample % 2 === 0 ? randomSequence(random) : randomStoredUnits(random);
      if (thrownMessage(() => assertValidExtension([], base, "history", check)) !== undefined) continue;
      const { positions, kept } = randomUnitsRemoved(base, check, random);
      const expected = thrownMessage(() => assertValidToolRounds(kept, "history", check));
      expect(thrownMessage(() => assertValidRemoval(base, kept, positions, "history", check)), `sample ${sample}`).toBe(expected);
      if (expected === undefined) accepted++;
      else rejected++;
    }
    // Removals that join a result standing alone to a round before it are what fails.
    expect(accepted).toBeGreaterThan(1_000);
    expect(rejected).toBeGreaterThan(100);
  });

  it("lets an append to what is left check only what it appends: the same answers as the full check", () => {
    // An LCG whose products stay exact in a double: consecutive draws of the one above are
    // correlated enough that a unit and the next were removed together nearly always.
    const random = randomSource(43);
    let compared = 0;
    for (let sample = 0; sample < 5_000; sample++) {
      const allowOpenTail = random() < 0.5;
      const callIds: string[] = [];
      const base = randomValidSequence(random, allowOpenTail, callIds);
      assertValidExtension([], base, "history", { allowOpenTail });
      const { positions, kept } = randomUnitsRemoved(base, { allowOpenTail }, random);
      if (thrownMessage(() => assertValidRemoval(base, kept, positions, "history", { allowOpenTail })) !== undefined) continue;
      const messages = [...kept, ...randomAddition(random, callIds)];
      const expected = thrownMessage(() => assertValidToolRounds(messages, "history", { allowOpenTail }));
      expect(thrownMessage(() => assertValidExtension(kept, messages, "history", { allowOpenTail })), `sample ${sample}`).toBe(expected);
      compared++;
    }
    expect(compared).toBeGreaterThan(4_000);
  });

  it("checks all that is left when the sequence removed from was never checked", () => {
    const unchecked = [message(Role.USER, "u0", "hi"), message(Role.TOOL, "t1", result("c1", "out")), message(Role.USER, "u2", "hi")];
    expect(() => assertValidRemoval(unchecked, unchecked.slice(0, 2), [2], "history", { allowOpenTail: true })).toThrow(/tool_result_without_call\) at history\[1\]/);
  });
});
