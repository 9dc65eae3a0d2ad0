import { create, toBinary } from "@bufbuild/protobuf";
import { createHash } from "node:crypto";
import { CompileRequestSchema, CompileResultSchema, WarningSchema, type CompileRequest, type CompileResult, type Warning } from "#gen/contextd/v1/compile_pb";
import type { CommitOutcome } from "../store/conversation-store.js";

/**
 * What identifies a compile-commit for its idempotency key. The deltas a compile commits depend on
 * the state it read, and a retry reads the state its first attempt wrote, so the record is keyed by
 * the request instead: the same key with the same request is a retry, with another request a
 * reuse (INVALID_ARGUMENT). `include` only shapes the answer, so it is left out: a client whose
 * answer was over its receive limit retries asking for less. The prefix keeps it apart from delta
 * fingerprints of plain commits.
 */
export function compileRequestFingerprint(request: CompileRequest): string {
  const committed = request.include.length === 0 ? request : { ...request, include: [] };
  return "compile:" + createHash("sha256").update(toBinary(CompileRequestSchema, committed)).digest("hex");
}

/**
 * The answer to a retried compile-commit whose first attempt committed, when the compile is not
 * run again (its input state is gone): the result carries only `version` (the expected version
 * the original compiled), `committed_version` (the version it wrote) and an `idempotent_replay`
 * warning. A caller that lost the original result compiles the committed state again.
 */
export function replayedCompileResult(request: CompileRequest, outcome: CommitOutcome): CompileResult {
  return create(CompileResultSchema, {
    version: request.commit!.expectedVersion,
    committedVersion: outcome.version,
    warnings: [replayWarning(request, outcome, false)],
  });
}

/** Says that a retry applied nothing again, and whether its result is a fresh compile of what the first attempt committed. */
export function replayWarning(request: CompileRequest, outcome: CommitOutcome, recompiled: boolean): Warning {
  const what = recompiled
    ? `this result compiles that version again`
    : `the compile was not run again (compile the conversation without commit for its prompt)`;
  return create(WarningSchema, {
    code: "idempotent_replay",
    message: `commit.idempotency_key "${request.commit!.idempotencyKey}" already committed version ${outcome.version} of "${request.conversationId}"; ${what}`,
  });
}
