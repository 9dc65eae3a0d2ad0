import { parseArgs } from "node:util";

/**
 * The admin command's argument table: each subcommand is one entry (its name, positionals,
 * options and what it runs), parsed by node's `parseArgs` against the entry's options plus the
 * connection options every subcommand shares. Why a table: a new subcommand (fork, export,
 * delete) is one more entry, its help and its parsing come with it.
 */

/** One option: `--name value` (or `--name` alone for a flag). */
export interface OptionSpec {
  name: string;
  /** "string": one value; "list": repeatable; "flag": no value. */
  kind: "string" | "list" | "flag";
  /** What it means, for the help. */
  description: string;
  /** The environment variable read when the option is absent. */
  env?: string;
  /** The value when neither the option nor its variable is given. */
  default?: string;
}

/** What a subcommand's `run` gets: its positionals by name, its options' values, and where to print. */
export interface ParsedCommand {
  positionals: Record<string, string | undefined>;
  strings: Record<string, string | undefined>;
  lists: Record<string, string[]>;
  flags: Record<string, boolean>;
}

export interface CommandOutput {
  out: (text: string) => void;
  err: (text: string) => void;
}

export interface Subcommand<Context> {
  name: string;
  /** Positionals in order; a name ending in "?" is optional. */
  positionals: string[];
  summary: string;
  options: OptionSpec[];
  run(command: ParsedCommand, context: Context, output: CommandOutput): Promise<void>;
}

/** A usage mistake: printed with the subcommand's help, exit code 2. */
export class UsageError extends Error {}

/** Parses `argv` (after the subcommand's name) against `subcommand`'s table plus `shared`; UsageError naming what is wrong. */
export function parseCommand(subcommand: Subcommand<unknown>, shared: OptionSpec[], argv: string[], env: NodeJS.ProcessEnv): ParsedCommand {
  const specs = [...shared, ...subcommand.options];
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: Object.fromEntries(specs.map((spec) => [spec.name, { type: spec.kind === "flag" ? "boolean" : "string", multiple: spec.kind === "list" }])),
    });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  const required = subcommand.positionals.filter((name) => !name.endsWith("?")).length;
  if (parsed.positionals.length < required || parsed.positionals.length > subcommand.positionals.length) {
    throw new UsageError(`${subcommand.name} takes ${subcommand.positionals.map((name) => `<${name}>`).join(" ") || "no arguments"}, got ${parsed.positionals.length}`);
  }
  const command: ParsedCommand = { positionals: {}, strings: {}, lists: {}, flags: {} };
  subcommand.positionals.forEach((name, index) => (command.positionals[name.replace(/\?$/, "")] = parsed.positionals[index]));
  const values = parsed.values as Record<string, string | string[] | boolean | undefined>;
  for (const spec of specs) {
    const value = values[spec.name];
    if (spec.kind === "flag") command.flags[spec.name] = value === true || (value === undefined && spec.env !== undefined && ["1", "true"].includes(env[spec.env] ?? ""));
    else if (spec.kind === "list") command.lists[spec.name] = (value as string[] | undefined) ?? [];
    else command.strings[spec.name] = (value as string | undefined) ?? (spec.env !== undefined ? env[spec.env] : undefined) ?? spec.default;
  }
  return command;
}

/** The help of one subcommand, or of all of them. */
export function helpText(program: string, subcommands: Subcommand<unknown>[], shared: OptionSpec[], only?: Subcommand<unknown>): string {
  const optionLines = (specs: OptionSpec[]) =>
    specs.map((spec) => {
      const name = `  --${spec.name}${spec.kind === "flag" ? "" : " <value>"}${spec.kind === "list" ? " (repeatable)" : ""}`;
      const extra = [spec.env ? `env ${spec.env}` : "", spec.default !== undefined ? `default ${spec.default}` : ""].filter(Boolean).join(", ");
      return `${name.padEnd(34)} ${spec.description}${extra ? ` (${extra})` : ""}`;
    });
  const shown = only ? [only] : subcommands;
  const lines = [`usage: ${program} <command> [options]`, ""];
  for (const subcommand of shown) {
    lines.push(`${program} ${subcommand.name}${subcommand.positionals.map((name) => (name.endsWith("?") ? ` [${name.slice(0, -1)}]` : ` <${name}>`)).join("")}`, `  ${subcommand.summary}`);
    lines.push(...optionLines(subcommand.options), "");
  }
  lines.push("connection options (every command):", ...optionLines(shared));
  return lines.join("\n");
}

/** Rows as aligned columns under a header; the last column is not padded. */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((title, column) => Math.max(title.length, ...rows.map((row) => (row[column] ?? "").length)));
  const line = (cells: string[]) => cells.map((cell, column) => (column === cells.length - 1 ? cell : cell.padEnd(widths[column]!))).join("  ").trimEnd();
  return [line(header), ...rows.map(line)].join("\n");
}
