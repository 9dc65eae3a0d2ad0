import type { HandlerContext } from "@connectrpc/connect";
import { create, toBinary } from "@bufbuild/protobuf";
import { reflect } from "@bufbuild/protobuf/reflect";
import { describe, expect, it } from "vitest";
import {
  CompileRequestSchema,
  CompileResultPart,
  CompileResultSchema,
  IntroducedMessageSchema,
  TransformationSchema,
  type CompileRequest,
  type CompileResult,
} from "#gen/contextd/v1/compile_pb";
import { CompileResponseSchema, type CompileResponse } from "#gen/contextd/v1/context_service_pb";
import { MessageSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema, DeltaSchema, Segment, type ConversationState, type Delta } from "#gen/contextd/v1/state_pb";
import { RetainedEncodings } from "../../src/codec/retained-encodings.js";
import { MessageListLineage } from "../../src/core/model/message-list-lineage.js";
import { contextService } from "../../src/server/services/context-service.js";
import { composeApplication } from "../../src/server/composition-root.js";
import { defaultConfig } from "../../src/server/operations/config.js";
import type { ConversationStore } from "../../src/store/conversation-store.js";
import { MemoryConversationStore } from "../../src/store/memory-conversation-store.js";
import { message as buildMessage, toolRound } from "../core/messages.js";
import { contractSchemas, fill, randomSource } from "../support/random-messages.js";
import { Codec } from "../../src/codec/codec.js";
import { collectGarbage } from "../support/forced-gc.js";

// What an RPC hands a service implementation, reduced to what ContextService reads: no deadline.
const callWithoutDeadline = { signal: new AbortController().signal, timeoutMs: () => undefined } as unknown as HandlerContext;

// One codec for this file, as one server has one.
const codec = new Codec();

const same = (actual: Uint8Array, expected: Uint8Array) => Buffer.from(actual).equals(Buffer.from(expected));

function randomMessage(random: () => number): Message {
  const reflected = reflect(MessageSchema);
  fill(reflected, random, 0);
  return reflected.message as Message;
}

/** A stored state of random messages; with `previous`, the next version sharing some of its messages. */
function randomState(random: () => number, previous?: ConversationState, historyLength = 80): ConversationState {
  const pick = (count: number) => Array.from({ length: count }, () => randomMessage(random));
  const evolve = (list: Message[]) => {
    // New arrays, as the store builds them: kept runs, dropped messages, new ones in between.
    const next: Message[] = [];
    for (const message of list) {
      const roll = random();
      if (roll < 0.1) continue;
      if (roll < 0.2) next.push(randomMessage(random));
      next.push(message);
    }
    return [...next, ...pick(Math.floor(random() * 5))];
  };
  const state = create(ConversationStateSchema, { conversationId: "c", version: (previous?.version ?? 0n) + 1n });
  state.system = previous ? evolve(previous.system) : pick(3);
  state.history = previous ? evolve(previous.history) : pick(historyLength);
  state.memory = previous ? previous.memory : pick(2);
  return state;
}

/** A compile result cut from `state` the ways the engine cuts them, with `foreign` (unretained) messages mixed in. */
function resultFrom(state: ConversationState, foreign: Message[], random: () => number): CompileResponse {
  const result = create(CompileResultSchema);
  const history = state.history;
  const suffix = history.slice(Math.floor(random() * history.length));
  const filtered = history.filter(() => random() < 0.8);
  const mixed = [...history.slice(0, 10), ...foreign, ...history.slice(10)];
  result.payload = { $typeName: "contextd.v1.CompiledPayload", system: state.system, history: suffix, tools: [], memory: state.memory, scratch: foreign, toolDefinitions: [] };
  result.source = { $typeName: "contextd.v1.CompileSource", snapshot: { $typeName: "contextd.v1.Snapshot", system: state.system, history, memory: [], tools: mixed, artifacts: [] }, pending: foreign };
  result.normalizedSnapshot = { $typeName: "contextd.v1.Snapshot", system: state.system, history: mixed, memory: state.memory, tools: [], artifacts: [] };
  result.persistence = { $typeName: "contextd.v1.Persistence", system: [...state.system].reverse(), history: filtered, memory: [history[0]!, history[0]!], tools: [], artifacts: [] };
  // One message object twice: its second occurrence is a copy of bytes that include stored lists.
  result.writeback = { $typeName: "contextd.v1.Writeback", messages: [], snapshot: result.normalizedSnapshot };
  result.introduced = history.slice(0, 3).map((message) => create(IntroducedMessageSchema, { segment: Segment.HISTORY }));
  result.introduced.forEach((introduced, index) => (introduced.message = history[index]));
  const passed = create(TransformationSchema, { segment: Segment.HISTORY });
  result.transformations = Object.fromEntries(history.map((message, index) => [`${message.id}#${index}`, passed]));
  return create(CompileResponseSchema, { result });
}

