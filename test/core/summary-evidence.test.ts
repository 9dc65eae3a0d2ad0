import { describe, expect, it } from "vitest";
import { SummaryFactKind } from "#gen/contextd/v1/context_service_pb";
import { Role } from "#gen/contextd/v1/message_pb";
import { extractSummaryFacts, maxFactCharacters, maxFacts, maxScannedCharacters, maxScannedCharactersPerText, summaryTemplate } from "../../src/core/compile/summary-evidence.js";
import { assistant, call, message, result, text, tool, user } from "../providers/build-messages.js";

const kinds = (facts: ReturnType<typeof extractSummaryFacts>["facts"]) => facts.map((fact) => [SummaryFactKind[fact.kind], fact.text, fact.messageId]);

describe("summary evidence", () => {
  it("has the six sections, as keys and as prompt text", () => {
    expect(summaryTemplate.sections.map((section) => section.key)).toEqual(["goal", "decisions", "open_questions", "files", "commands", "errors"]);
    expect(summaryTemplate.text.startsWith("## Goal\n")).toBe(true);
    expect(summaryTemplate.text).toContain("\n\n## Open questions\n");
  });

  it("finds file paths, URLs, commands, error messages, tool names and ids, each once, where they first appear", () => {
    const { facts, truncated } = extractSummaryFacts([
      user("u1", "Fix the failing test in src/app.ts, see https://github.com/acme/app/issues/12. It broke and/or hangs."),
      assistant("a1", call("c1", "bash", JSON.stringify({ command: "npm test -- src/app.test.ts" }))),
      tool("t1", result("c1", "bash", { text: "FAIL src/app.test.ts\nTypeError: x is undefined at /work/src/app.ts:12:5" }, { isError: true })),
      assistant("a2", text("Run `git diff HEAD~1` first.\n$ npx vitest run src\nCommit 3f2a9c1b, ticket PROJ-42, run 123e4567-e89b-12d3-a456-426614174000; read ./docs/setup.md and src/app.ts again.")),
    ]);
    expect(truncated).toBe(false);
    expect(kinds(facts)).toEqual([
      ["URL", "https://github.com/acme/app/issues/12", "u1"],
      ["FILE_PATH", "src/app.ts", "u1"],
      ["TOOL_NAME", "bash", "a1"],
      ["COMMAND", "npm test -- src/app.test.ts", "a1"],
      ["FILE_PATH", "src/app.test.ts", "a1"],
      ["ERROR_MESSAGE", "FAIL src/app.test.ts", "t1"],
      ["FILE_PATH", "/work/src/app.ts", "t1"],
      ["ERROR_MESSAGE", "TypeError: x is undefined at /work/src/app.ts:12:5", "t1"],
      ["FILE_PATH", "./docs/setup.md", "a2"],
      ["COMMAND", "npx vitest run src", "a2"],
      ["COMMAND", "git diff HEAD~1", "a2"],
      ["ID", "3f2a9c1b", "a2"],
      ["ID", "PROJ-42", "a2"],
      ["ID", "123e4567-e89b-12d3-a456-426614174000", "a2"],
    ]);
  });

  it("keeps at most the bounded number of facts and characters, and says when it cut", () => {
    const many = extractSummaryFacts([user("u1", Array.from({ length: 400 }, (_, index) => `src/file${index}.ts`).join(" "))]);
    expect(many.facts).toHaveLength(maxFacts);
    expect(many.truncated).toBe(true);
    const long = extractSummaryFacts([user("u1", `https://example.com/${"a".repeat(3 * maxFactCharacters)}`)]);
    expect(long.facts[0]!.text).toHaveLength(maxFactCharacters);
    // A long text is read at its head and its tail, not in its middle.
    const output = `$ make build\n${"x ".repeat(maxScannedCharactersPerText)}src/middle.ts ${"y ".repeat(maxScannedCharactersPerText)}\nerror: build failed`;
    const longText = extractSummaryFacts([tool("t1", result("c1", "bash", { text: output }))]);
    expect(longText.truncated).toBe(true);
    expect(longText.facts.map((fact) => fact.text)).toEqual(["make build", "error: build failed"]);
    // Past the scan allowance nothing more is read: the path after it is not found.
    const filler = Array.from({ length: maxScannedCharacters / maxScannedCharactersPerText }, (_, index) => user(`f${index}`, "x".repeat(maxScannedCharactersPerText)));
    const huge = extractSummaryFacts([...filler, message("u2", Role.USER, [text("see src/late.ts")])]);
    expect(huge.truncated).toBe(true);
    expect(huge.facts).toEqual([]);
  });

  it("reads texts built to make backtracking engines take quadratic time, whole", () => {
    // Runs of path segments and punctuation with no end: each pattern is one linear pass.
    const adversarial = `${"a/".repeat(10_000)}${".".repeat(10_000)} ${"Error".repeat(2_000)} ${"/".repeat(10_000)} then src/ok.ts`;
    const { facts } = extractSummaryFacts([user("u1", adversarial)]);
    expect(facts.map((fact) => fact.text)).toContain("src/ok.ts");
    expect(facts.every((fact) => fact.text.length <= maxFactCharacters)).toBe(true);
  });
});
