import { ByteBoundedLru } from "../core/byte-bounded-lru.js";
import type { CompiledPrefix, CompileMemory } from "../core/compile/cache-impact.js";

/**
 * The last compile of each conversation for each provider and model (the compile's key), as much
 * as `CompileResult.cache_impact` needs: one short
 * digest per payload entry. Bounded by bytes (`--cache-impact-bytes`), least recently compiled
 * conversations forgotten first; a forgotten conversation's next compile reports every token as
 * re-written (`previous_version` 0). 24 bytes per digest, 64 per conversation and the first history
 * message's id are counted: a
 * 200-message prompt costs about 5 KB, so the default 16 MiB holds ~3,000 such conversations.
 */
export class RecentCompiles implements CompileMemory {
  private readonly entries: ByteBoundedLru<string, CompiledPrefix>;

  constructor(maxBytes: number) {
    this.entries = new ByteBoundedLru({ maxBytes });
  }

  previous(key: string): CompiledPrefix | undefined {
    return this.entries.get(key);
  }

  remember(key: string, prefix: CompiledPrefix): void {
    const bytes = 64 + key.length * 2 + prefix.digests.length * 24 + (prefix.history ? 16 + prefix.history.firstId.length * 2 : 0);
    this.entries.set(key, prefix, bytes);
  }

  /** Bytes counted for what is remembered now. */
  get bytes(): number {
    return this.entries.bytes;
  }
}