/** A stored 300-message state, retained by a codec and by encodings of their own, the home of its list: what the fork cases branch. */
function storedBase(random: () => number) {
  const lineage = new MessageListLineage();
  const codec = new Codec();
  const encodings = new RetainedEncodings(64 * 1024 * 1024);
  const base = create(ConversationStateSchema, { conversationId: "c", version: 1n, history: Array.from({ length: 300 }, () => randomMessage(random)) });
  encodings.retainStoredState(base, lineage);
  codec.retainState(base, lineage);
  return { lineage, codec, encodings, base, firstHome: encodings.list(base.history)! };
}

describe("protobuf encoder with retained encodings", () => {
  it("encodes responses cut from stored states exactly as toBinary does, on every call and every version", () => {
    const random = randomSource(11);
    for (let conversation = 0; conversation < 4; conversation++) {
      let state = randomState(random);
      for (let version = 0; version < 6; version++) {
        codec.retainState(state);
        for (let call = 0; call < 3; call++) {
          const foreign = [randomMessage(random), randomMessage(random)];
          const response = resultFrom(state, foreign, random);
          const expected = toBinary(CompileResponseSchema, response);
          expect(same(codec.encode(CompileResponseSchema, response), expected), `conversation ${conversation} version ${version} call ${call}`).toBe(true);
        }
        state = randomState(random, state);
      }
    }
  });

  it("serves the kept bytes of stored messages on the next call instead of encoding them again", () => {
    const state = randomState(randomSource(5));
    codec.retainState(state);
    // The same seed cuts the same lists from the state.
    const cuts = () => randomSource(77);
    const response = resultFrom(state, [], cuts());
    const before = toBinary(CompileResponseSchema, response);
    expect(same(codec.encode(CompileResponseSchema, response), before)).toBe(true);
    const kept = codec.stats.retainedEncodingBytes;
    expect(kept).toBeGreaterThan(0);
    // Only to observe the cache: stored states are read-only, so changing a stored message breaks
    // the contract, and the encoder still answers with what it kept.
    state.history[40]!.senderName = "changed behind the encoder's back";
    state.system[1]!.senderName = "changed too";
    const again = resultFrom(state, [], cuts());
    expect(same(toBinary(CompileResponseSchema, again), before)).toBe(false);
    expect(same(codec.encode(CompileResponseSchema, again), before)).toBe(true);
    expect(codec.stats.retainedEncodingBytes).toBe(kept);
  });

  it("encodes a short tail of a long stored list exactly without encoding the whole list, and keeps it for a run of at least half", () => {
    const fresh = new Codec();
    const state = randomState(randomSource(21), undefined, 400);
    fresh.retainState(state);
    const response = (history: Message[]) => {
      const result = create(CompileResultSchema);
      result.payload = { $typeName: "contextd.v1.CompiledPayload", system: [], history, tools: [], memory: [], scratch: [], toolDefinitions: [] };
      return create(CompileResponseSchema, { result });
    };
    const before = fresh.stats.retainedEncodingBytes;
    // A budgeted tail: 40 of 400 messages, a new array as every compile cuts one.
    for (let call = 0; call < 3; call++) {
      const tail = response(state.history.slice(360));
      expect(same(fresh.encode(CompileResponseSchema, tail), toBinary(CompileResponseSchema, tail))).toBe(true);
    }
    // No encoding of the 400-message list was kept to copy 40 messages out of it.
    expect(fresh.stats.retainedEncodingBytes - before).toBeLessThan(toBinary(CompileResponseSchema, response(state.history)).length / 2);
    const half = response(state.history.slice(150));
    expect(same(fresh.encode(CompileResponseSchema, half), toBinary(CompileResponseSchema, half))).toBe(true);
    expect(fresh.stats.retainedEncodingBytes - before).toBeGreaterThan(toBinary(CompileResponseSchema, response(state.history)).length);
  });

  it("encodes messages that are not from a stored state afresh, so changing them between calls is seen", () => {
    const foreign = buildMessage(Role.USER, "m1", "hello");
    const list = [foreign, foreign];
    const response = create(CompileResponseSchema, { result: {} });
    response.result!.payload = { $typeName: "contextd.v1.CompiledPayload", system: [], history: list, tools: [], memory: [], scratch: [], toolDefinitions: [] };
    response.result!.persistence = { $typeName: "contextd.v1.Persistence", system: [], history: list, memory: [], tools: [], artifacts: [] };
    expect(same(codec.encode(CompileResponseSchema, response), toBinary(CompileResponseSchema, response))).toBe(true);
    foreign.id = "m2";
    list.push(buildMessage(Role.ASSISTANT, "m3", "hi"));
    const changed = codec.encode(CompileResponseSchema, response);
    expect(same(changed, toBinary(CompileResponseSchema, response))).toBe(true);
    expect(Buffer.from(changed).includes("m2")).toBe(true);
  });

  it("moves the home of an appended-to list to the longer list, marking only the new elements, and still encodes old and new states exactly", () => {
    const random = randomSource(29);
    const appendCodec = new Codec();
    const encodings = new RetainedEncodings(64 * 1024 * 1024);
    const states: ConversationState[] = [randomState(random, undefined, 200)];
    for (let version = 0; version < 8; version++) {
      const previous = states[states.length - 1]!;
      const next = create(ConversationStateSchema, { conversationId: "c", version: previous.version + 1n });
      // As an append makes it: the same messages first, new ones after, in a new array.
      next.history = [...previous.history, ...Array.from({ length: 1 + Math.floor(random() * 3) }, () => randomMessage(random))];
      next.system = previous.system;
      next.memory = previous.memory;
      states.push(next);
    }
    let firstHome: unknown;
    for (const [index, state] of states.entries()) {
      encodings.retainStoredState(state);
      appendCodec.retainState(state);
      firstHome ??= encodings.list(state.history);
      // The same home all along, moved from list to list (not one per list, re-marking everything).
      expect(encodings.list(state.history)).toBe(firstHome);
      const home = encodings.list(state.history)!;
      // Every element of the newest list, old and new, is found in it at its own index.
      expect(state.history.every((message, position) => encodings.message(message)!.home === home && encodings.message(message)!.index === position), `version ${index}`).toBe(true);
      expect(home.list).toBe(state.history);
      if (index > 0) expect(encodings.list(states[index - 1]!.history)!.list).toBe(states[index - 1]!.history);
    }
    // Responses of every version, the old ones after their lists' home moved on, as toBinary has them.
    for (let round = 0; round < 2; round++) {
      for (const state of [...states].reverse()) {
        const response = resultFrom(state, [randomMessage(random)], random);
        expect(same(appendCodec.encode(CompileResponseSchema, response), toBinary(CompileResponseSchema, response))).toBe(true);
        const whole = create(CompileResponseSchema, { result: { payload: { history: state.history } } });
        expect(same(appendCodec.encode(CompileResponseSchema, whole), toBinary(CompileResponseSchema, whole))).toBe(true);
      }
    }
  });

  it("marks only the new elements of two branches appended to one list (a fork and its source), and encodes both exactly on every commit", () => {
    const random = randomSource(31);
    const { lineage, codec, encodings, base, firstHome } = storedBase(random);
    let sides = [base, { ...base, conversationId: "fork" }];
    for (let turn = 0; turn < 6; turn++) {
      sides = sides.map((side, which) => {
        if (turn % 2 !== which % 2 && turn > 0) return side;
        const history = side.history.concat(randomMessage(random));
        lineage.appended(side.history, history);
        const next = { ...side, version: side.version + 1n, history };
        encodings.retainStoredState(next, lineage);
        codec.retainState(next, lineage);
        const home = encodings.list(history)!;
        expect(home.list).toBe(history);
        expect(encodings.message(history[history.length - 1]!)!.home).toBe(home);
        return next;
      });
      // The 300 shared messages were never marked again: their home is the first one, moved along the source's appends.
      expect(base.history.every((message, position) => encodings.message(message)!.home === firstHome && encodings.message(message)!.index === position)).toBe(true);
      for (const side of sides) {
        const whole = create(CompileResponseSchema, { result: { payload: { history: side.history } } });
        expect(same(codec.encode(CompileResponseSchema, whole), toBinary(CompileResponseSchema, whole))).toBe(true);
        const response = resultFrom(side, [randomMessage(random)], random);
        expect(same(codec.encode(CompileResponseSchema, response), toBinary(CompileResponseSchema, response))).toBe(true);
      }
    }
  });

  it("marks only the new element of a second fork's first append after the first fork's appends made the shared home longer than it", () => {
    const random = randomSource(37);
    const { lineage, codec, encodings, base, firstHome } = storedBase(random);
    // The first fork appends five times: the home of the 300 follows it to 305 messages.
    let first = { ...base, conversationId: "first" };
    for (let turn = 0; turn < 5; turn++) {
      const history = first.history.concat(randomMessage(random));
      lineage.appended(first.history, history);
      first = { ...first, version: first.version + 1n, history };
      encodings.retainStoredState(first, lineage);
      codec.retainState(first, lineage);
    }
    expect(firstHome.list).toBe(first.history);
    // The second fork's first append: 301 messages, shorter than the home's list.
    const history = base.history.concat(randomMessage(random));
    lineage.appended(base.history, history);
    const second = { ...base, conversationId: "second", version: 2n, history };
    encodings.retainStoredState(second, lineage);
    codec.retainState(second, lineage);
    expect(base.history.every((message, position) => encodings.message(message)!.home === firstHome && encodings.message(message)!.index === position)).toBe(true);
    expect(encodings.message(history[300]!)!.home).toBe(encodings.list(history));
    for (const side of [first, second, base]) {
      const whole = create(CompileResponseSchema, { result: { payload: { history: side.history } } });
      expect(same(codec.encode(CompileResponseSchema, whole), toBinary(CompileResponseSchema, whole))).toBe(true);
      const response = resultFrom(side, [randomMessage(random)], random);
      expect(same(codec.encode(CompileResponseSchema, response), toBinary(CompileResponseSchema, response))).toBe(true);
    }
  });

  it("moves the home of a list to a head of it the lineage knows of (a rewind), re-marking only the dropped elements, and the append after it extends it; every state encodes exactly", () => {
    const random = randomSource(31);
    const truncateCodec = new Codec();
    const lineage = new MessageListLineage();
    const encodings = new RetainedEncodings(64 * 1024 * 1024);
    const long = randomState(random, undefined, 200);
    encodings.retainStoredState(long, lineage);
    truncateCodec.retainState(long, lineage);
    // Encoded whole once, so the old home has list encodings the head must not inherit.
    const wholeLong = create(CompileResponseSchema, { result: { payload: { history: long.history } } });
    expect(same(truncateCodec.encode(CompileResponseSchema, wholeLong), toBinary(CompileResponseSchema, wholeLong))).toBe(true);
    const home = encodings.list(long.history)!;
    const head = long.history.slice(0, 150);
    lineage.truncated(long.history, head);
    const rewound = { ...long, version: long.version + 1n, history: head };
    encodings.retainStoredState(rewound, lineage);
    truncateCodec.retainState(rewound, lineage);
    expect(encodings.list(head)).toBe(home);
    expect(home.list).toBe(head);
    expect(head.every((message, position) => encodings.message(message)!.home === home && encodings.message(message)!.index === position)).toBe(true);
    // The dropped ones are found in the old list, which has a home of its own.
    const own = encodings.list(long.history)!;
    expect(own).not.toBe(home);
    expect(long.history.slice(150).every((message, position) => encodings.message(message)!.home === own && encodings.message(message)!.index === 150 + position)).toBe(true);
    const appended = head.concat(randomMessage(random), randomMessage(random));
    lineage.appended(head, appended);
    const after = { ...rewound, version: rewound.version + 1n, history: appended };
    encodings.retainStoredState(after, lineage);
    truncateCodec.retainState(after, lineage);
    expect(encodings.list(appended)).toBe(home);
    // A head the lineage does not know of is not taken for one: its elements are marked anew.
    const unknownHead = appended.slice(0, 100);
    encodings.retainStoredState({ ...long, history: unknownHead }, lineage);
    expect(encodings.list(unknownHead)).not.toBe(home);
    for (let round = 0; round < 2; round++) {
      for (const state of [long, rewound, after]) {
        const response = resultFrom(state, [randomMessage(random)], random);
        expect(same(truncateCodec.encode(CompileResponseSchema, response), toBinary(CompileResponseSchema, response))).toBe(true);
        const whole = create(CompileResponseSchema, { result: { payload: { history: state.history } } });
        expect(same(truncateCodec.encode(CompileResponseSchema, whole), toBinary(CompileResponseSchema, whole))).toBe(true);
      }
    }
  });

  it("does not keep a stored list alive for one of its messages that lives on, and encodes that message alone once the list is gone", async () => {
    const random = randomSource(31);
    const listCodec = new Codec();
    let state: ConversationState | undefined = randomState(random, undefined, 200);
    listCodec.retainState(state);
    // One message outlives its state, as a request message the codec hands out again does.
    const survivor = state.history[7]!;
    const list = new WeakRef(state.history);
    const whole = create(CompileResponseSchema, { result: { payload: { history: state.history } } });
    expect(same(listCodec.encode(CompileResponseSchema, whole), toBinary(CompileResponseSchema, whole))).toBe(true);
    state = undefined;
    whole.result = undefined;
    await collectGarbage();
    expect(list.deref()).toBeUndefined();
    const alone = create(CompileResponseSchema, { result: { payload: { history: [survivor, randomMessage(random)] } } });
    expect(same(listCodec.encode(CompileResponseSchema, alone), toBinary(CompileResponseSchema, alone))).toBe(true);
  });

  it("drops every kept encoding and mark once the bound is exceeded, and marks states again when asked", () => {
    const random = randomSource(3);
    const encodings = new RetainedEncodings(2_000);
    const state = randomState(random);
    encodings.retainStoredState(state);
    const first = encodings.message(state.history[0]!)!;
    expect(first).toBeDefined();
    expect(encodings.list(state.history)).toBeDefined();
    expect(encodings.message(randomMessage(random))).toBeUndefined();
    encodings.keepMessage(first, new Uint8Array(1_500));
    expect(encodings.keptBytes).toBe(1_500);
    encodings.keepMessage(encodings.message(state.history[1]!)!, new Uint8Array(1_000));
    expect(encodings.keptBytes).toBeLessThanOrEqual(2_000);
    expect(encodings.message(state.history[0]!)).toBeUndefined();
    expect(encodings.list(state.history)).toBeUndefined();
    encodings.retainStoredState(state);
    expect(encodings.message(state.history[0]!)?.encoding).toBeUndefined();
    expect(encodings.list(state.history)).toBeDefined();
  });
});

