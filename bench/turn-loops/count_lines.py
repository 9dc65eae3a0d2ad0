"""Counts the lines of the 20-turn agent loop in each language and library (`npm run bench:loop-lines`).

Each loop file marks its loop with `loop:start` / `loop:end` comments: everything that keeps,
trims and renders the conversation and drives the model, from creating the client or session to
the last answer stored. Not counted: imports, the stub model and tool (shared), printing. Counted
lines are those with code: blank lines and comment-only lines are skipped. Go is gofmt-formatted
(`if err != nil { return err }` is three lines).
"""

from __future__ import annotations

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOOPS = [
    ("contextd, Python client (`Client.turn`)", "examples/python/turn_loop.py", "in the sidecar (memory or Redis), versioned; one RPC per model call"),
    ("contextd, Go client (`Client.Turn`)", "examples/go/turn_loop/main.go", "in the sidecar (memory or Redis), versioned; one RPC per model call"),
    ("contextd, TypeScript client (`client.turn`; 600-token budget, its own stub)", "examples/typescript/agent_loop.ts", "in the sidecar (memory or Redis), versioned; one RPC per model call"),
    ("OpenAI Agents SDK `SQLiteSession`", "bench/turn-loops/agents_sdk_session.py", "SQLite (in memory here); trimming, tool-round integrity and system prompt by hand"),
    ("LangChain `trim_messages`", "bench/turn-loops/langchain_trim_messages.py", "a Python list in the process; not stored"),
]


def loop_lines(path: pathlib.Path) -> int:
    inside, count = False, 0
    for line in path.read_text(encoding="utf-8").splitlines():
        code = line.strip()
        # examples/typescript/agent_loop.ts marks its loop with "--- the loop" / "--- end of the loop".
        if code.endswith("loop:start") or code.startswith("// --- the loop"):
            inside = True
            continue
        if code.endswith("loop:end") or code.startswith("// --- end of the loop"):
            return count
        if inside and code and not code.startswith(("#", "//")):
            count += 1
    raise ValueError(f"{path}: no loop:start / loop:end markers")


def main() -> None:
    print("| loop | file | lines | conversation kept |")
    print("|---|---|---|---|")
    for name, file, kept in LOOPS:
        print(f"| {name} | `{file}` | {loop_lines(ROOT / file)} | {kept} |")


if __name__ == "__main__":
    main()
