import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSidecar, type Sidecar } from "./support/sidecar.js";

// Every fenced block of README.md and docs/*.md that a user would copy runs here, as the user
// would run it, against one real sidecar (in memory): shell commands, Python, Go and TypeScript
// programs with the clients installed by the docs' own install blocks, JSON request bodies sent
// over Connect. A block is run unless its info string says otherwise (docs/development.md,
// "Snippets in the docs"), so a new block is run by default, and one with no info string fails.
// Every program runs twice: the second run finds the first one's conversations, so a snippet must
// use fresh ids. The languages run in parallel; within one, the install blocks come first.

const root = fileURLToPath(new URL("..", import.meta.url));
const documents = ["README.md", ...readdirSync(join(root, "docs")).filter((name) => name.endsWith(".md")).map((name) => `docs/${name}`)];

/** One fenced block: where it is, its language (the info string's first word) and attributes. */
interface Block {
  file: string;
  line: number;
  language: string;
  /** The info string's other words: `fragment`, `installs=python`, `rpc=ContextService/Compile`, ... */
  attributes: Map<string, string>;
  body: string;
}

function fencedBlocks(file: string): Block[] {
  const lines = readFileSync(join(root, file), "utf8").split("\n");
  const blocks: Block[] = [];
  for (let at = 0; at < lines.length; at++) {
    const open = /^(\s*)(```+)(.*)$/.exec(lines[at]!);
    if (open === null) continue;
    const [, indent, fence, info] = open as unknown as [string, string, string, string];
    const body: string[] = [];
    let end = at + 1;
    while (end < lines.length && lines[end]!.trimEnd() !== `${indent}${fence}`) body.push(lines[end++]!.slice(indent.length));
    const [language = "", ...words] = info.trim().split(/\s+/).filter((word) => word !== "");
    const attributes = new Map(words.map((word) => [word.split("=")[0]!, word.includes("=") ? word.slice(word.indexOf("=") + 1) : ""]));
    blocks.push({ file, line: at + 1, language, attributes, body: `${body.join("\n")}\n` });
    at = end;
  }
  return blocks;
}

const blocks = documents.flatMap(fencedBlocks);
const named = (block: Block) => `${block.file}:${block.line} ${block.language}${[...block.attributes].map(([key, value]) => ` ${key}${value ? `=${value}` : ""}`).join("")}`;
// What a block is when it is not run.
const notRun = (block: Block) => block.language === "text" || block.attributes.has("fragment") || block.attributes.has("tested-by");
const programLanguages = ["python", "go", "ts"] as const;
type ProgramLanguage = (typeof programLanguages)[number];
const runnable = blocks.filter((block) => !notRun(block));
const withoutComments = (script: string) => script.replace(/#.*$/gm, "").replace(/\s+/g, " ").trim();
// A language's install blocks, each distinct command list once (two pages may give the same lines).
const installs = (language: ProgramLanguage) =>
  runnable
    .filter((block) => block.language === "sh" && block.attributes.get("installs") === language)
    .filter((block, index, all) => all.findIndex((other) => withoutComments(other.body) === withoutComments(block.body)) === index);
const programs = (language: ProgramLanguage) => runnable.filter((block) => block.language === language);
const commands = runnable.filter((block) => block.language === "sh" && !block.attributes.has("installs"));
const requests = runnable.filter((block) => block.language === "json");
const protoExcerpts = runnable.filter((block) => block.language === "proto");

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

function execute(command: string, args: string[], options: { cwd: string; env: NodeJS.ProcessEnv; input?: string }): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: options.cwd, env: options.env, stdio: ["pipe", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk) => (stdout += chunk));
    child.stderr.on("data", (chunk) => (stderr += chunk));
    child.once("error", reject);
    child.once("close", (code) => resolve({ code, stdout, stderr }));
    // A command that exits without reading its input closes the pipe first (EPIPE): its exit code
    // and output say whether it ran right, not the write.
    child.stdin.on("error", () => undefined);
    child.stdin.end(options.input ?? "");
  });
}

/** Runs `ran` and fails naming the block with what it printed when it did not exit 0. */
async function succeeds(block: Block, what: string, ran: Promise<Ran>): Promise<Ran> {
  const result = await ran;
  if (result.code !== 0) throw new Error(`${named(block)}: ${what} exited ${result.code}\n--- stdout\n${result.stdout.slice(-4000)}\n--- stderr\n${result.stderr.slice(-4000)}`);
  return result;
}

describe("the docs' snippets", () => {
  let sidecar: Sidecar;
  let work: string;
  let env: NodeJS.ProcessEnv;
  /** The address the docs use (the default) becomes the shared sidecar's. */
  let localize: (text: string) => string;
  const ready = new Map<ProgramLanguage, Promise<string>>();

  beforeAll(async () => {
    sidecar = await startSidecar();
    work = mkdtempSync(join(tmpdir(), "contextd-docs-"));
    const address = `127.0.0.1:${sidecar.port}`;
    localize = (text) => text.replaceAll("127.0.0.1:7420", address).replaceAll("localhost:7420", address);
    env = {
      ...process.env,
      CONTEXTD: root,
      CONTEXTD_ADDRESS: address,
      // The registries are reached only for what no cache holds.
      npm_config_prefer_offline: "true",
      npm_config_audit: "false",
      npm_config_fund: "false",
      PIP_DISABLE_PIP_VERSION_CHECK: "1",
    };
  }, 60_000);
  afterAll(async () => {
    await sidecar?.stop();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it("mark every block they do not run, and have a runner for every one they do", () => {
    const unmarked = blocks.filter((block) => block.language === "").map(named);
    const known = new Set(["text", "sh", "json", "proto", ...programLanguages]);
    const unknown = blocks.filter((block) => block.language !== "" && !known.has(block.language)).map(named);
    const wholePrograms = [...programLanguages].flatMap((language) => programs(language)).filter((block) => block.language === "go" && !block.body.includes("package main")).map(named);
    const missingTests = blocks.filter((block) => block.attributes.has("tested-by") && !existsSync(join(root, block.attributes.get("tested-by")!))).map(named);
    expect({ unmarked, unknown, wholePrograms, missingTests }).toEqual({ unmarked: [], unknown: [], wholePrograms: [], missingTests: [] });
    // The docs hold programs of each language and their installs; a parser that found none is broken.
    for (const language of programLanguages) expect([language, programs(language).length > 0, installs(language).length > 0]).toEqual([language, true, true]);
  });

  // The project a language's programs run in, made by its install blocks.
  const project = (language: ProgramLanguage): Promise<string> => {
    let made = ready.get(language);
    if (made === undefined) {
      made = makeProject(language);
      ready.set(language, made);
    }
    return made;
  };

  async function makeProject(language: ProgramLanguage): Promise<string> {
    const dir = join(work, language);
    mkdirSync(dir, { recursive: true });
    const shell = (block: Block, cwd: string, extraEnv: NodeJS.ProcessEnv = {}) =>
      succeeds(block, "the install block", execute("bash", ["-euo", "pipefail", "-c", localize(block.body)], { cwd, env: { ...env, ...extraEnv } }));
    if (language === "python") {
      // A fresh venv, as a user makes one; the install blocks run from the checkout ("from a checkout").
      const venv = join(dir, "venv");
      await succeeds(installs(language)[0]!, "python3 -m venv", execute("python3", ["-m", "venv", venv], { cwd: dir, env }));
      for (const block of installs(language)) await shell(block, root, { PATH: `${join(venv, "bin")}:${env.PATH}`, VIRTUAL_ENV: venv });
      return dir;
    }
    if (language === "go") {
      // A module of the user's own: the programs first (`go mod tidy` keeps what they import).
      await succeeds(installs(language)[0]!, "go mod init", execute("go", ["mod", "init", "contextd.docs/agent"], { cwd: dir, env }));
      for (const [index, block] of programs(language).entries()) {
        mkdirSync(join(dir, `snippet${index}`));
        writeFileSync(join(dir, `snippet${index}`, "main.go"), localize(block.body));
      }
      for (const block of installs(language)) await shell(block, dir);
      await succeeds(installs(language)[0]!, "go build", execute("go", ["build", "-o", join(dir, "bin") + "/", "./..."], { cwd: dir, env }));
      return dir;
    }
    writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "agent", private: true, type: "module" }));
    for (const block of installs(language)) await shell(block, dir);
    for (const [index, block] of programs(language).entries()) writeFileSync(join(dir, `snippet${index}.ts`), localize(block.body));
    // Type-checked against the installed package's declarations, as the user's editor would.
    writeFileSync(
      join(dir, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          target: "ES2022", module: "NodeNext", moduleResolution: "NodeNext", lib: ["ES2023", "DOM"], types: ["node"], typeRoots: [join(root, "node_modules/@types")],
          strict: true, skipLibCheck: true, noEmit: true, allowImportingTsExtensions: true, erasableSyntaxOnly: true,
        },
        include: ["snippet*.ts"],
      }),
    );
    await succeeds(programs(language)[0]!, "tsc", execute(process.execPath, [join(root, "node_modules/typescript/bin/tsc"), "-p", "tsconfig.json"], { cwd: dir, env }));
    return dir;
  }

  for (const language of programLanguages) {
    for (const [index, block] of programs(language).entries()) {
      it.concurrent(`${named(block)} runs twice`, async () => {
        const dir = await project(language);
        for (const run of [1, 2]) {
          const ran =
            language === "python"
              ? (writeFileSync(join(dir, `snippet${index}.py`), localize(block.body)), execute(join(dir, "venv", "bin", "python"), [join(dir, `snippet${index}.py`)], { cwd: dir, env }))
              : language === "go"
                ? execute(join(dir, "bin", `snippet${index}`), [], { cwd: dir, env })
                : execute(process.execPath, [join(dir, `snippet${index}.ts`)], { cwd: dir, env });
          const { stdout } = await succeeds(block, `run ${run}`, ran);
          expect({ run, printed: stdout.trim() !== "" }).toEqual({ run, printed: true });
        }
      }, 300_000);
    }
  }

  for (const block of commands) {
    it.concurrent(`${named(block)} runs${block.attributes.has("serves") ? " and serves" : " twice"}`, async () => {
      if (block.attributes.has("serves")) {
        // A command that starts a sidecar: up once it says it listens (on a port of its own), then stopped.
        const child = spawn("bash", ["-euo", "pipefail", "-c", localize(block.body)], { cwd: root, env: { ...env, CONTEXTD_PORT: "0" }, detached: true, stdio: ["ignore", "pipe", "pipe"] });
        let stderr = "";
        child.stderr.on("data", (chunk) => (stderr += chunk));
        try {
          const listening = await new Promise<string>((resolve, reject) => {
            const timer = setTimeout(() => reject(new Error(`${named(block)}: no "contextd listening" within 120 s\n${stderr}`)), 120_000);
            child.once("exit", (code) => reject(new Error(`${named(block)}: exited ${code} before listening\n${stderr}`)));
            createInterface({ input: child.stdout }).on("line", (line) => {
              if (line.includes('"msg":"contextd listening"')) {
                clearTimeout(timer);
                resolve(line);
              }
            });
          });
          expect(JSON.parse(listening)).toMatchObject({ msg: "contextd listening" });
        } finally {
          const exited = once(child, "exit");
          process.kill(-child.pid!, "SIGTERM");
          await exited;
        }
        return;
      }
      for (const run of [1, 2]) await succeeds(block, `run ${run}`, execute("bash", ["-euo", "pipefail", "-c", localize(block.body)], { cwd: root, env }));
    }, 300_000);
  }

  for (const block of requests) {
    it.concurrent(`${named(block)} is JSON${block.attributes.has("rpc") ? ` the sidecar takes as contextd.v1.${block.attributes.get("rpc")}, twice` : ""}`, async () => {
      const body = JSON.parse(block.body) as unknown;
      const rpc = block.attributes.get("rpc");
      if (rpc === undefined) return expect(body).toBeDefined();
      for (const run of [1, 2]) {
        const answer = await fetch(`${sidecar.url}/contextd.v1.${rpc}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
        expect({ run, status: answer.status, body: answer.status === 200 ? "" : await answer.text() }).toEqual({ run, status: 200, body: "" });
      }
    });
  }

  // A fragment is not run, but it must parse: a user pastes it into a program of their own.
  for (const block of blocks.filter((candidate) => candidate.attributes.has("fragment"))) {
    it(`${named(block)} parses`, async () => {
      if (block.language === "ts") {
        const { diagnostics = [] } = ts.transpileModule(block.body, { reportDiagnostics: true, compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 } });
        expect(diagnostics.map((diagnostic) => ts.flattenDiagnosticMessageText(diagnostic.messageText, "\n"))).toEqual([]);
        return;
      }
      // gofmt takes a list of statements or declarations as well as a file.
      const [command, args] = block.language === "go" ? ["gofmt", ["-e"]] : ["python3", ["-c", "import ast, sys; ast.parse(sys.stdin.read())"]];
      const parsed = await execute(command, args, { cwd: root, env: process.env, input: block.body });
      expect({ code: parsed.code, stderr: parsed.stderr }).toEqual({ code: 0, stderr: "" });
    });
  }

  for (const block of protoExcerpts) {
    it(`${named(block)} is an excerpt of proto/contextd/v1, comments aside`, () => {
      // The comments are the page's own summary; the declarations must be the contract's.
      const squeeze = (text: string) => text.replace(/\/\/.*$/gm, "").replace(/\s+/g, " ").trim();
      const protos = readdirSync(join(root, "proto/contextd/v1")).map((name) => squeeze(readFileSync(join(root, "proto/contextd/v1", name), "utf8")));
      expect(protos.some((proto) => proto.includes(squeeze(block.body)))).toBe(true);
    });
  }
});
