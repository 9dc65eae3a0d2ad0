import { randomUUID } from "node:crypto";

// A caller's request id is echoed only if it is short and printable; otherwise a fresh one is used.
const acceptableRequestId = /^[\x21-\x7e]{1,128}$/;

/** The request id of a call: the caller's `x-request-id` when acceptable, else a fresh UUID. */
export function requestIdOf(offered: string | string[] | undefined): string {
  return typeof offered === "string" && acceptableRequestId.test(offered) ? offered : randomUUID();
}
