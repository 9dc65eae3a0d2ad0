import type { TermCounts } from "./recall-terms.js";

/**
 * Why it exists: a recall ranks the stored messages for a query in one pass over them, without an
 * index of the whole conversation: BM25 needs each message's frequencies of the query's terms and
 * its length, and the document frequencies and mean length of all the messages ranked, which this
 * collects as the messages go by. Memory and time are linear in the messages added; only messages
 * that hold a query term are kept until `top`.
 */

/** BM25's term-frequency saturation and length normalisation, the usual values. */
export const bm25K1 = 1.2;
export const bm25B = 0.75;

/** A message's place in the order it was added, and its score. */
export interface RankedMessage {
  index: number;
  score: number;
}

export class Bm25Ranking {
  private readonly documentFrequencies: number[];
  private readonly matches: Array<{ index: number; length: number; frequencies: number[] }> = [];
  private documents = 0;
  private totalLength = 0;

  constructor(private readonly queryTerms: readonly string[]) {
    this.documentFrequencies = queryTerms.map(() => 0);
  }

  /** Adds the message numbered `index` with its term counts. */
  add(index: number, terms: TermCounts): void {
    this.documents++;
    this.totalLength += terms.length;
    let frequencies: number[] | undefined;
    this.queryTerms.forEach((term, position) => {
      const frequency = terms.counts.get(term);
      if (frequency === undefined) return;
      frequencies ??= this.queryTerms.map(() => 0);
      frequencies[position] = frequency;
      this.documentFrequencies[position]!++;
    });
    if (frequencies) this.matches.push({ index, length: terms.length, frequencies });
  }

  /** How many messages were added. */
  get size(): number {
    return this.documents;
  }

  /** The `count` best-scoring messages that hold a query term, best first; ties in the order added. */
  top(count: number): RankedMessage[] {
    const averageLength = this.documents === 0 ? 0 : this.totalLength / this.documents;
    const weights = this.documentFrequencies.map((frequency) => Math.log(1 + (this.documents - frequency + 0.5) / (frequency + 0.5)));
    // The best `count` kept in order as the matches go by: linear in the matches for a bounded count.
    const best: RankedMessage[] = [];
    for (const match of this.matches) {
      const norm = bm25K1 * (1 - bm25B + (averageLength === 0 ? 0 : (bm25B * match.length) / averageLength));
      let score = 0;
      match.frequencies.forEach((frequency, position) => {
        if (frequency > 0) score += (weights[position]! * frequency * (bm25K1 + 1)) / (frequency + norm);
      });
      if (best.length === count && (count === 0 || score <= best[count - 1]!.score)) continue;
      let at = best.length;
      while (at > 0 && best[at - 1]!.score < score) at--;
      best.splice(at, 0, { index: match.index, score });
      if (best.length > count) best.pop();
    }
    return best;
  }
}
