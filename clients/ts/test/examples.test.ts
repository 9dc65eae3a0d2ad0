// The TypeScript example runs against a real sidecar, from the project the package is installed in.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { test } from "node:test";
import { promisify } from "node:util";
import { startSidecar } from "./sidecar.ts";

test("examples/typescript/agent_loop.ts runs 20 turns, trimming the oldest, twice against one sidecar", async () => {
  const sidecar = await startSidecar();
  try {
    for (const run of [1, 2]) {
      const { stdout } = await promisify(execFile)(process.execPath, ["examples/agent_loop.ts"], { env: { ...process.env, CONTEXTD_ADDRESS: sidecar.address } });
      const match = /20 turns: version (\d+), (\d+) messages stored, (\d+) in the last prompt/.exec(stdout);
      assert.ok(match, `run ${run} printed: ${stdout}`);
      // 10 turns of user + assistant, 10 of user + tool call + result + answer.
      assert.equal(Number(match[2]), 60);
      assert.ok(Number(match[3]) < 60, `the budget trimmed nothing: ${stdout}`);
    }
  } finally {
    await sidecar.stop();
  }
});

test("examples/typescript/ai_sdk_agent.ts runs an AI SDK tool loop on contextd, twice against one sidecar", async () => {
  const sidecar = await startSidecar();
  try {
    for (const run of [1, 2]) {
      const { stdout } = await promisify(execFile)(process.execPath, ["examples/ai_sdk_agent.ts"], { env: { ...process.env, CONTEXTD_ADDRESS: sidecar.address } });
      const match = /3 turns: version (\d+), (\d+) messages stored, last answer: (.*)/.exec(stdout);
      assert.ok(match, `run ${run} printed: ${stdout}`);
      // Two weather turns of user + call + result + answer, one of user + answer.
      assert.equal(Number(match[2]), 10);
      assert.equal(Number(match[1]), 4, "three turns and the last commit");
      assert.equal(match[3], 'It is {"city":"Oslo","celsius":6}.', "the third turn's tool result reached the model");
    }
  } finally {
    await sidecar.stop();
  }
});

test("examples/typescript/ai_sdk_prepare_step.ts budgets each step of an AI SDK tool loop, twice against one sidecar", async () => {
  const sidecar = await startSidecar();
  try {
    for (const run of [1, 2]) {
      const { stdout } = await promisify(execFile)(process.execPath, ["examples/ai_sdk_prepare_step.ts"], { env: { ...process.env, CONTEXTD_ADDRESS: sidecar.address } });
      assert.equal(stdout, "5 steps; I was sent 4 tool results, 1 of them whole.\n", `run ${run}`);
    }
  } finally {
    await sidecar.stop();
  }
});
