/**
 * Conversation ids in code-unit order (what `Array.prototype.sort` and `<` use), for paging
 * `list` by prefix without sorting every id on every page: a page costs a binary search and its
 * own ids, O(log n + page). Adding an id is a binary search and one array insertion (a native
 * move of the ids after it). The id order never removes one (a cleared conversation still exists);
 * the memory store's update order removes a conversation's key when a commit gives it a new one.
 */
export class SortedIds {
  private readonly ids: string[] = [];

  get size(): number {
    return this.ids.length;
  }

  /** Adds `id` if it is not there yet. */
  add(id: string): void {
    const at = this.firstAtLeast(id);
    if (this.ids[at] !== id) this.ids.splice(at, 0, id);
  }

  /** Removes `id` if it is there. */
  delete(id: string): void {
    const at = this.firstAtLeast(id);
    if (this.ids[at] === id) this.ids.splice(at, 1);
  }

  /** Up to `limit` ids starting with `prefix` and greater than `after`, in order. */
  page(prefix: string, after: string, limit: number): string[] {
    let index = after >= prefix ? this.firstAtLeast(after) : this.firstAtLeast(prefix);
    if (this.ids[index] === after) index++;
    const page: string[] = [];
    for (; index < this.ids.length && page.length < limit; index++) {
      const id = this.ids[index]!;
      // Ids with the prefix are contiguous in this order: the first one without it ends them.
      if (!id.startsWith(prefix)) break;
      page.push(id);
    }
    return page;
  }

  private firstAtLeast(id: string): number {
    let low = 0;
    let high = this.ids.length;
    while (low < high) {
      const middle = (low + high) >>> 1;
      if (this.ids[middle]! < id) low = middle + 1;
      else high = middle;
    }
    return low;
  }
}
