"""A LangChain chat whose history lives in contextd, with LangChain's fake chat model in place of
the LLM.

Needs the extra: `pip install './clients/python[langchain]'`. Run a sidecar (`node dist/src/main.js`), then
`python examples/python/langchain_history.py`. CONTEXTD_ADDRESS overrides the default
127.0.0.1:7420.
"""

from __future__ import annotations

import os
import uuid

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from contextd.client import Client
from contextd.client.langchain_history import ContextdChatMessageHistory
from contextd.v1 import compile_pb2



def main() -> None:
    # STUB MODEL, NOT AN LLM: LangChain's fake chat model answers from a list. Use a real chat
    # model (for example ChatOpenAI) instead.
    model = GenericFakeChatModel(messages=iter([AIMessage(content="Nice to meet you, Ana."), AIMessage(content="You are Ana.")]))
    with Client(os.environ.get("CONTEXTD_ADDRESS", "127.0.0.1:7420")) as client:
        client.wait_ready()
        history = ContextdChatMessageHistory("langchain-example-" + uuid.uuid4().hex[:8], client)
        for question in ["Hi, I'm Ana.", "Who am I?"]:
            history.add_user_message(question)
            # A budgeted read: what fits 4,000 tokens, newest first, whole tool rounds.
            answer = model.invoke(history.get_messages(compile_pb2.Budget(max_tokens=4000)))
            history.add_message(answer)
            print(f"user: {question}\nassistant: {answer.content}")
        print(f"messages stored: {len(history.messages)}")


if __name__ == "__main__":
    main()
