import { create, toBinary } from "@bufbuild/protobuf";
import { CompileRequestSchema, EstimatorKind } from "/work/main/dist/gen/ts/contextd/v1/compile_pb.js";
import { MessageSchema, PartSchema, Role } from "/work/main/dist/gen/ts/contextd/v1/message_pb.js";
import { compile } from "/work/main/dist/src/core/compile/compile.js";
import { TokenCountCache } from "/work/main/dist/src/core/tokens/token-count-cache.js";
import { Codec } from "/work/main/dist/src/codec/codec.js";
const text = (v) => create(PartSchema, { kind: { case: "text", value: { text: v } } });
const msgs = [];
for (let i = 0; msgs.length < 1000; i++) {
  msgs.push(create(MessageSchema, { id: `u${i}`, role: Role.USER, parts: [text("question " + i + " lorem ipsum dolor sit amet ".repeat(8))] }));
  msgs.push(create(MessageSchema, { id: `a${i}`, role: Role.ASSISTANT, parts: [text("answer"), create(PartSchema, { kind: { case: "toolCall", value: { id: `c${i}`, name: "search", arguments: { data: `{"q":"x${i}"}` } } } })] }));
  msgs.push(create(MessageSchema, { id: `t${i}`, role: Role.TOOL, parts: [create(PartSchema, { kind: { case: "toolResult", value: { toolCallId: `c${i}`, name: "search", payload: { text: "result ".repeat(30) } } } })] }));
  msgs.push(create(MessageSchema, { id: `r${i}`, role: Role.ASSISTANT, parts: [text("final answer " + "words ".repeat(20))] }));
}
msgs.length = 1000;
const bytes = toBinary(CompileRequestSchema, create(CompileRequestSchema, { system: { messages: [{ id: "s", role: Role.SYSTEM, parts: [text("sys")] }] }, history: { messages: msgs }, budget: { maxTokens: 20000n, estimator: { kind: EstimatorKind.TOKENIZER } } }));
const codec = new Codec();
const tokenCounts = new TokenCountCache();
let n = 0;
const ctx = { randomId: () => `msg_${++n}`, now: () => 0, monotonicNs: () => process.hrtime.bigint(), tokenCounts };
for (let i = 0; i < 200; i++) await compile(codec.decode(CompileRequestSchema, bytes), ctx);
const t = process.hrtime.bigint();
for (let i = 0; i < 2000; i++) await compile(codec.decode(CompileRequestSchema, bytes), ctx);
console.log("warm ms", Number(process.hrtime.bigint() - t) / 2000 / 1e6);
