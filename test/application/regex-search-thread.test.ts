import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, describe, expect, it } from "vitest";
import { CompileRequestSchema, CompileResultSchema, RedactionPattern, type CompileRequest } from "#gen/contextd/v1/compile_pb";
import { RegexSearchThread } from "../../src/application/regex-search-thread.js";
import { compile } from "../../src/core/compile/compile.js";
import type { RegexSearch } from "../../src/core/compile/compile-context.js";
import { testContext } from "../core/compile-context.js";
import { user } from "../core/messages.js";

const thread = new RegexSearchThread();
afterAll(() => thread.close());

/** A seeded text over `alphabet`, with whole `samples` spliced in at random places. */
function randomText(seed: number, length: number, alphabet: string, samples: readonly string[]): string {
  let state = seed;
  const next = () => (state = (Math.imul(state, 1103515245) + 12345) >>> 0) >>> 8;
  const out: string[] = [];
  let size = 0;
  while (size < length) {
    const piece = next() % 40 === 0 ? samples[next() % samples.length]! : alphabet[next() % alphabet.length]!;
    out.push(piece);
    size += piece.length;
  }
  return out.join("");
}

// What each built-in pattern matches, and near-misses its check turns down (Luhn, too few digits, "::").
const samples = [
  "sk-abcdefghijklmnop1234", "AKIAABCDEFGHIJKLMNOP", "ghp_abcdefghijklmnopqrstu", "Bearer abc.def-ghi~jkl+mno/pqr==",
  "a.b@example.com", "x@y.co.uk", "4111 1111 1111 1111", "4111 1111 1111 1112", "10.0.0.255", "fe80::1", "::", "2001:db8:0:0:0:0:2:1",
  "+1 (555) 123-4567", "555-1234", "+4915112345678", "(030) 1234 5678",
];
const alphabets = ["abcdef0123456789", " .-:@+()_\n", "abcdefghijklmnopqrstuvwxyz ", "0123456789 -.", "0123456789abcdef:.@ "];
const allBuiltIns = [RedactionPattern.API_KEY, RedactionPattern.EMAIL, RedactionPattern.CARD_NUMBER, RedactionPattern.IP_ADDRESS, RedactionPattern.PHONE];

const request = (text: string, replacement = "") =>
  create(CompileRequestSchema, { history: { messages: [user("u1", text)] }, hooks: [{ kind: { case: "redaction", value: { patterns: allBuiltIns, replacement } } }] });

/** The encoded result (base64: vitest compares long strings far faster than byte arrays), or the error. */
async function outcome(compileRequest: CompileRequest, search?: RegexSearch, maxCompileTextBytes?: number): Promise<string> {
  try {
    const result = await compile(compileRequest, testContext({ searchRegexOffThread: search, maxCompileTextBytes }));
    return `ok ${Buffer.from(toBinary(CompileResultSchema, result)).toString("base64")}`;
  } catch (error) {
    if (!(error instanceof ConnectError)) throw error;
    return `${error.code}: ${error.rawMessage}`;
  }
}

describe("RegexSearchThread", () => {
  it("finds the offsets String.prototype.replace visits", async () => {
    const regex = /(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}/g;
    const text = randomText(7, 200_000, alphabets[4]!, samples);
    const expected: number[] = [];
    text.replace(regex, (match, offset: number) => {
      expected.push(offset, offset + match.length);
      return match;
    });
    expect(expected.length).toBeGreaterThan(10);
    expect(Array.from(await thread.search(regex, text))).toEqual(expected);
  });

  it("refuses a regex without the global flag", async () => {
    await expect(thread.search(/a/, "aaa")).rejects.toThrow(/global/);
  });

  it("fails searches still waiting when closed, and starts again on the next search", async () => {
    const own = new RegexSearchThread();
    const waiting = expect(own.search(/a/g, "a".repeat(1_000_000))).rejects.toThrow(/closed/);
    await own.close();
    await waiting;
    expect(Array.from(await own.search(/b/g, "abcb"))).toEqual([1, 2, 3, 4]);
    await own.close();
  });
});

describe("long texts redacted off the event loop give the same result as in place", () => {
  // Above the 64 KiB at which texts are redacted one pattern at a time (and, with a search, off thread).
  it("on random texts with every built-in pattern's matches and near-misses", async () => {
    for (const [index, alphabet] of alphabets.entries()) {
      const compileRequest = request(randomText(index + 1, 70_000, alphabet, samples));
      const inPlace = await outcome(compileRequest);
      expect(inPlace).toMatch(/^ok /);
      expect(Buffer.from(inPlace.slice(3), "base64").toString("latin1")).toContain("[REDACTED:");
      expect(await outcome(compileRequest, thread.search)).toEqual(inPlace);
    }
  });

  it("refuses the same way when replacements outgrow the text allowance", async () => {
    const compileRequest = request(randomText(9, 150_000, alphabets[0]!, samples), "[" + "x".repeat(2_000) + "]");
    const inPlace = await outcome(compileRequest, undefined, 400_000);
    expect(inPlace).toMatch(new RegExp(`^${Code.ResourceExhausted}: hooks \\(redaction `));
    expect(await outcome(compileRequest, thread.search, 400_000)).toEqual(inPlace);
  });
});
