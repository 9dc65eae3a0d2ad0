import { describe, expect, it } from "vitest";
import { SortedIds } from "../../src/store/sorted-ids.js";

// The memory store's list index (issue 29: ListConversations sorted every id on every page).
describe("SortedIds", () => {
  it("pages by prefix and after exactly as filtering and sorting every id does", () => {
    let seed = 7;
    const random = () => ((seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31);
    const alphabet = ["a", "b", "/", "é", "😀", "z"];
    const word = (length: number) => Array.from({ length }, () => alphabet[Math.floor(random() * alphabet.length)]).join("");
    const index = new SortedIds();
    const all = new Set<string>();
    for (let added = 0; added < 2_000; added++) {
      const id = word(1 + Math.floor(random() * 5));
      index.add(id);
      all.add(id);
    }
    expect(index.size).toBe(all.size);
    const sorted = [...all].sort();
    for (let query = 0; query < 500; query++) {
      const prefix = random() < 0.2 ? "" : word(Math.floor(random() * 3));
      const after = random() < 0.3 ? "" : word(1 + Math.floor(random() * 4));
      const limit = 1 + Math.floor(random() * 20);
      const expected = sorted.filter((id) => id.startsWith(prefix) && id > after).slice(0, limit);
      expect({ prefix, after, limit, page: index.page(prefix, after, limit) }).toEqual({ prefix, after, limit, page: expected });
    }
  });

  it("walks every id with a prefix page by page", () => {
    const index = new SortedIds();
    for (const id of ["t/3", "u/1", "t/1", "t/2", "s/9", "t/1"]) index.add(id);
    const seen: string[] = [];
    let after = "";
    for (;;) {
      const page = index.page("t/", after, 2);
      seen.push(...page);
      if (page.length < 2) break;
      after = page.at(-1)!;
    }
    expect(seen).toEqual(["t/1", "t/2", "t/3"]);
  });
});
