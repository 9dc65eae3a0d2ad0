/**
 * The codec's immutability rule in code: a conversation message (`contextd.v1.Message`) a request
 * carries is frozen all the way down, whichever codec decoded it. The binary decoder hands the same
 * object to many calls, so it must be frozen; freezing the JSON-decoded ones too means a core bug
 * that mutates its input throws on every path, not only on the binary one. Lists are left
 * unfrozen (V8 copies frozen arrays ~10x slower, and the engine copies history lists).
 */

/** Freezes `value` and everything reachable from it; typed arrays (bytes fields) cannot be frozen and are left as they are. */
export function deepFreeze(value: object): void {
  if (Object.isFrozen(value) || ArrayBuffer.isView(value)) return;
  Object.freeze(value);
  for (const key of Object.keys(value)) {
    const child = (value as Record<string, unknown>)[key];
    if (typeof child === "object" && child !== null) deepFreeze(child);
  }
}

const conversationMessageTypeName = "contextd.v1.Message";

/** Deep-freezes every conversation message reachable from `message` (a decoded request). */
export function freezeConversationMessages(message: object): void {
  const pending: object[] = [message];
  while (pending.length > 0) {
    const value = pending.pop()!;
    if (ArrayBuffer.isView(value)) continue;
    if ((value as { $typeName?: string }).$typeName === conversationMessageTypeName) {
      deepFreeze(value);
      continue;
    }
    for (const key of Object.keys(value)) {
      const child = (value as Record<string, unknown>)[key];
      if (typeof child === "object" && child !== null) pending.push(child);
    }
  }
}
