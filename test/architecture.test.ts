import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

// The layers of src/, lowest first: a module may import its own layer and the layers below it,
// never one above (docs/architecture.md draws them). Generated code (gen/) and packages are open
// to every layer, except where `packages` narrows them.
const layers = ["core", "codec", "store", "application", "server", "entry"] as const;
type Layer = (typeof layers)[number];

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const source = join(root, "src");

function layerOf(file: string): Layer {
  const top = relative(source, file).split("/")[0]!;
  // src/admin: the admin command main.ts runs, a client of a running sidecar.
  if (top === "main.ts" || top === "healthcheck.ts" || top === "admin") return "entry";
  if (!(layers as readonly string[]).includes(top)) throw new Error(`${relative(root, file)}: src/${top} is in no layer; add it to test/architecture.test.ts and docs/architecture.md`);
  return top as Layer;
}

// Packages a layer may import; undefined = any. The engine is pure: protobuf messages, connect's
// error type (codes the caller sees), the tokenizer, the linear-time regex engine for patterns
// from requests, and node:crypto for hashes and ids.
const packages: Partial<Record<Layer, (name: string) => boolean>> = {
  core: (name) => ["@bufbuild/protobuf", "@connectrpc/connect", "gpt-tokenizer", "re2js", "node:crypto"].some((allowed) => name === allowed || name.startsWith(`${allowed}/`)),
  codec: (name) => name.startsWith("@bufbuild/protobuf") || name === "node:crypto",
};

function sourceFiles(directory: string): string[] {
  return readdirSync(directory, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? sourceFiles(join(directory, entry.name)) : entry.name.endsWith(".ts") ? [join(directory, entry.name)] : [],
  );
}

function importsOf(file: string): string[] {
  const text = readFileSync(file, "utf8");
  return [...text.matchAll(/(?:^|\n)\s*(?:import|export)\s[^;]*?from\s+"([^"]+)"|import\("([^"]+)"\)/g)].map((match) => (match[1] ?? match[2])!);
}

