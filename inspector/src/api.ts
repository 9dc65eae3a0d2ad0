import { createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";

// The sidecar's own Connect JSON API, from the page's origin: the inspector sees exactly what a
// client with the same token would (authentication and tenant scoping are the RPCs').
const tokenKey = "contextd-inspector-token";

export const credentials = {
  get token(): string {
    return sessionStorage.getItem(tokenKey) ?? "";
  },
  set token(value: string) {
    if (value === "") sessionStorage.removeItem(tokenKey);
    else sessionStorage.setItem(tokenKey, value);
  },
};

const bearer: Interceptor = (next) => (request) => {
  const token = credentials.token;
  if (token !== "") request.header.set("authorization", `Bearer ${token}`);
  return next(request);
};

const transport = createConnectTransport({ baseUrl: location.origin, interceptors: [bearer] });
export const conversations = createClient(ConversationService, transport);
export const contexts = createClient(ContextService, transport);
