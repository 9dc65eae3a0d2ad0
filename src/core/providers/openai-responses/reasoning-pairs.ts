import { Provider, type Message } from "#gen/contextd/v1/message_pb";
import { isSendableCallItemId } from "../rendered-ids.js";

/**
 * Which reasoning items and item ids of one assistant message a Responses body sends. The API
 * pairs a reasoning item with the item it produced by their ids, and rejects either half alone:
 * "function_call was provided without its required 'reasoning' item" when a `fc_…` id comes
 * without its reasoning (cleared, trimmed, or never stored), and "reasoning was provided without
 * its required following item" when nothing follows the reasoning. So:
 * - a Responses reasoning part is sent only when an item of the same message follows it (text or a
 *   call); a lone one (reasoning, then the next user turn) is left out;
 * - a call is sent with its item `id` only when a reasoning item of the same message was sent
 *   before it and the id is one the API issued (`fc_…`); otherwise it goes without `id`, which the
 *   API accepts for any call (its `call_id` is what results answer).
 * Text is always sent without an item id (contextd keeps none for it).
 */
export interface ResponsesPairs {
  /** Part indexes of reasoning parts sent. */
  reasoning: ReadonlySet<number>;
  /** Part indexes of tool calls sent with their item id. */
  itemIds: ReadonlySet<number>;
}

export function responsesPairs(message: Message): ResponsesPairs {
  const reasoning = new Set<number>();
  const itemIds = new Set<number>();
  // Index of the first part after `index` that renders as an item.
  let nextItem = -1;
  const followedByItem: boolean[] = [];
  for (let index = message.parts.length - 1; index >= 0; index--) {
    followedByItem[index] = nextItem >= 0;
    const kind = message.parts[index]!.kind;
    if ((kind.case === "text" && kind.value.text !== "") || kind.case === "toolCall") nextItem = index;
  }
  let reasoningSent = false;
  message.parts.forEach((part, index) => {
    const kind = part.kind;
    if (kind.case === "reasoning" && kind.value.provider === Provider.OPENAI_RESPONSES && followedByItem[index]) {
      reasoning.add(index);
      reasoningSent = true;
    }
    if (kind.case === "toolCall" && reasoningSent && isSendableCallItemId(kind.value.itemId)) itemIds.add(index);
  });
  return { reasoning, itemIds };
}