describe("architecture", () => {
  const files = sourceFiles(source);

  it("finds the source tree", () => {
    expect(files.length).toBeGreaterThan(50);
    for (const layer of layers.filter((layer) => layer !== "entry")) expect(files.some((file) => layerOf(file) === layer), layer).toBe(true);
  });

  it("has no import circle among src modules (type-only imports included)", () => {
    const graph = new Map<string, string[]>();
    for (const file of files) {
      const targets = importsOf(file)
        .filter((specifier) => specifier.startsWith("."))
        .map((specifier) => resolve(dirname(file), specifier).replace(/\.js$/, ".ts"))
        .filter((target) => target.startsWith(source + "/"));
      graph.set(file, targets);
    }
    // Depth-first search; a module met again while still on the path closes a circle.
    const circles: string[] = [];
    const state = new Map<string, "open" | "done">();
    const path: string[] = [];
    const visit = (file: string) => {
      state.set(file, "open");
      path.push(file);
      for (const target of graph.get(file) ?? []) {
        if (state.get(target) === "open") circles.push([...path.slice(path.indexOf(target)), target].map((step) => relative(source, step)).join(" -> "));
        else if (!state.has(target)) visit(target);
      }
      path.pop();
      state.set(file, "done");
    };
    for (const file of files) if (!state.has(file)) visit(file);
    expect(circles).toEqual([]);
  });

  it("imports only downward: core imports no store, codec, application or server; no layer imports one above it", () => {
    const violations: string[] = [];
    for (const file of files) {
      const from = layerOf(file);
      for (const specifier of importsOf(file)) {
        if (specifier.startsWith("#gen/")) continue; // generated code, open to every layer
        if (specifier.startsWith(".")) {
          const target = resolve(dirname(file), specifier);
          const to = layerOf(target);
          if (layers.indexOf(to) > layers.indexOf(from)) violations.push(`${relative(root, file)} (${from}) imports ${specifier} (${to})`);
        } else {
          const allowed = packages[from];
          if (allowed && !allowed(specifier)) violations.push(`${relative(root, file)} (${from}) imports package ${specifier}`);
        }
      }
    }
    expect(violations).toEqual([]);
  });

  it("inside the server: operations < policy < services and transport, which never import each other; composition-root.ts and server.ts compose them", () => {
    const order: Record<string, number> = { operations: 0, policy: 1, services: 2, transport: 2 };
    const part = (file: string) => relative(join(source, "server"), file).split("/")[0]!;
    const violations: string[] = [];
    for (const file of files.filter((file) => layerOf(file) === "server" && part(file) in order)) {
      for (const specifier of importsOf(file).filter((specifier) => specifier.startsWith("."))) {
        const target = resolve(dirname(file), specifier);
        if (!target.startsWith(join(source, "server") + "/")) continue;
        const from = part(file);
        const to = part(target);
        if (!(to in order) || order[to]! > order[from]! || (to !== from && order[to] === order[from])) {
          violations.push(`${relative(root, file)} (${from}) imports ${specifier} (${to})`);
        }
      }
    }
    expect(violations).toEqual([]);
  });

  it("services construct nothing: a service file builds no application object (server/composition-root.ts does)", () => {
    // Every class src/ exports is an object the composition root builds and hands over, except the
    // engine's per-call values a handler may make for the one call it serves.
    const perCallValues = new Set(["DeadlineCheck"]);
    const classes = new Set(files.flatMap((file) => [...readFileSync(file, "utf8").matchAll(/^export (?:abstract )?class (\w+)/gm)].map((match) => match[1]!)));
    for (const name of perCallValues) expect(classes.has(name), `${name} is still a class of src/`).toBe(true);
    expect(classes.has("Compiler") && classes.has("MemoryConversationStore") && classes.has("Codec"), "finds the application, store and codec classes").toBe(true);
    const constructions: string[] = [];
    for (const file of files.filter((file) => relative(source, file).startsWith("server/services/"))) {
      for (const match of readFileSync(file, "utf8").matchAll(/\bnew\s+(\w+)\s*[<(]/g)) {
        if (classes.has(match[1]!) && !perCallValues.has(match[1]!)) constructions.push(`${relative(root, file)}: new ${match[1]}`);
      }
    }
    expect(constructions).toEqual([]);
  });

  it("keeps connect's unversioned protocol internals in one file", () => {
    const users = files.filter((file) => importsOf(file).some((specifier) => specifier.startsWith("@connectrpc/connect/protocol")));
    expect(users.map((file) => relative(root, file))).toEqual(["src/server/transport/connect-internals.ts"]);
  });

  it("keeps no module-level data caches in codec, store, application or server", () => {
    // A Map, WeakMap, Set or cache object created empty at module level would be shared by every
    // server in the process and bounded by nobody; caches belong to an instance the server owns.
    // (Sets and Maps built from a literal list are constants, not caches.)
    const offenders: string[] = [];
    for (const file of files.filter((file) => ["codec", "store", "application", "server"].includes(layerOf(file)))) {
      const text = readFileSync(file, "utf8");
      for (const match of text.matchAll(/^(?:export )?const (\w+)\s*=\s*new (Map|WeakMap|Set|WeakSet|RecentMessages|RetainedEncodings|StateEncoder)\b(?!(?:<[^>]*>)?\(\[)/gm)) {
        offenders.push(`${relative(root, file)}: ${match[1]} = new ${match[2]}`);
      }
    }
    expect(offenders.sort()).toEqual([...descriptorTables].sort());
  });
});

// Tables keyed by schema descriptors (code derived from the contract, never from request data),
// like protobuf-es's own per-descriptor caches.
const descriptorTables = [
  "src/codec/protobuf-decoder.ts: plans = new WeakMap",
  "src/codec/special-shapes.ts: reachesSpecialShapeCache = new WeakMap",
  "src/codec/protobuf-encoder.ts: planCache = new WeakMap",
  "src/server/transport/binary-requests.ts: realMethods = new WeakMap",
  "src/server/transport/binary-requests.ts: opaqueServices = new WeakMap",
  "src/server/policy/limits.ts: plans = new WeakMap",
  "src/server/policy/limits.ts: holdsMessages = new WeakMap",
  "src/server/services/reflection.ts: serializedFiles = new WeakMap",
];