describe("enveloped encoding", () => {
  it("is the gRPC envelope (flags 0, big-endian length) followed by exactly the bytes of toBinary", () => {
    const random = randomSource(17);
    const envelope = (bytes: Uint8Array) => {
      const header = Buffer.alloc(5);
      header.writeUInt32BE(bytes.length, 1);
      return Buffer.concat([header, bytes]);
    };
    for (const schema of contractSchemas) {
      for (let round = 0; round < 5; round++) {
        const message = reflect(schema);
        fill(message, random, 0);
        expect(Buffer.from(codec.encodeEnveloped(schema, message.message)).equals(envelope(toBinary(schema, message.message))), schema.typeName).toBe(true);
      }
    }
    const state = randomState(random);
    codec.retainState(state);
    for (let call = 0; call < 2; call++) {
      const response = resultFrom(state, [randomMessage(random)], random);
      expect(Buffer.from(codec.encodeEnveloped(CompileResponseSchema, response)).equals(envelope(toBinary(CompileResponseSchema, response)))).toBe(true);
    }
  });

  it("as chunks, concatenates to the same bytes, referencing long kept encodings instead of copying them", () => {
    const random = randomSource(23);
    const envelope = (bytes: Uint8Array) => {
      const header = Buffer.alloc(5);
      header.writeUInt32BE(bytes.length, 1);
      return Buffer.concat([header, bytes]);
    };
    let referenced = 0;
    for (let conversation = 0; conversation < 3; conversation++) {
      // Long enough histories that their encodings (and runs of them) are chunks of their own.
      let state = randomState(random, undefined, 400);
      for (let version = 0; version < 4; version++) {
        codec.retainState(state);
        const keptHistory = new Set<ArrayBufferLike>();
        for (let call = 0; call < 3; call++) {
          const response = resultFrom(state, [randomMessage(random)], random);
          const chunks = codec.encodeEnvelopedChunks(CompileResponseSchema, response);
          expect(Buffer.concat(chunks).equals(envelope(toBinary(CompileResponseSchema, response))), `conversation ${conversation} version ${version} call ${call}`).toBe(true);
          // From the second call on, the stored history's bytes come from the same kept buffer.
          const large = chunks.filter((chunk) => chunk.byteLength >= 16 * 1024);
          if (call > 0 && large.some((chunk) => keptHistory.has(chunk.buffer))) referenced++;
          for (const chunk of large) keptHistory.add(chunk.buffer);
        }
        state = randomState(random, state);
      }
    }
    expect(referenced).toBeGreaterThan(10);
  });
});

