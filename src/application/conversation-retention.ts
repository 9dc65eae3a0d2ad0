import { Code, ConnectError } from "@connectrpc/connect";
import type { ConversationState } from "#gen/contextd/v1/state_pb";
import { listById } from "../store/conversation-listing.js";
import type { ConversationStore } from "../store/conversation-store.js";
import { encodePageToken } from "../store/page-token.js";
import type { StateSizeLimit } from "./state-size.js";

/**
 * A tenant's (a prefix's) conversations as a whole: deleted a page at a time, exported as a stream
 * of states. Why it exists: both walk the store's id listing from a token, so one call or one
 * stream never holds more than a page of conversations, and a store needs nothing beyond its
 * listing, `load` and `delete` for them (every store's, tested by the one contract).
 */

/** Conversations one `DeleteConversations` call examines when the request leaves it 0, and the most it may ask for. */
export const defaultDeletePageSize = 100;
export const maxDeletePageSize = 1_000;
/** Conversations an export reads from the store at a time: what one export holds at most besides the state being sent. */
export const exportPageSize = 16;

/** What one `deletePage` did. */
export interface DeletedPage {
  deleted: number;
  /** Empty when the prefix has no more conversations past this page. */
  nextPageToken: string;
}

/**
 * Deletes the conversations of one listing page of `prefix` from `pageToken` (at most
 * `pageSize`), one store delete each, a few at a time. The token is the listing's, so a call
 * resumes after the last id the previous one examined.
 */
export async function deletePage(store: ConversationStore, prefix: string, pageToken: string, pageSize: number): Promise<DeletedPage> {
  if (pageSize < 0 || pageSize > maxDeletePageSize) throw new ConnectError(`page_size: 0 to ${maxDeletePageSize}, got ${pageSize}`, Code.InvalidArgument);
  const page = await store.list(listById(prefix, pageSize === 0 ? defaultDeletePageSize : pageSize, pageToken));
  let deleted = 0;
  const ids = page.conversations.map((summary) => summary.conversationId);
  // Eight at a time: a page of 1,000 neither waits on 1,000 round trips in turn nor sends them at once.
  for (let start = 0; start < ids.length; start += 8) {
    const versions = await Promise.all(ids.slice(start, start + 8).map((id) => store.delete(id, undefined)));
    deleted += versions.filter((version) => version > 0n).length;
  }
  return { deleted, nextPageToken: page.nextPageToken };
}

/** One exported conversation. */
export interface ExportedState {
  state: ConversationState;
  /** The state was over the message limit: it goes without its segments. */
  withoutMessages: boolean;
  /** Where an export resumes after this conversation. */
  resumeToken: string;
}

/**
 * The states of `prefix`'s conversations in id order after `resumeToken` (a `resumeToken` of an
 * earlier export, the same as a listing's page token), read `exportPageSize` at a time; a state
 * over the message limit goes without its messages, so no conversation stops the export.
 * A conversation deleted or expired between the listing and its load is left out.
 */
export async function* exportStates(store: ConversationStore, limit: StateSizeLimit, prefix: string, resumeToken: string, signal: AbortSignal): AsyncGenerator<ExportedState> {
  let token = resumeToken;
  do {
    const page = await store.list(listById(prefix, exportPageSize, token));
    for (const { conversationId } of page.conversations) {
      if (signal.aborted) return;
      const state = await store.load(conversationId);
      if (state.version === 0n) continue;
      yield { ...fitted(limit, state), resumeToken: encodePageToken(conversationId) };
    }
    token = page.nextPageToken;
  } while (token !== "" && !signal.aborted);
}

function fitted(limit: StateSizeLimit, state: ConversationState): { state: ConversationState; withoutMessages: boolean } {
  try {
    limit.assertStoredFits(state);
    return { state, withoutMessages: false };
  } catch (error) {
    if (!(error instanceof ConnectError) || error.code !== Code.ResourceExhausted) throw error;
    return { state: { ...state, system: [], history: [], memory: [], tools: [] }, withoutMessages: true };
  }
}
