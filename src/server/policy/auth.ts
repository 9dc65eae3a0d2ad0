import { createHash, timingSafeEqual } from "node:crypto";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import type { Message } from "@bufbuild/protobuf";
import type { AuthToken } from "../operations/config.js";
import { tenantKey } from "./call-context.js";
import { inspectRequestMessages } from "./request-messages.js";

/** Services anyone may call: probes and tooling must work without credentials. */
const openServices = new Set(["grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"]);

/**
 * The configured bearer tokens. Tokens are compared as SHA-256 digests with `timingSafeEqual`,
 * against every configured token, so neither the length nor the position of a match leaks through
 * timing. Used twice per call: by admission on the headers alone, before any of the body is held
 * in memory, and by the interceptor, which also scopes the call to the token's tenant.
 */
export class BearerTokens {
  private readonly known: { digest: Buffer; tenant: string }[];

  constructor(tokens: AuthToken[]) {
    this.known = tokens.map((entry) => ({ digest: digest(entry.token), tenant: entry.tenant }));
  }

  /**
   * The tenant of the caller presenting `authorization` for `service`/`method` ("" = every
   * conversation), or undefined when no identity is needed (no tokens configured, or an open
   * service: health, reflection). UNAUTHENTICATED for a missing or unknown token.
   */
  identify(service: string, method: string, authorization: string | null | undefined): string | undefined {
    if (this.known.length === 0 || openServices.has(service)) return undefined;
    const match = /^Bearer\s+(.+)$/i.exec(authorization ?? "");
    if (!match) throw new ConnectError(`${service}/${method}: missing "authorization: Bearer <token>" header`, Code.Unauthenticated);
    const presented = digest(match[1]!.trim());
    let tenant: string | undefined;
    for (const entry of this.known) {
      if (timingSafeEqual(presented, entry.digest) && tenant === undefined) tenant = entry.tenant;
    }
    if (tenant === undefined) throw new ConnectError(`${service}/${method}: unknown bearer token`, Code.Unauthenticated);
    return tenant;
  }
}

/** Bearer-token authentication and tenant scoping. With no tokens configured every call passes. */
export function authenticate(tokens: BearerTokens): Interceptor {
  return (next) => async (request) => {
    const tenant = tokens.identify(request.service.typeName, request.method.name, request.header.get("authorization"));
    if (tenant === undefined) return next(request);
    request.contextValues.set(tenantKey, tenant);
    if (tenant === "") return next(request);
    return next(inspectRequestMessages(request, (message) => assertTenantScope(tenant, message)));
  };
}

/**
 * A tenant's token may only name conversations whose id starts with `<tenant>/` (and list with such
 * a prefix, or with none: ListConversations then lists `<tenant>/`, see conversation-service.ts).
 * Stateless compiles (no conversation id) are allowed.
 */
export function assertTenantScope(tenant: string, message: Message): void {
  const prefix = `${tenant}/`;
  for (const { path, id, required } of conversationReferences(message)) {
    if ((id !== "" || required) && !id.startsWith(prefix)) {
      throw new ConnectError(
        `${message.$typeName}.${path} "${id}" is outside tenant "${tenant}": ids must start with "${prefix}"`,
        Code.PermissionDenied,
      );
    }
  }
}

// Where request messages name conversations. `required` = an empty value would reach beyond the
// tenant. None is today: an empty list prefix under a tenant's token lists that tenant's ids.
function conversationReferences(message: Message): { path: string; id: string; required: boolean }[] {
  const fields = message as unknown as Record<string, unknown>;
  const references: { path: string; id: string; required: boolean }[] = [];
  if (typeof fields.conversationId === "string") references.push({ path: "conversation_id", id: fields.conversationId, required: false });
  if (message.$typeName === "contextd.v1.ForkRequest") {
    references.push({ path: "new_conversation_id", id: String(fields.newConversationId ?? ""), required: false });
  }
  if (
    message.$typeName === "contextd.v1.ListConversationsRequest" ||
    message.$typeName === "contextd.v1.DeleteConversationsRequest" ||
    message.$typeName === "contextd.v1.ExportConversationsRequest"
  ) {
    references.push({ path: "prefix", id: String(fields.prefix ?? ""), required: false });
  }
  // CompileStreamRequest.request and CompileSessionRequest.compile wrap a CompileRequest.
  const wrapped = message.$typeName === "contextd.v1.CompileStreamRequest"
    ? (fields.request as { conversationId?: string } | undefined)
    : message.$typeName === "contextd.v1.CompileSessionRequest" && (fields.kind as { case?: string }).case === "compile"
      ? ((fields.kind as { value: { conversationId?: string } }).value)
      : undefined;
  if (wrapped?.conversationId !== undefined) {
    const path = message.$typeName === "contextd.v1.CompileStreamRequest" ? "request.conversation_id" : "compile.conversation_id";
    references.push({ path, id: wrapped.conversationId, required: false });
  }
  return references;
}

function digest(token: string): Buffer {
  return createHash("sha256").update(token).digest();
}
