"""The compile the framework integration points run on a model's input: the messages a framework
is about to send, compiled inline (nothing stored) within a budget, and the kept ones mapped back
to the framework's own objects."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from contextd.v1 import compile_pb2, message_pb2


def inline_request(
    history: Sequence[message_pb2.Message],
    system: Sequence[message_pb2.Message],
    budget: Optional[compile_pb2.Budget],
    template: Optional[compile_pb2.CompileRequest],
) -> compile_pb2.CompileRequest:
    """A compile of `history` (whose messages need ids) and `system`, with `template`'s options
    (clearing, repair, estimator calibration, ...; not modified) and `budget` over its own. The
    compile's payload is what the caller maps back, so it is always asked for."""
    request = compile_pb2.CompileRequest()
    if template is not None:
        request.CopyFrom(template)
    if request.conversation_id or request.HasField("commit"):
        raise ValueError("the model-input compile is inline: its template may not name a conversation or commit")
    request.history.CopyFrom(compile_pb2.MessageList(messages=history))
    if system:
        request.system.CopyFrom(compile_pb2.MessageList(messages=system))
    if budget is not None:
        request.budget.CopyFrom(budget)
    if request.include and compile_pb2.COMPILE_RESULT_PART_PAYLOAD not in request.include:
        request.include.append(compile_pb2.COMPILE_RESULT_PART_PAYLOAD)
    return request


def kept_history(
    sent: Sequence[message_pb2.Message], result: compile_pb2.CompileResult
) -> List[Tuple[Optional[int], bool, message_pb2.Message]]:
    """For each history message of the compile's payload, in order: the index of the message of
    `sent` it stands for (None for one the compile made, such as a summary), whether the compile
    changed its parts (a cleared tool result, cleared reasoning), and the compiled message."""
    index_by_id = {message.id: index for index, message in enumerate(sent)}
    kept: List[Tuple[Optional[int], bool, message_pb2.Message]] = []
    for message in result.payload.history:
        index = index_by_id.get(message.id)
        changed = index is None or list(sent[index].parts) != list(message.parts)
        kept.append((index, changed, message))
    return kept
