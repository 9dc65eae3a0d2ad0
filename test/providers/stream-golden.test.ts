import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { create, toBinary, toJson, type JsonValue } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { MessageSchema, Provider, type Message } from "#gen/contextd/v1/message_pb";
import { DeltaSchema, type Delta } from "#gen/contextd/v1/state_pb";
import { applyDeltas } from "../../src/core/deltas/apply-deltas.js";
import { codeReason } from "../../src/core/model/error-details.js";
import { emptyConversationState } from "../../src/store/commit-plan.js";

/**
 * Stream golden vectors: test/golden/streams/<name>.json holds a provider's recorded-shape stream
 * and the equivalent non-streaming body (format in that folder's README). Both must append
 * byte-identical messages, equal to `expected_messages`. The Go and Python client tests read the
 * same files. `UPDATE_GOLDEN=1 npx vitest run test/providers/stream-golden.test.ts` rewrites
 * `expected_messages` from what the engine appends; review the diff before committing.
 */
const folder = fileURLToPath(new URL("../golden/streams/", import.meta.url));

interface StreamGolden {
  name: string;
  provider: keyof typeof Provider;
  events: JsonValue[];
  body?: JsonValue;
  interrupted?: boolean;
  abort_reason?: string;
  expected_messages?: JsonValue[];
  expected_error?: { code: string; message_contains: string };
}

const encode = (value: JsonValue) => new TextEncoder().encode(typeof value === "string" ? value : JSON.stringify(value));

/** A string event is sent as its text (Chat's `[DONE]`), anything else as its JSON. */
function streamDelta(golden: StreamGolden): Delta {
  return create(DeltaSchema, {
    operation: {
      case: "appendProviderStream",
      value: { provider: Provider[golden.provider], events: golden.events.map(encode), interrupted: golden.interrupted ?? false, abortReason: golden.abort_reason ?? "" },
    },
  });
}

function bodyDelta(golden: StreamGolden): Delta {
  return create(DeltaSchema, { operation: { case: "appendProviderResponse", value: { provider: Provider[golden.provider], json: encode(golden.body!) } } });
}

/** The history one delta appends to an empty conversation, message ids cleared. */
function appended(delta: Delta): Message[] {
  let counter = 0;
  const state = applyDeltas(emptyConversationState("golden-stream"), [delta], { newMessageId: () => `m${++counter}` });
  return state.history.map((message) => ({ ...message, id: "" }));
}

const goldens: StreamGolden[] = readdirSync(folder)
  .filter((file) => file.endsWith(".json"))
  .sort()
  .map((file) => JSON.parse(readFileSync(folder + file, "utf8")) as StreamGolden);

if (process.env["UPDATE_GOLDEN"] === "1") {
  for (const golden of goldens) {
    if (golden.expected_error) continue;
    golden.expected_messages = appended(streamDelta(golden)).map((message) => toJson(MessageSchema, message));
    writeFileSync(`${folder}${golden.name}.json`, JSON.stringify(golden, null, 2) + "\n");
  }
}

describe("stream golden vectors", () => {
  it("cover every provider, an interrupted stream and malformed ones", () => {
    const providers = new Set(goldens.filter((golden) => golden.body !== undefined).map((golden) => golden.provider));
    expect([...providers].sort()).toEqual(["ANTHROPIC_MESSAGES", "GEMINI", "OPENAI_CHAT", "OPENAI_RESPONSES"]);
    expect(goldens.some((golden) => golden.interrupted)).toBe(true);
    expect(goldens.some((golden) => golden.expected_error)).toBe(true);
  });

  for (const golden of goldens) {
    if (golden.expected_error) {
      it(`${golden.name}: is refused`, () => {
        let caught: unknown;
        try {
          appended(streamDelta(golden));
        } catch (error) {
          caught = error;
        }
        expect(caught).toBeInstanceOf(ConnectError);
        const error = caught as ConnectError;
        expect(codeReason(error.code)).toBe(golden.expected_error!.code);
        expect(error.rawMessage).toContain(golden.expected_error!.message_contains);
      });
      continue;
    }
    it(`${golden.name}: the stream appends the expected messages`, () => {
      const fromStream = appended(streamDelta(golden));
      expect(fromStream.length).toBeGreaterThan(0);
      expect(fromStream.map((message) => toJson(MessageSchema, message))).toEqual(golden.expected_messages);
    });
    if (golden.body !== undefined) {
      it(`${golden.name}: the stream and the body append byte-identical messages`, () => {
        const fromStream = appended(streamDelta(golden)).map((message) => Buffer.from(toBinary(MessageSchema, message)).toString("hex"));
        const fromBody = appended(bodyDelta(golden)).map((message) => Buffer.from(toBinary(MessageSchema, message)).toString("hex"));
        expect(fromStream).toEqual(fromBody);
      });
    }
  }
});
