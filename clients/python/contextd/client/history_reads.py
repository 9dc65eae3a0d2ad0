"""Reads of a conversation's history through `ReadMessages`, for the adapters: the whole history in
pages (any size, where `get_state` refuses a state over the message limit), or only the tail that
holds the last N of something (the Agents SDK's items, of which one message may hold several).

The tail read returns the messages with the version they were read at, so a writer can commit on top
of what it read (`expected_version`) without reading the rest of the conversation. It asks for the
last `wanted` messages, then for earlier ranges twice as long each time,
all at the first read's version (explicit `version`), until the messages read hold `wanted` units
or the history's start is reached: a read of the last 10 items of 1,000 messages moves about 10
messages, not 1,000. When the conversation moves on between two of those reads and the sidecar no
longer keeps the first version (`VersionConflict`), the read starts over, up to three times.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Generator, List, NamedTuple, Optional, Tuple

from contextd.client.errors import VersionConflict
from contextd.v1 import conversation_service_pb2 as conversation_pb2, message_pb2, state_pb2

if TYPE_CHECKING:
    from contextd.client._sync import Client
    from contextd.client.aio import AsyncClient

_ATTEMPTS = 3
_MAX_LAST = 2**32 - 1


class HistoryTail(NamedTuple):
    """A tail of the history and the version it was read at (0 for a conversation never written)."""

    messages: List[message_pb2.Message]
    version: int


def read_history(client: "Client", conversation_id: str) -> List[message_pb2.Message]:
    """Every history message, in order, read in pages at one version."""
    request = conversation_pb2.ReadMessagesRequest(conversation_id=conversation_id, segment=state_pb2.SEGMENT_HISTORY)
    return [message for page in client.message_pages(request) for message in page.messages]


async def read_history_async(client: "AsyncClient", conversation_id: str) -> List[message_pb2.Message]:
    """As `read_history`, over the asyncio client."""
    request = conversation_pb2.ReadMessagesRequest(conversation_id=conversation_id, segment=state_pb2.SEGMENT_HISTORY)
    return [message async for page in client.message_pages(request) for message in page.messages]


def read_history_tail(
    client: "Client", conversation_id: str, wanted: int, units: Callable[[message_pb2.Message], int]
) -> HistoryTail:
    """The shortest tail of the history whose messages hold at least `wanted` units (`units`
    counts them per message), or the whole history when it holds fewer, with its version."""
    for attempt in range(1, _ATTEMPTS + 1):
        plan = _tail_plan(conversation_id, wanted, units)
        try:
            window = next(plan)
            while True:
                window = plan.send(_messages(client, window))
        except StopIteration as done:
            return done.value
        except VersionConflict:
            if attempt == _ATTEMPTS:
                raise
    raise AssertionError("unreachable")


async def read_history_tail_async(
    client: "AsyncClient", conversation_id: str, wanted: int, units: Callable[[message_pb2.Message], int]
) -> HistoryTail:
    """As `read_history_tail`, over the asyncio client."""
    for attempt in range(1, _ATTEMPTS + 1):
        plan = _tail_plan(conversation_id, wanted, units)
        try:
            window = next(plan)
            while True:
                window = plan.send(await _messages_async(client, window))
        except StopIteration as done:
            return done.value
        except VersionConflict:
            if attempt == _ATTEMPTS:
                raise
    raise AssertionError("unreachable")


_Read = Tuple[List[message_pb2.Message], int, int]


def _tail_plan(
    conversation_id: str, wanted: int, units: Callable[[message_pb2.Message], int]
) -> Generator[conversation_pb2.ReadMessagesRequest, _Read, HistoryTail]:
    """The tail read once, for both clients: yields each window to read, is sent back what it read
    (messages, version, window start) and returns the tail; the callers only do the I/O."""
    messages, version, start = yield _window(conversation_id, last=wanted)
    held = sum(units(message) for message in messages)
    step = max(wanted, 1)
    while held < wanted and start > 0:
        step *= 2
        earlier_start = max(0, start - step)
        earlier, _, _ = yield _window(conversation_id, start=earlier_start, end=start, version=version)
        held += sum(units(message) for message in earlier)
        messages = earlier + messages
        start = earlier_start
    return HistoryTail(messages, version)


def _window(
    conversation_id: str, *, last: int = 0, start: int = 0, end: Optional[int] = None, version: Optional[int] = None
) -> conversation_pb2.ReadMessagesRequest:
    # `last` is a uint32; more than that many messages is the whole history anyway.
    request = conversation_pb2.ReadMessagesRequest(conversation_id=conversation_id, segment=state_pb2.SEGMENT_HISTORY, last=min(last, _MAX_LAST), start=start)
    if end is not None:
        request.end = end
    if version is not None:
        request.version = version
    return request


def _messages(client: "Client", request: conversation_pb2.ReadMessagesRequest) -> _Read:
    """The window's messages (every page), its version and where it starts."""
    pages = list(client.message_pages(request))
    return [message for page in pages for message in page.messages], pages[0].version, pages[0].window_start


async def _messages_async(client: "AsyncClient", request: conversation_pb2.ReadMessagesRequest) -> _Read:
    pages = [page async for page in client.message_pages(request)]
    return [message for page in pages for message in page.messages], pages[0].version, pages[0].window_start
