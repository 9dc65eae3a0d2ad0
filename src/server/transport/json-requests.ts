import type { Interceptor } from "@connectrpc/connect";
import { freezeConversationMessages } from "../../codec/immutability.js";
import { inspectRequestMessages } from "../policy/request-messages.js";

/**
 * Requests connect decodes itself (JSON) get the codec's immutability rule too: their
 * conversation messages are frozen all the way down, as the binary decoder's are, so what the
 * services and the engine may do with a request does not depend on its codec.
 */
export function freezeJsonRequests(): Interceptor {
  return (next) => async (request) => next(inspectRequestMessages(request, freezeConversationMessages));
}