describe("frozen conversation messages (as the request decoder hands them out)", () => {
  // Random messages often hold bytes fields, which keep them from counting as immutable.
  let serial = 0;
  const words = ["alpha", "beta gamma", "δέλτα", "emoji 🎉", "x".repeat(200)];
  const frozenMessage = (random: () => number) =>
    deepFreeze(buildMessage(random() < 0.5 ? Role.USER : Role.ASSISTANT, `f${serial++}`, words[Math.floor(random() * words.length)]!, `${random()}`));
  const payloadResponse = (history: Message[]) => {
    const response = create(CompileResponseSchema, { result: {} });
    const result = response.result!;
    result.payload = { $typeName: "contextd.v1.CompiledPayload", system: [], history, tools: [], memory: [], scratch: [], toolDefinitions: [] };
    result.persistence = { $typeName: "contextd.v1.Persistence", system: [], history: history.filter((_, index) => index % 7 !== 3), memory: [], tools: [], artifacts: [] };
    return response;
  };

  it("are encoded once, and lists of them resent as new arrays are copied from an adopted home", () => {
    const random = randomSource(31);
    const history = Array.from({ length: 120 }, () => frozenMessage(random));
    const kept = [codec.stats.retainedEncodingBytes];
    for (let call = 0; call < 5; call++) {
      const response = payloadResponse([...history]);
      expect(same(codec.encode(CompileResponseSchema, response), toBinary(CompileResponseSchema, response)), `call ${call}`).toBe(true);
      kept.push(codec.stats.retainedEncodingBytes);
    }
    // Seen once, nothing is kept; when they come back, the messages are; the call after, the
    // adopted list's encoding; then nothing new.
    expect(kept[1]).toBe(kept[0]);
    expect(kept[2]).toBeGreaterThan(kept[1]!);
    expect(kept[3]).toBeGreaterThan(kept[2]!);
    expect(kept[5]).toBe(kept[3]);
  });

  it("stay exact while a resent history grows, is edited and trimmed", () => {
    const random = randomSource(37);
    let history = Array.from({ length: 40 }, () => (random() < 0.9 ? frozenMessage(random) : randomMessage(random)));
    for (let call = 0; call < 60; call++) {
      const roll = random();
      if (roll < 0.6) history = [...history, frozenMessage(random), frozenMessage(random)];
      else if (roll < 0.8) history = history.map((message, index) => (index === Math.floor(random() * history.length) ? frozenMessage(random) : message));
      else history = history.slice(Math.floor(random() * 10));
      const response = payloadResponse([...history]);
      expect(same(codec.encode(CompileResponseSchema, response), toBinary(CompileResponseSchema, response)), `call ${call}`).toBe(true);
      const chunks = codec.encodeEnvelopedChunks(CompileResponseSchema, response);
      expect(Buffer.concat(chunks).subarray(5).equals(Buffer.from(toBinary(CompileResponseSchema, response))), `chunks, call ${call}`).toBe(true);
    }
  });

  it("are not kept when something inside can still change", () => {
    // Frozen on the outside only: the part's text can change.
    const shallow = Object.freeze(buildMessage(Role.USER, "shallow", "before"));
    // Frozen all the way down, but a bytes field's contents cannot be frozen.
    const image = create(MessageSchema, { id: "image", role: Role.USER, parts: [{ kind: { case: "image", value: { data: new Uint8Array([1, 2, 3]) } } }] });
    deepFreeze(image);
    const history = Array.from({ length: 40 }, (_, index) => (index % 2 === 0 ? shallow : image));
    for (let call = 0; call < 3; call++) {
      const response = payloadResponse([...history]);
      expect(same(codec.encode(CompileResponseSchema, response), toBinary(CompileResponseSchema, response)), `call ${call}`).toBe(true);
      const part = shallow.parts[0]!.kind.value as { text: string };
      part.text = `after ${call}`;
      (image.parts[0]!.kind.value as { data: Uint8Array }).data[0] = call + 10;
    }
  });
});

