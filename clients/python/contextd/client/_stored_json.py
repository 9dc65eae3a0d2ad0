"""A framework's own JSON for a message, kept beside the message's typed parts without storing its
large strings twice.

The adapters keep what a framework gave them (Agents SDK items, a LangChain message) in the
message's `Extension`, so reads give back exactly that, and contextd's typed parts (text, tool
calls, results) so contextd can count, trim and render it. A string the typed parts already hold
verbatim is taken out of the extension's JSON and named by a reference instead: the extension
holds `{"value": <the JSON with those strings as null>, "refs": [[path, part, field, kind], ...]}`
(`path` the keys and indices of the string in the value, `part` the index of the part holding
it, `field` its dotted field, `kind` "text" or "json" for a value held as JSON text). Strings
shorter than `MIN_REFERENCED_CHARS` stay in the JSON, where they cost less than a reference.

Protobuf strings must be valid UTF-8, so a lone surrogate (for example "\\ud83d", which Python
strings and JSON allow) cannot go into a typed part: `wire_text` replaces it there with U+FFFD,
such a string is not referenced, and the extension's JSON keeps it as a JSON escape. Reads give
the original back; only what contextd renders for a provider carries the U+FFFD.
"""

from __future__ import annotations

import json
import re
from functools import reduce
from typing import Any, List, Optional, Sequence, Tuple, Union

from contextd.v1 import message_pb2

#: Strings shorter than this stay in the extension's JSON even when a typed part holds them.
MIN_REFERENCED_CHARS = 32

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")

Path = Tuple[Union[str, int], ...]


def wire_text(text: str) -> str:
    """`text` as a protobuf string can carry it: each lone surrogate replaced by U+FFFD."""
    if text.isascii() or not _LONE_SURROGATE.search(text):
        return text
    return _LONE_SURROGATE.sub("\ufffd", text)


def json_text(value: Any) -> str:
    """Compact JSON text of `value` that is valid UTF-8: non-ASCII characters as they are, lone
    surrogates as JSON escapes (they can only occur inside JSON strings)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if text.isascii() or not _LONE_SURROGATE.search(text):
        return text
    return _LONE_SURROGATE.sub(lambda match: "\\u%04x" % ord(match.group()), text)


class PartsBuilder:
    """The typed parts of one message, built with a note of which string of the framework's
    value each part holds, so `extension` can leave those strings out."""

    def __init__(self) -> None:
        self.parts: List[message_pb2.Part] = []
        self._refs: List[List[Any]] = []

    def add(self, part: message_pb2.Part, *claims: Tuple[Path, str, Any]) -> None:
        """Appends `part`. Each claim `(path, field, original)` says that `field` of the part
        ("text.text", "tool_result.payload.data", ...) was made from the value `original` at
        `path`: a string (referenced when the field holds it verbatim), or any other JSON value
        for a field the adapter set to `json_text(original)` (which `json.loads` turns back into
        it exactly, lone surrogates included)."""
        index = len(self.parts)
        self.parts.append(part)
        for path, field, original in claims:
            stored = _field(part, field)
            if isinstance(original, str):
                if original == stored and len(original) >= MIN_REFERENCED_CHARS:
                    self._refs.append([list(path), index, field, "text"])
            elif len(stored) >= MIN_REFERENCED_CHARS:
                self._refs.append([list(path), index, field, "json"])

    def extension(self, type_id: str, value: Any) -> message_pb2.Extension:
        """The extension keeping `value`, without the strings the parts hold."""
        skeleton = value
        for path, _, _, _ in self._refs:
            skeleton = _without(skeleton, path)
        return message_pb2.Extension(type_id=type_id, payload=json_text({"value": skeleton, "refs": self._refs}))


def restore(payload: str, parts: Sequence[message_pb2.Part]) -> Any:
    """The value an extension made by `PartsBuilder.extension` keeps, its strings put back from
    `parts`."""
    stored = json.loads(payload)
    value = stored["value"]
    for path, index, field, kind in stored["refs"]:
        text = _field(parts[index], field)
        _set(value, path, json.loads(text) if kind == "json" else text)
    return value


def _field(part: message_pb2.Part, field: str) -> str:
    return reduce(getattr, field.split("."), part)


def _without(value: Any, path: Sequence[Union[str, int]]) -> Any:
    """`value` with null at `path`; the containers along the path are copied, the rest shared."""
    copy = dict(value) if isinstance(value, dict) else list(value)
    key = path[0]
    copy[key] = None if len(path) == 1 else _without(value[key], path[1:])  # type: ignore[index]
    return copy


def _set(value: Any, path: Sequence[Union[str, int]], replacement: Optional[Any]) -> None:
    parent = value
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = replacement
