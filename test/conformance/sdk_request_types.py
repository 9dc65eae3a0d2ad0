"""Checks rendered request bodies against the providers' official Python SDK request types.

Usage: python sdk_request_types.py BODIES.jsonl  (one {"key", "provider", "body"} object a line)

Strict: every TypedDict of the openai and anthropic request types is made to refuse unknown keys
(pydantic reads `__pydantic_config__` from a TypedDict), and lazily validated iterables are
drained so their items are checked too; google-genai's models already forbid extra fields and are
fed the JSON text (so base64 fields are decoded as the REST API decodes them). Before the bodies,
negative controls (an unknown key at the top and deep inside, a wrong type) must be refused for
each provider, so a check that accepts everything cannot pass.

Prints one JSON object: {"checked": N, "failures": [{"key", "error"}], "controls": {"run", "refused"}}.
"""

import copy
import json
import sys
import typing

import typing_extensions
from pydantic import BaseModel, ConfigDict, TypeAdapter

from anthropic.types import message_create_params
from anthropic.types.beta import message_create_params as beta_message_create_params
from google.genai import types as genai
from openai.types.chat import completion_create_params
from openai.types.responses import response_create_params


def refuse_unknown_keys(root: object) -> None:
    """Sets extra='forbid' on every TypedDict and model reachable from `root`'s annotations.

    Some request unions also take the SDK's response models (anthropic accepts a `TextBlock` where
    a `TextBlockParam` goes), which allow extra fields: those are rebuilt to forbid them too, in
    this process only.
    """
    seen: set[int] = set()
    models: list[type[BaseModel]] = []
    stack = [root]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if typing_extensions.is_typeddict(current):
            current.__pydantic_config__ = ConfigDict(extra="forbid", arbitrary_types_allowed=True)  # type: ignore[attr-defined]
            stack.extend(typing.get_type_hints(current, include_extras=True).values())
        elif isinstance(current, type) and issubclass(current, BaseModel):
            models.append(current)
            stack.extend(field.annotation for field in current.model_fields.values())
        else:
            stack.extend(arg for arg in typing.get_args(current) if not isinstance(arg, (str, int, bool, bytes, type(None))))
    for model in models:
        model.model_config["extra"] = "forbid"
    for model in models:
        model.model_rebuild(force=True)


def drained(value: object) -> object:
    """Consumes pydantic's lazy iterable validators, which check their items only when read."""
    if isinstance(value, dict):
        return {key: drained(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [drained(item) for item in value]
    if type(value).__name__ == "ValidatorIterator":
        return [drained(item) for item in value]  # type: ignore[attr-defined]
    return value


def typed_dict_check(root: object):
    refuse_unknown_keys(root)
    adapter = TypeAdapter(root)
    return lambda body: drained(adapter.validate_python(body))


chat = typed_dict_check(completion_create_params.CompletionCreateParamsNonStreaming)
responses = typed_dict_check(response_create_params.ResponseCreateParamsNonStreaming)
anthropic_messages = typed_dict_check(message_create_params.MessageCreateParamsNonStreaming)
# A body holding a compaction block goes to the beta Messages API (compact-2026-01-12).
anthropic_beta_messages = typed_dict_check(beta_message_create_params.MessageCreateParamsNonStreaming)


def has_compaction(body: dict) -> bool:
    return any(isinstance(block, dict) and block.get("type") == "compaction" for message in body.get("messages", []) for block in (message.get("content") if isinstance(message.get("content"), list) else []))
gemini_contents = TypeAdapter(list[genai.Content])
gemini_tools = TypeAdapter(list[genai.Tool])
gemini_keys = {"contents", "systemInstruction", "tools"}


def gemini(body: dict) -> None:
    unknown = set(body) - gemini_keys
    if unknown:
        raise ValueError(f"unknown top-level keys {sorted(unknown)}")
    gemini_contents.validate_json(json.dumps(body["contents"]))
    if "systemInstruction" in body:
        genai.Content.model_validate_json(json.dumps(body["systemInstruction"]))
    if "tools" in body:
        gemini_tools.validate_json(json.dumps(body["tools"]))


def check(provider: str, body: dict) -> None:
    """Raises when `body`, completed with what the caller adds (model, max_tokens), is not of the SDK's type."""
    if provider == "openai_chat":
        chat({"model": "gpt-4.1", **body})
    elif provider == "openai_responses":
        responses({"model": "gpt-4.1", **body})
    elif provider == "anthropic":
        check_anthropic = anthropic_beta_messages if has_compaction(body) else anthropic_messages
        check_anthropic({"model": "claude-sonnet-4-5", "max_tokens": 1024, **body})
    elif provider == "gemini":
        gemini(body)
    else:
        raise ValueError(f"unknown provider {provider}")


def controls(provider: str, body: dict) -> list[dict]:
    """Broken copies of a valid body that a strict check must refuse."""
    unknown_top = {**copy.deepcopy(body), "not_a_field": 1}
    deep = copy.deepcopy(body)
    items = deep.get("messages") or deep.get("input") or deep.get("contents")
    first = items[0]
    if provider == "gemini":
        first["parts"][0]["notAField"] = 1
    elif isinstance(first.get("content"), list):
        first["content"][0]["not_a_field"] = 1
    else:
        first["not_a_field"] = 1
    wrong_type = copy.deepcopy(body)
    key = "messages" if "messages" in body else "input" if "input" in body else "contents"
    wrong_type[key] = [{"role": 7}]
    return [unknown_top, deep, wrong_type]


def main() -> None:
    entries = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8") if line.strip()]
    failures = []
    run = refused = 0
    firsts: dict[str, dict] = {}
    for entry in entries:
        firsts.setdefault(entry["provider"], entry["body"])
    broken_bodies = [(provider, broken) for provider, body in firsts.items() for broken in controls(provider, body)]
    # The beta check is strict too: an unknown key inside a compaction block is refused.
    compacted = next((entry["body"] for entry in entries if entry["provider"] == "anthropic" and has_compaction(entry["body"])), None)
    if compacted is not None:
        broken = copy.deepcopy(compacted)
        broken["messages"][0]["content"][0]["not_a_field"] = 1
        broken_bodies.append(("anthropic", broken))
    for provider, broken in broken_bodies:
        run += 1
        try:
            check(provider, broken)
        except Exception:
            refused += 1
    for entry in entries:
        try:
            check(entry["provider"], entry["body"])
        except Exception as error:  # noqa: BLE001 - every refusal is a finding to print
            failures.append({"key": entry["key"], "error": str(error)[:1500]})
    print(json.dumps({"checked": len(entries), "failures": failures, "controls": {"run": run, "refused": refused}}))


if __name__ == "__main__":
    main()
