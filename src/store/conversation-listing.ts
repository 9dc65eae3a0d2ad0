import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { ConversationSummarySchema, type ConversationSummary } from "#gen/contextd/v1/conversation_service_pb";
import { decodePageToken, encodePageToken } from "./page-token.js";

/**
 * What a `list` asks for and how every store turns what it examined into a page. Why it exists:
 * the filters (prefix, labels, updated since), the page tokens of both orders and the bound on
 * what one request examines are the contract of the listing; each store only reads its index in
 * order from a position (memory: sorted arrays, Redis: sorted sets, Postgres: b-tree indexes).
 */

export type ListOrder = "id" | "updated";

/** One page of `list`. */
export interface ConversationPage {
  conversations: ConversationSummary[];
  /** Empty when there are no more pages. */
  nextPageToken: string;
}

export interface ListQuery {
  prefix: string;
  pageSize: number;
  pageToken: string;
  /** Every one must be among the conversation's labels with this value. */
  labels: Record<string, string>;
  /** 0n = any. */
  updatedSinceUnixMs: bigint;
  order: ListOrder;
}

/** A query of the id order without filters (what `list` was before the filters). */
export function listById(prefix: string, pageSize: number, pageToken: string): ListQuery {
  return { prefix, pageSize, pageToken, labels: {}, updatedSinceUnixMs: 0n, order: "id" };
}

/**
 * How many stored conversations past the ones a page returns one request may examine while they
 * do not match the filters: one request costs at most `pageSize` + this many entries read.
 */
export const listScanAllowance = 1_000;

/** A position in a listing: the last entry examined. `updatedAtUnixMs` is the order's key in the updated order. */
export interface ListPosition {
  conversationId: string;
  updatedAtUnixMs: bigint;
}

/** How many entries a store reads past the position: one more than it may examine says whether more follow. */
export function entriesToRead(query: ListQuery): number {
  return examinedLimit(query) + 1;
}

function examinedLimit(query: ListQuery): number {
  return filtered(query) ? query.pageSize + listScanAllowance : query.pageSize;
}

/** Whether entries may be left out by something other than the id order's prefix range. */
function filtered(query: ListQuery): boolean {
  return Object.keys(query.labels).length > 0 || query.updatedSinceUnixMs > 0n || (query.order === "updated" && query.prefix !== "");
}

/** The position the query's token names (undefined on the first page); INVALID_ARGUMENT for a token of the other order. */
export function positionOf(query: ListQuery): ListPosition | undefined {
  const { pageToken, order } = query;
  if (pageToken === "") return undefined;
  if (order === "id") {
    if (pageToken.startsWith("u")) throw otherOrder(pageToken, "updated", "id");
    return { conversationId: decodePageToken(pageToken), updatedAtUnixMs: 0n };
  }
  if (pageToken.startsWith("a")) throw otherOrder(pageToken, "id", "updated");
  const text = pageToken.startsWith("u") && /^[A-Za-z0-9_-]+$/.test(pageToken.slice(1)) ? Buffer.from(pageToken.slice(1), "base64url").toString("utf8") : "";
  const match = /^(\d{1,16}):/s.exec(text);
  if (!match || BigInt(match[1]!) > BigInt(Number.MAX_SAFE_INTEGER)) throw new ConnectError(`page_token "${pageToken}" is not a token from a previous ListConversations response`, Code.InvalidArgument);
  return { updatedAtUnixMs: BigInt(match[1]!), conversationId: text.slice(match[0].length) };
}

function otherOrder(token: string, of: string, asked: string): ConnectError {
  return new ConnectError(`page_token "${token}" is a token of the ${of} order, not of the ${asked} order the request asks for`, Code.InvalidArgument);
}

function tokenOf(order: ListOrder, position: ListPosition): string {
  if (order === "id") return encodePageToken(position.conversationId);
  return "u" + Buffer.from(`${position.updatedAtUnixMs}:${position.conversationId}`, "utf8").toString("base64url");
}

/** One entry a store read in the listing's order: its position, and its summary (undefined: an entry without a conversation, skipped). */
export interface ExaminedEntry {
  position: ListPosition;
  summary: ConversationSummary | undefined;
}

/**
 * The page of `read` (what the store read from the query's position in order, `entriesToRead`
 * entries at most): the matching summaries, up to the page size and within what one request may
 * examine, and the token of the last entry examined when more may follow.
 */
export function pageOf(query: ListQuery, read: readonly ExaminedEntry[]): ConversationPage {
  const limit = examinedLimit(query);
  const conversations: ConversationSummary[] = [];
  let examined = 0;
  for (const entry of read) {
    if (examined === limit || conversations.length === query.pageSize) return { conversations, nextPageToken: tokenOf(query.order, read[examined - 1]!.position) };
    examined++;
    const { summary } = entry;
    // Newest first: an entry older than `updated_since` ends the listing.
    if (query.order === "updated" && query.updatedSinceUnixMs > 0n && entry.position.updatedAtUnixMs < query.updatedSinceUnixMs) break;
    if (summary !== undefined && matches(query, summary)) conversations.push(summary);
  }
  return { conversations, nextPageToken: "" };
}

/** Whether `summary` passes the query's filters. */
export function matches(query: ListQuery, summary: ConversationSummary): boolean {
  if (!summary.conversationId.startsWith(query.prefix)) return false;
  if (summary.updatedAtUnixMs < query.updatedSinceUnixMs) return false;
  for (const [key, value] of Object.entries(query.labels)) if (!Object.hasOwn(summary.labels, key) || summary.labels[key] !== value) return false;
  return true;
}

/** A listing entry's summary. */
export function summaryOf(conversationId: string, version: bigint, createdAtUnixMs: bigint, updatedAtUnixMs: bigint, title: string, labels: Record<string, string>, expiresAtUnixMs = 0n): ConversationSummary {
  return create(ConversationSummarySchema, { conversationId, version, createdAtUnixMs, updatedAtUnixMs, title, labels, expiresAtUnixMs });
}