/** Freezes a stored state all the way down: the compile must never write to it. */
function deepFreeze<T>(value: T): T {
  if (value === null || typeof value !== "object" || Object.isFrozen(value) || ArrayBuffer.isView(value)) return value;
  for (const key of Object.keys(value)) deepFreeze((value as Record<string, unknown>)[key]);
  return Object.freeze(value);
}

function appendDelta(segment: Segment, messages: Message[]): Delta {
  return create(DeltaSchema, { operation: { case: "appendMessages", value: { segment, messages } } });
}

/** ContextService over `store` and this file's codec, composed as the server composes it. */
function inProcessContextService(store: ConversationStore) {
  return contextService({ ...composeApplication(defaultConfig, store, codec), publish: () => {}, summarizeTimeoutMs: 1_000 });
}

describe("stateless compile responses", () => {
  it("encode exactly as toBinary while the decoder hands out the same frozen messages for a growing history", async () => {
    const random = randomSource(41);
    const service = inProcessContextService(new MemoryConversationStore({ codec }));
    const history: Message[] = [];
    let next = 0;
    const words = ["alpha", "beta gamma", "δέλτα", "emoji 🎉", "lorem ipsum dolor sit amet ".repeat(6)];
    let reused = 0;
    let previous: CompileRequest | undefined;
    for (let call = 0; call < 30; call++) {
      for (let added = Math.floor(random() * 4); added > 0; added--) {
        const id = next++;
        if (random() < 0.2) history.push(...toolRound(`t${id}`, [`c${id}`]));
        else history.push(buildMessage(random() < 0.5 ? Role.USER : Role.ASSISTANT, `m${id}`, words[Math.floor(random() * words.length)]!));
      }
      const bytes = toBinary(CompileRequestSchema, create(CompileRequestSchema, {
        history: { messages: history },
        budget: random() < 0.4 ? { maxTokens: BigInt(100 + Math.floor(random() * 500)) } : undefined,
      }));
      const request = codec.decode(CompileRequestSchema, bytes);
      if (previous && request.history!.messages[0] === previous.history!.messages[0]) reused++;
      previous = request;
      const response = create(CompileResponseSchema);
      response.result = (await service.compile!(request, callWithoutDeadline)).result as CompileResult;
      const expected = toBinary(CompileResponseSchema, response);
      expect(same(codec.encode(CompileResponseSchema, response), expected), `call ${call}`).toBe(true);
      expect(Buffer.concat(codec.encodeEnvelopedChunks(CompileResponseSchema, response)).subarray(5).equals(Buffer.from(expected)), `chunks, call ${call}`).toBe(true);
    }
    // The premise: the decoder did hand out the same objects again.
    expect(reused).toBeGreaterThan(20);
  });
});

