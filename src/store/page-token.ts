import { Code, ConnectError } from "@connectrpc/connect";

// A page token is the last id of the previous page, base64url-encoded so clients treat it as
// opaque. Listing resumes strictly after it, which stays correct when conversations are added or
// removed between pages.

export function encodePageToken(lastConversationId: string): string {
  return "a" + Buffer.from(lastConversationId, "utf8").toString("base64url");
}

/** "" for the first page; a token not produced by `encodePageToken` is INVALID_ARGUMENT. */
export function decodePageToken(token: string): string {
  if (token === "") return "";
  if (!token.startsWith("a") || !/^[A-Za-z0-9_-]+$/.test(token.slice(1))) {
    throw new ConnectError(`page_token "${token}" is not a token from a previous ListConversations response`, Code.InvalidArgument);
  }
  return Buffer.from(token.slice(1), "base64url").toString("utf8");
}
