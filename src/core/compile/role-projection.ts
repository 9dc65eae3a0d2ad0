import { Code, ConnectError } from "@connectrpc/connect";
import { TransformationAction, TransformationReason } from "#gen/contextd/v1/compile_pb";
import { ActorKind, Role } from "#gen/contextd/v1/message_pb";
import { segmentEnumerationOrder, segmentField } from "../model/segments.js";
import { setRecord, type CompileWork } from "./working-set.js";

/**
 * Stage 7: maps actor kinds to roles in the payload (first matching rule wins). Messages that take
 * part in tool rounds (calls or results) keep their role: projecting them would break pairing.
 * Pending and the current turn are not projected; `source` and persistence keep the stored role.
 */
export function applyRoleProjection(work: CompileWork): void {
  const rules = work.request.roleProjection?.rules ?? [];
  if (rules.length === 0) return;
  rules.forEach((rule, index) => {
    if (ActorKind[rule.actorKind] === undefined) {
      throw new ConnectError(`role_projection.rules[${index}].actor_kind: unknown actor kind ${rule.actorKind}`, Code.InvalidArgument);
    }
    if (rule.role === Role.UNSPECIFIED || Role[rule.role] === undefined) {
      throw new ConnectError(`role_projection.rules[${index}].role: a known role is required`, Code.InvalidArgument);
    }
  });
  for (const segment of segmentEnumerationOrder) {
    const field = segmentField(segment, "segment");
    let changed = false;
    const projected = work.segments[field].map((message) => {
      const kind = message.actor?.kind;
      if (kind === undefined) return message;
      const rule = rules.find((candidate) => candidate.actorKind === kind);
      if (!rule || rule.role === message.role) return message;
      if (message.role === Role.TOOL || message.parts.some((part) => part.kind.case === "toolCall" || part.kind.case === "toolResult")) {
        return message;
      }
      changed = true;
      setRecord(work, message.id, TransformationAction.FORMATTED, TransformationReason.ROLE_PROJECTION, segment);
      return { ...message, role: rule.role };
    });
    if (changed) work.segments = { ...work.segments, [field]: projected };
  }
}
