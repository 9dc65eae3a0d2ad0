import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { BudgetStrategy, CompileRequestSchema, EstimatorKind, IdentityPolicy, type CompileRequest } from "#gen/contextd/v1/compile_pb";
import type { Message } from "#gen/contextd/v1/message_pb";
import { compile } from "../../src/core/compile/compile.js";
import { testContext } from "./compile-context.js";
import { assistant, system, user } from "./messages.js";

type Init = Parameters<typeof create<typeof CompileRequestSchema>>[1];
const request = (init: Init) => create(CompileRequestSchema, init);

async function failure(compiled: Promise<unknown>): Promise<string | undefined> {
  const error = await compiled.then(() => undefined, (thrown: unknown) => thrown);
  if (error === undefined) return undefined;
  expect(error).toBeInstanceOf(ConnectError);
  expect((error as ConnectError).code).toBe(Code.InvalidArgument);
  return (error as ConnectError).rawMessage;
}

/** The n-th id assigned to a message: testContext's random ids, after the compile id. */
const assignedId = (n: number) => `00000000-0000-4000-8000-${(n + 1).toString(16).padStart(12, "0")}`;

describe("duplicate message ids", () => {
  const cases: [string, Init, string][] = [
    ["within history", { history: { messages: [user("x", "a"), user("y", "b"), assistant("x", "c")] } }, "at history[2] (also at history[0])"],
    ["memory against system", { system: { messages: [system("s", "a"), system("x", "b")] }, memory: { messages: [system("m", "c"), system("x", "d")] } }, "at memory[1] (also at system[1])"],
    ["history against tools (enumeration order: tools last)", { tools: { messages: [system("x", "a")] }, history: { messages: [user("x", "b")] } }, "at tools[0] (also at history[0])"],
    ["an assigned id against a given one", { identity: { policy: IdentityPolicy.RANDOM }, history: { messages: [user("", "a"), user(assignedId(1), "b")] } }, `at history[1] (also at history[0])`],
    ["a given id after assigned ones, in a later segment", { identity: { policy: IdentityPolicy.RANDOM }, system: { messages: [system("", "a"), system("", "b")] }, memory: { messages: [system(assignedId(2), "c")] } }, "at memory[0] (also at system[1])"],
    ["pending against history", { history: { messages: [user("x", "a")] }, pending: [user("x", "b")] }, "at pending[0] (also at history[0])"],
    ["pending against pending", { pending: [user("p", "a"), user("x", "b"), user("x", "c")] }, "at pending[2] (also at pending[1])"],
    ["current turn against memory", { memory: { messages: [system("x", "a")] }, currentTurn: { raw: user("x", "b") } }, "at current_turn (also at memory[0])"],
    ["current turn against pending", { pending: [user("x", "a")], currentTurn: { promptSafe: user("x", "b") } }, "at current_turn (also at pending[0])"],
    ["scratch against pending", { pending: [user("x", "a")], scratch: [system("x", "b")] }, "at scratch[0] (also at pending[0])"],
    ["scratch against tools", { tools: { messages: [system("t", "a"), system("x", "b")] }, scratch: [system("x", "c")] }, "at scratch[0] (also at tools[1])"],
    ["ids that are Object.prototype names", { history: { messages: [user("__proto__", "a"), user("constructor", "b"), user("__proto__", "c")] } }, "at history[2] (also at history[0])"],
    ["numeric ids", { history: { messages: [user("10", "a"), user("2", "b")] }, memory: { messages: [system("10", "c")] } }, "at memory[0] (also at history[0])"],
  ];
  for (const [label, init, where] of cases) {
    it(`are rejected: ${label}`, async () => {
      const message = await failure(compile(request(init), testContext()));
      expect(message).toMatch(/^duplicate message id "/);
      expect(message!.slice(message!.indexOf(" at ") + 1)).toBe(where);
    });
  }

  it("are found in claim order on random requests", async () => {
    let state = 7;
    const random = () => ((state = (state * 1103515245 + 12345) >>> 0) / 2 ** 32);
    const pick = () => `id${Math.floor(random() * 40)}`;
    let rejected = 0;
    for (let round = 0; round < 200; round++) {
      const lists = {
        system: Array.from({ length: Math.floor(random() * 4) }, () => system(pick(), "s")),
        history: Array.from({ length: Math.floor(random() * 8) }, () => user(pick(), "h")),
        memory: Array.from({ length: Math.floor(random() * 4) }, () => system(pick(), "m")),
        tools: Array.from({ length: Math.floor(random() * 3) }, () => system(pick(), "t")),
        pending: Array.from({ length: Math.floor(random() * 3) }, () => user(pick(), "p")),
        scratch: Array.from({ length: Math.floor(random() * 2) }, () => system(pick(), "x")),
      };
      const turn = random() < 0.5 ? user(pick(), "now") : undefined;
      // The reference: every claim in order, the first id claimed twice names both places.
      const claims: [string, string][] = [];
      const add = (messages: Message[], scope: string) => messages.forEach((message, index) => claims.push([message.id, `${scope}[${index}]`]));
      add(lists.system, "system");
      add(lists.history, "history");
      add(lists.memory, "memory");
      add(lists.tools, "tools");
      add(lists.pending, "pending");
      if (turn) claims.push([turn.id, "current_turn"]);
      add(lists.scratch, "scratch");
      const first = new Map<string, string>();
      let expected: string | undefined;
      for (const [id, path] of claims) {
        const earlier = first.get(id);
        if (earlier !== undefined) {
          expected = `duplicate message id "${id}" at ${path} (also at ${earlier})`;
          break;
        }
        first.set(id, path);
      }
      const compiled = compile(
        request({
          system: { messages: lists.system },
          history: { messages: lists.history },
          memory: { messages: lists.memory },
          tools: { messages: lists.tools },
          pending: lists.pending,
          scratch: lists.scratch,
          currentTurn: turn && { raw: turn },
        }),
        testContext(),
      );
      expect(await failure(compiled), `round ${round}`).toBe(expected);
      if (expected) rejected++;
    }
    expect(rejected).toBeGreaterThan(50);
    expect(rejected).toBeLessThan(190);
  });
});

describe("transformation records", () => {
  it("list ids in stage order: segments, scratch, pending, current turn; trimmed ones where they were", async () => {
    const compileRequest: CompileRequest = request({
      system: { messages: [system("s1", "system")] },
      history: { messages: [user("h1", "one"), assistant("h2", "two"), user("", "three"), assistant("h4", "four")] },
      memory: { messages: [system("m1", "memory")] },
      tools: { messages: [system("t1", "tools")] },
      pending: [user("p1", "pending")],
      scratch: [system("x1", "scratch")],
      currentTurn: { raw: user("now", "current") },
      identity: { policy: IdentityPolicy.RANDOM },
      budget: { maxTokens: 90n, strategy: BudgetStrategy.DROP_HEAD, estimator: { kind: EstimatorKind.FIXED, fixedPerMessage: 10n } },
    });
    const result = await compile(compileRequest, testContext());
    expect(Object.keys(result.transformations)).toEqual(["s1", "h1", "h2", assignedId(1), "h4", "m1", "t1", "x1", "p1", "now"]);
    expect(Object.getPrototypeOf(result.transformations)).toBeNull();
    // h2 answers the dropped h1: dropped too so history starts on a user turn.
    expect(result.payload!.history.map((message) => message.id)).toEqual([assignedId(1), "h4", "p1", "now"]);
  });
});