describe("stateful compile responses", () => {
  it("encode exactly as toBinary across commits, budgets and included parts, with the stored state frozen", async () => {
    const random = randomSource(29);
    const store = new MemoryConversationStore({ codec });
    const frozenStore: typeof store = Object.create(store);
    frozenStore.load = async (conversationId) => deepFreeze(await store.load(conversationId));
    const service = inProcessContextService(frozenStore);
    const words = ["alpha", "beta gamma", "δέλτα", "emoji 🎉", "lorem ipsum dolor sit amet ".repeat(6)];
    let next = 0;
    const turn = (): Message[] => {
      const id = `m${next++}`;
      if (random() < 0.2) return toolRound(id, [`${id}-call`]);
      return [buildMessage(random() < 0.5 ? Role.USER : Role.ASSISTANT, id, words[Math.floor(random() * words.length)]!)];
    };
    await store.commit("c", undefined, [appendDelta(Segment.SYSTEM, [buildMessage(Role.SYSTEM, "s", "be brief")])], "");
    let compiled = 0;
    let trimmed = 0;
    for (let version = 0; version < 12; version++) {
      await store.commit("c", undefined, [appendDelta(Segment.HISTORY, Array.from({ length: 1 + Math.floor(random() * 20) }, turn).flat())], "");
      for (let call = 0; call < 3; call++) {
        const request = create(CompileRequestSchema, {
          conversationId: "c",
          include: random() < 0.7 ? [CompileResultPart.SOURCE, CompileResultPart.NORMALIZED_SNAPSHOT, CompileResultPart.WRITEBACK_SNAPSHOT, CompileResultPart.PERSISTENCE, CompileResultPart.ALL_TRANSFORMATIONS] : [],
          budget: random() < 0.5 ? { maxTokens: BigInt(50 + Math.floor(random() * 400)) } : undefined,
          pending: random() < 0.3 ? [buildMessage(Role.USER, `p${next++}`, "pending question")] : [],
        });
        const response = create(CompileResponseSchema);
        response.result = (await service.compile!(request, callWithoutDeadline)).result as CompileResult;
        expect(same(codec.encode(CompileResponseSchema, response), toBinary(CompileResponseSchema, response)), `version ${version} call ${call}`).toBe(true);
        const stored = await store.load("c");
        if (response.result.payload!.history.length < stored.history.length) trimmed++;
        compiled++;
      }
    }
    expect(compiled).toBe(36);
    // Both shapes occurred: whole stored lists, and trimmed histories cut from them.
    expect(trimmed).toBeGreaterThan(3);
    expect(trimmed).toBeLessThan(compiled);
  });
});
