import { describe, expect, it } from "vitest";
import { raceAbort } from "../../src/application/abort-race.js";
import { collectGarbage } from "../support/forced-gc.js";

describe("raceAbort", () => {
  it("answers the promise's value while the signal is not aborted, and the abort's once it is", async () => {
    const controller = new AbortController();
    expect(await raceAbort(Promise.resolve(1), controller.signal, () => "stopped")).toBe(1);
    await expect(raceAbort(Promise.reject(new Error("failed")), controller.signal, () => "stopped")).rejects.toThrow("failed");
    const pending = raceAbort(new Promise<number>(() => undefined), controller.signal, () => "stopped");
    controller.abort();
    expect(await pending).toBe("stopped");
    expect(await raceAbort(Promise.resolve(2), controller.signal, () => "stopped")).toBe("stopped");
    await expect(
      raceAbort(Promise.resolve(3), controller.signal, () => {
        throw new Error("shutting down");
      }),
    ).rejects.toThrow("shutting down");
  });

  it("keeps nothing a settled read answered alive while the signal lives on (Promise.race with one stopped promise kept every value)", async () => {
    const controller = new AbortController();
    const values: WeakRef<object>[] = [];
    for (let read = 0; read < 100; read++) {
      const value = { read };
      values.push(new WeakRef(value));
      await raceAbort(Promise.resolve(value), controller.signal, () => undefined);
    }
    await collectGarbage();
    // At most the last read's value, which the loop's own frame may still hold.
    expect(values.filter((value) => value.deref() !== undefined).length).toBeLessThanOrEqual(1);
    // The same reads raced against one promise for the whole stream stay reachable from it.
    const stopped = new Promise<undefined>((resolve) => controller.signal.addEventListener("abort", () => resolve(undefined), { once: true }));
    const raced: WeakRef<object>[] = [];
    for (let read = 0; read < 100; read++) {
      const value = { read };
      raced.push(new WeakRef(value));
      await Promise.race([Promise.resolve(value), stopped]);
    }
    await collectGarbage();
    expect(raced.filter((value) => value.deref() !== undefined).length).toBeGreaterThanOrEqual(99);
    controller.abort();
  });
});
