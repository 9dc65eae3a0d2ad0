import { describe, expect, it } from "vitest";
import { distinctTerms, maxTermCharacters, maxWordCharacters, termCounts } from "../../../src/core/recall/recall-terms.js";

describe("recall terms", () => {
  it("finds a path whole and by its parts, lower-cased, without trailing punctuation", () => {
    expect(distinctTerms("Read src/Store/redis-scripts.ts.")).toEqual(["read", "src", "store", "redis", "scripts", "ts", "src/store/redis-scripts.ts"]);
  });

  it("splits JSON tool arguments at quotes, braces and colons, so a path or a command inside is a word of its own", () => {
    const terms = distinctTerms('{"path":"./test/a_b.py","command":"npm run bench:recall -- --size 5000"}');
    expect(terms).toContain("./test/a_b.py");
    expect(terms).toContain("a_b.py".split(".")[0]!.split("_")[0]);
    expect(terms).toContain("bench:recall");
    expect(terms).toContain("--size");
    expect(terms).toContain("5000");
    expect(terms).not.toContain(":");
  });

  it("keeps words of other scripts whole and counts repeats", () => {
    const counts = termCounts("Grüße grüße — 東京 error error error");
    expect(counts.counts.get("grüße")).toBe(2);
    expect(counts.counts.get("東京")).toBe(1);
    expect(counts.counts.get("error")).toBe(3);
    expect(counts.counts.has("—")).toBe(false);
    expect(counts.length).toBe(6);
  });

  it("skips runs and words past their limits (a hash, base64) and punctuation alone", () => {
    const long = "a".repeat(maxTermCharacters + 1);
    const longWord = `${"b".repeat(maxWordCharacters)}/c`;
    expect(distinctTerms(`${long} x ... ,;| -- ${longWord}`)).toEqual(["x", "c"]);
  });

  it("is linear: a megabyte of punctuation or of one word is split in one pass", () => {
    // Each call reads its input once; the counts prove what was found, not how fast.
    expect(termCounts("./".repeat(500_000)).length).toBe(0);
    expect(termCounts("x".repeat(1_000_000)).length).toBe(0);
    expect(termCounts("a/".repeat(500_000)).length).toBe(500_000);
  });
});

describe("recall terms of characters that lower-case to two", () => {
  it("lower-cases each term when the text's lower case changes its length", () => {
    // "İ" (U+0130) lower-cases to "i̇" (two code units): the offsets of the lowered text no longer match.
    expect(distinctTerms("İstanbul src/Ab.ts")).toEqual(["i̇stanbul", "src", "ab", "ts", "src/ab.ts"]);
  });
});
