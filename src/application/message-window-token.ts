import { Code, ConnectError } from "@connectrpc/connect";
import { createHash } from "node:crypto";

/**
 * Where the next page of a `ReadMessages` window starts, and what pins it: the version read, the
 * segment, the window in positions as resolved on the first page, and a check binding the token to
 * its conversation and to the window fields of the first request. Tokens are opaque to clients
 * (base64url) but not secret: a forged one can only name another window of a conversation the
 * caller may read anyway, and every number in it is checked against the state it is used on.
 */
export interface MessageWindowToken {
  version: bigint;
  /** The `Segment` enum value read. */
  segment: number;
  /** The position the next page starts at. */
  next: number;
  windowStart: number;
  windowEnd: number;
  /** `windowCheck` of the first request: 8 characters for the conversation, 8 for the window fields. */
  check: string;
}

const prefix = "m";
const tokenShape = /^-?\d+\.\d+\.\d+\.\d+\.\d+\.[A-Za-z0-9_-]{16}$/;

export function encodeMessageWindowToken(token: MessageWindowToken): string {
  const fields = [token.version, token.segment, token.next, token.windowStart, token.windowEnd, token.check].join(".");
  return prefix + Buffer.from(fields, "utf8").toString("base64url");
}

/** A token from `encodeMessageWindowToken`; anything else is INVALID_ARGUMENT. */
export function decodeMessageWindowToken(token: string): MessageWindowToken {
  const refused = () => new ConnectError(`page_token: "${token.slice(0, 64)}" is not a token from a previous ReadMessages response`, Code.InvalidArgument);
  if (!token.startsWith(prefix) || !/^[A-Za-z0-9_-]+$/.test(token.slice(prefix.length))) throw refused();
  const text = Buffer.from(token.slice(prefix.length), "base64url").toString("utf8");
  if (!tokenShape.test(text)) throw refused();
  const [version, segment, next, windowStart, windowEnd, check] = text.split(".") as [string, string, string, string, string, string];
  const numbers = [segment, next, windowStart, windowEnd].map(Number);
  if (numbers.some((value) => !Number.isSafeInteger(value))) throw refused();
  const [segmentNumber, nextPosition, start, end] = numbers as [number, number, number, number];
  if (!(start <= nextPosition && nextPosition <= end)) throw refused();
  return { version: BigInt(version), segment: segmentNumber, next: nextPosition, windowStart: start, windowEnd: end, check };
}

/** The window fields of a request, as the check of its page tokens sees them. */
export interface WindowFields {
  conversationId: string;
  segment: number;
  last: number;
  start: bigint;
  end: bigint | undefined;
  version: bigint | undefined;
}

/**
 * 8 base64url characters of a digest of the conversation id, then 8 of one of the conversation and
 * the window fields: a later request that leaves the window fields unset is checked against the
 * first half, one that repeats them against the whole.
 */
export function windowCheck(fields: WindowFields): string {
  const window = [fields.conversationId, fields.segment, fields.last, fields.start, fields.end ?? "", fields.version ?? ""].join("\u0000");
  return digest(fields.conversationId) + digest(window);
}

/** Whether `token` was issued for a first request like this one (see `windowCheck`). */
export function tokenFits(token: MessageWindowToken, fields: WindowFields): boolean {
  if (windowFieldsUnset(fields)) return token.check.slice(0, 8) === digest(fields.conversationId);
  return token.check === windowCheck(fields);
}

function digest(text: string): string {
  return createHash("sha256").update(text, "utf8").digest("base64url").slice(0, 8);
}

/** True when a request leaves every window field unset. */
function windowFieldsUnset(fields: WindowFields): boolean {
  return fields.segment === 0 && fields.last === 0 && fields.start === 0n && fields.end === undefined && fields.version === undefined;
}
