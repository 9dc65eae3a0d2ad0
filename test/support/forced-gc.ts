// A full garbage collection inside the test process, for tests that show what memory is held or
// let go (vitest's workers do not run with --expose-gc; the flag can be set at run time and the
// function taken from a fresh context). Waits a turn first: V8 keeps the targets of WeakRefs
// dereferenced in the current job alive until it ends.
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

export async function collectGarbage(): Promise<void> {
  await new Promise((resolve) => setImmediate(resolve));
  gc();
  gc();
}
