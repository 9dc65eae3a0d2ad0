import { Code, ConnectError } from "@connectrpc/connect";

/**
 * The most elements of repeated fields (all of them together) the binary decoder reads of one
 * request (codec/protobuf-decoder.ts). A 16 MiB request
 * can hold 5 million 1-byte strings, and reading them held the event loop 1.6 s before any limit
 * (request messages, stream events) could look at the request (issue 29 #9); 900,000 took 230 to
 * 580 ms here, so 500,000 is about half that. Far above what a request needs: 10,000 messages
 * (`--max-messages`) with a few parts each, or 100,000 stream events. RESOURCE_EXHAUSTED once the
 * decode passes it. The decoder reads only requests (stored states are not bounded by it). JSON
 * requests are decoded by connect and bounded by --max-request-bytes and the per-request limits.
 */
export const maxRepeatedElements = 500_000;

/** RESOURCE_EXHAUSTED for a request past `maxRepeatedElements`, as soon as the decode passes it. */
export function repeatedElementsOverLimit(): ConnectError {
  return new ConnectError(`the request holds more than ${maxRepeatedElements} elements of repeated fields, the most one request may hold`, Code.ResourceExhausted);
}
