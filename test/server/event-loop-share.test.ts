import * as grpc from "@grpc/grpc-js";
import { create, fromBinary, toBinary, type DescMessage, type DescMethod, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EstimatorKind } from "#gen/contextd/v1/compile_pb";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { Role } from "#gen/contextd/v1/message_pb";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "#gen/grpc/health/v1/health_pb";
import { grpcJsClient } from "../support/grpc-js.js";
import { startSidecar, type Sidecar } from "../support/sidecar.js";

// A request at the documented limits that is slow for a legitimate reason: 16 MiB of random
// letters counted by the TOKENIZER estimator, which gpt-tokenizer takes 10 to 26 s to count on this
// machine (`npm run bench:event-loop`), sent WITHOUT a deadline. The stages used to hold the event
// loop for all of it, so no other call could be answered until it ended. Now they give the loop a
// turn every ~20 ms of work: health checks sent while it runs answer SERVING within the 2 s the
// Docker probe allows (src/healthcheck.ts) — a deadline the old code exceeded five times over —
// and cancelling the call ends its work at the next turn.

const textMessage = (id: string, value: string) => ({ id, role: Role.USER, parts: [{ kind: { case: "text" as const, value: { text: value } } }] });

function randomLetters(length: number): string {
  let state = 7;
  const bytes = Buffer.alloc(length);
  for (let index = 0; index < length; index++) bytes[index] = 97 + (((state = (Math.imul(state, 1103515245) + 12345) >>> 0) >>> 8) % 26);
  return bytes.toString("latin1");
}

describe("one slow request without a deadline shares the event loop (real sidecar)", () => {
  let sidecar: Sidecar;
  let client: ReturnType<typeof grpcJsClient>;
  // Under the 16 MiB request limit with room for the envelope.
  const letters = randomLetters(16 * 1024 * 1024 - 64 * 1024);
  beforeAll(async () => {
    sidecar = await startSidecar();
    client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
  });
  afterAll(async () => {
    client?.close();
    await sidecar?.stop();
  });

  /** Starts a unary call that can be cancelled; settles with its response or its error. */
  function cancellable<I extends DescMessage, O extends DescMessage>(method: DescMethod & { input: I; output: O }, input: MessageInitShape<I>) {
    let call: grpc.ClientUnaryCall | undefined;
    const outcome = new Promise<MessageShape<O> | grpc.ServiceError>((resolve) => {
      call = client.raw.makeUnaryRequest(
        `/${method.parent.typeName}/${method.name}`,
        (message: MessageShape<I>) => Buffer.from(toBinary(method.input, message)),
        (bytes: Buffer) => fromBinary(method.output, bytes) as MessageShape<O>,
        create(method.input, input) as MessageShape<I>,
        new grpc.Metadata(),
        {},
        (error, response) => resolve(error ?? response!),
      );
    });
    return { outcome, cancel: () => call!.cancel() };
  }

  /** Eight health checks, 250 ms apart, each with the probe's 2 s deadline: all must answer SERVING. */
  async function healthAnswersThroughout(): Promise<void> {
    for (let check = 0; check < 8; check++) {
      await new Promise((resolve) => setTimeout(resolve, 250));
      const health = await client.unary(Health.method.check, { service: "" }, new grpc.Metadata(), { deadline: Date.now() + 2_000 });
      expect(health.status).toBe(ServingStatus.SERVING);
    }
  }

  /** After a cancel, the sidecar is free again: a small compile answers within 2 s. */
  async function answersSmallCompile(): Promise<void> {
    const small = await client.unary(ContextService.method.compile, { history: { messages: [textMessage("u1", "hello")] } }, new grpc.Metadata(), { deadline: Date.now() + 2_000 });
    expect(small.result?.payload?.history.map((message) => message.id)).toEqual(["u1"]);
  }

  it("Compile, TOKENIZER budget over 16 MiB of random letters: health answers while it runs; cancelled, it stops", async () => {
    const attack = cancellable(ContextService.method.compile, { history: { messages: [textMessage("u1", letters)] }, budget: { estimator: { kind: EstimatorKind.TOKENIZER } } });
    await healthAnswersThroughout();
    attack.cancel();
    const outcome = await attack.outcome;
    expect((outcome as grpc.ServiceError).code).toBe(grpc.status.CANCELLED);
    await answersSmallCompile();
  });

  it("CountTokens, TOKENIZER over 16 MiB of random letters: health answers while it runs; cancelled, it stops", async () => {
    const attack = cancellable(ContextService.method.countTokens, { messages: [textMessage("u1", letters)], estimator: { kind: EstimatorKind.TOKENIZER } });
    await healthAnswersThroughout();
    attack.cancel();
    const outcome = await attack.outcome;
    expect((outcome as grpc.ServiceError).code).toBe(grpc.status.CANCELLED);
    await answersSmallCompile();
  });
});
