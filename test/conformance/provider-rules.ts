/**
 * A second, independent reading of each provider's documented request rules, over the rendered
 * JSON only (it knows nothing of contextd's renderers or validators). Each rule cites where the
 * provider states it; the SDK request types cannot express these (issue 27).
 */

export type ProviderName = "openai_chat" | "openai_responses" | "anthropic" | "gemini";

export interface RuleViolation {
  rule: string;
  source: string;
  /** JSON path of the offending value, e.g. `messages[3].tool_calls[0].id`. */
  path: string;
  detail: string;
}

interface Rule {
  id: string;
  source: string;
  check: (body: Json, report: (path: string, detail: string) => void) => void;
}

type Json = Record<string, unknown>;
const list = (value: unknown): Json[] => (Array.isArray(value) ? (value as Json[]) : []);
const idAlphabet = /^[a-zA-Z0-9_-]+$/;
const webImages = ["image/png", "image/jpeg", "image/gif", "image/webp"];
const dataUrlType = (url: string) => /^data:([^;,]+);base64,/.exec(url)?.[1];

const chatRules: Rule[] = [
  {
    id: "openai_chat.tool_call_id_length",
    // The 400 "string too long ... maximum length 40" on messages[].tool_calls[].id and tool_call_id.
    source: "https://platform.openai.com/docs/api-reference/chat/create",
    check: (body, report) =>
      list(body["messages"]).forEach((message, index) => {
        list(message["tool_calls"]).forEach((call, at) => {
          if (String(call["id"]).length > 40) report(`messages[${index}].tool_calls[${at}].id`, "longer than 40 characters");
        });
        if (typeof message["tool_call_id"] === "string" && message["tool_call_id"].length > 40) report(`messages[${index}].tool_call_id`, "longer than 40 characters");
      }),
  },
  {
    id: "openai_chat.name_pattern",
    source: "https://platform.openai.com/docs/api-reference/chat/create",
    check: (body, report) =>
      list(body["messages"]).forEach((message, index) => {
        const name = message["name"];
        if (name !== undefined && !(typeof name === "string" && name.length <= 64 && idAlphabet.test(name))) report(`messages[${index}].name`, `"${String(name)}" is not ^[a-zA-Z0-9_-]{1,64}$`);
      }),
  },
  {
    id: "openai_chat.file_parts",
    // File inputs: PDF as base64 file_data (with filename) or an uploaded file_id; no URLs.
    source: "https://platform.openai.com/docs/guides/pdf-files",
    check: (body, report) =>
      list(body["messages"]).forEach((message, index) =>
        list(message["content"]).forEach((part, at) => {
          if (part["type"] !== "file") return;
          const file = part["file"] as Json;
          const path = `messages[${index}].content[${at}].file`;
          if (typeof file["file_data"] === "string") {
            if (dataUrlType(file["file_data"]) !== "application/pdf") report(path, "file_data is not a PDF data URL");
            if (typeof file["filename"] !== "string" || file["filename"] === "") report(path, "file_data without filename");
          } else if (typeof file["file_id"] !== "string" || /^https?:/.test(file["file_id"])) report(path, "neither PDF file_data nor an uploaded file_id");
        }),
      ),
  },
  {
    id: "openai_chat.image_types",
    source: "https://platform.openai.com/docs/guides/images-vision",
    check: (body, report) =>
      list(body["messages"]).forEach((message, index) =>
        list(message["content"]).forEach((part, at) => {
          if (part["type"] !== "image_url") return;
          const type = dataUrlType(String((part["image_url"] as Json)["url"]));
          if (type !== undefined && !webImages.includes(type)) report(`messages[${index}].content[${at}]`, `inline image type ${type}`);
        }),
      ),
  },
  {
    id: "openai_chat.tool_messages_answer_calls",
    // Each tool message answers a tool_call of the assistant message before the run of tool messages;
    // every call is answered before the next message of another kind.
    source: "https://platform.openai.com/docs/guides/function-calling",
    check: (body, report) => {
      let open: Set<string> | undefined;
      const seen = new Set<string>();
      list(body["messages"]).forEach((message, index) => {
        if (message["role"] === "tool") {
          if (!open || !open.delete(String(message["tool_call_id"]))) report(`messages[${index}].tool_call_id`, "answers no open call of the preceding assistant message");
          return;
        }
        // Images a tool returned follow its tool messages in a user message.
        if (open && open.size > 0 && index < list(body["messages"]).length - 1 && message["role"] !== "user") report(`messages[${index}]`, "calls of the previous assistant message are unanswered");
        open = undefined;
        const calls = list(message["tool_calls"]);
        if (calls.length > 0) {
          open = new Set();
          calls.forEach((call, at) => {
            const id = String(call["id"]);
            if (seen.has(id)) report(`messages[${index}].tool_calls[${at}].id`, `id "${id}" used twice in the body`);
            seen.add(id);
            open!.add(id);
          });
        }
      });
    },
  },
];

const responsesRules: Rule[] = [
  {
    id: "openai_responses.call_id_length",
    source: "https://platform.openai.com/docs/api-reference/responses/create",
    check: (body, report) =>
      list(body["input"]).forEach((item, index) => {
        if ((item["type"] === "function_call" || item["type"] === "function_call_output") && String(item["call_id"]).length > 64) report(`input[${index}].call_id`, "longer than 64 characters");
      }),
  },
  {
    id: "openai_responses.reasoning_pairs",
    // Reasoning items go back with the items they produced, and those items' ids only with them:
    // "function_call was provided without its required 'reasoning' item", "reasoning was provided
    // without its required following item".
    source: "https://platform.openai.com/docs/guides/reasoning#keeping-reasoning-items-in-context",
    check: (body, report) => {
      const input = list(body["input"]);
      input.forEach((item, index) => {
        if (item["type"] === "reasoning") {
          const next = input.slice(index + 1).find((later) => later["type"] !== "reasoning");
          const produced = next && (next["type"] === "function_call" || (next["type"] === "message" && next["role"] === "assistant"));
          if (!produced) report(`input[${index}]`, "reasoning item not followed by the item it produced");
        }
        if (item["type"] === "function_call" && item["id"] !== undefined) {
          let at = index - 1;
          while (at >= 0 && (input[at]!["type"] === "function_call" || (input[at]!["type"] === "message" && input[at]!["role"] === "assistant"))) at--;
          if (at < 0 || input[at]!["type"] !== "reasoning") report(`input[${index}].id`, "item id sent without the reasoning item it was produced with");
        }
      });
    },
  },
  {
    id: "openai_responses.input_file",
    source: "https://platform.openai.com/docs/guides/pdf-files",
    check: (body, report) => {
      const visit = (content: unknown, path: string) =>
        list(content).forEach((part, at) => {
          if (part["type"] !== "input_file") return;
          if (typeof part["file_data"] === "string") {
            if (typeof part["filename"] !== "string" || part["filename"] === "") report(`${path}[${at}]`, "file_data without filename");
            if (dataUrlType(part["file_data"]) !== "application/pdf") report(`${path}[${at}]`, "file_data is not a PDF");
          }
        });
      list(body["input"]).forEach((item, index) => {
        visit(item["content"], `input[${index}].content`);
        visit(item["output"], `input[${index}].output`);
      });
    },
  },
  {
    id: "openai_responses.outputs_answer_calls",
    source: "https://platform.openai.com/docs/guides/function-calling",
    check: (body, report) => {
      const calls = new Set<string>();
      list(body["input"]).forEach((item, index) => {
        if (item["type"] === "function_call") {
          if (calls.has(String(item["call_id"]))) report(`input[${index}].call_id`, "call_id used twice in the body");
          calls.add(String(item["call_id"]));
        }
        if (item["type"] === "function_call_output" && !calls.has(String(item["call_id"]))) report(`input[${index}].call_id`, "output for no earlier function_call");
      });
    },
  },
];

const anthropicRules: Rule[] = [
  {
    id: "anthropic.first_turn_user",
    // Bedrock and Vertex reject a first assistant turn; contextd promises a user-first body, except
    // one that starts with a compaction block, which the beta API wants first in `messages`.
    source: "https://docs.anthropic.com/en/api/messages",
    check: (body, report) => {
      const first = list(body["messages"])[0];
      if (first?.["role"] !== "user" && list(first?.["content"])[0]?.["type"] !== "compaction") report("messages[0].role", "the first message is not the user's");
    },
  },
  {
    id: "anthropic.compaction_first",
    // @anthropic-ai/sdk CompactionBlockMisplacedError: "The compaction block is not the first block of
    // the conversation"; CompactionBlockAmbiguousError: more than one compaction block with content.
    source: "https://docs.anthropic.com/en/docs/build-with-claude/compaction",
    check: (body, report) =>
      list(body["messages"]).forEach((message, index) =>
        list(message["content"]).forEach((block, at) => {
          if (block["type"] === "compaction" && (index > 0 || at > 0)) report(`messages[${index}].content[${at}]`, "a compaction block that is not the first block of messages");
        }),
      ),
  },
  {
    id: "anthropic.tool_use_id_pattern",
    source: "https://docs.anthropic.com/en/api/messages",
    check: (body, report) =>
      list(body["messages"]).forEach((message, index) =>
        list(message["content"]).forEach((block, at) => {
          if (block["type"] === "tool_use" && !idAlphabet.test(String(block["id"]))) report(`messages[${index}].content[${at}].id`, `"${String(block["id"])}" is not ^[a-zA-Z0-9_-]+$`);
          if (block["type"] === "tool_result" && !idAlphabet.test(String(block["tool_use_id"]))) report(`messages[${index}].content[${at}].tool_use_id`, "not ^[a-zA-Z0-9_-]+$");
        }),
      ),
  },
  {
    id: "anthropic.tool_results_follow_tool_use",
    // tool_result blocks come first in the user turn right after the assistant turn with the
    // tool_use, one per tool_use.
    source: "https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use",
    check: (body, report) => {
      const messages = list(body["messages"]);
      messages.forEach((message, index) => {
        const content = list(message["content"]);
        const uses = index > 0 ? list(messages[index - 1]!["content"]).filter((block) => block["type"] === "tool_use").map((block) => String(block["id"])) : [];
        let leading = true;
        content.forEach((block, at) => {
          if (block["type"] !== "tool_result") return void (leading = false);
          if (!leading) report(`messages[${index}].content[${at}]`, "tool_result after other content");
          if (!uses.includes(String(block["tool_use_id"]))) report(`messages[${index}].content[${at}]`, "tool_result for no tool_use of the previous turn");
        });
        if (uses.length > 0 && index < messages.length) {
          const answered = content.filter((block) => block["type"] === "tool_result").length;
          if (answered < uses.length && index !== messages.length - 1) report(`messages[${index}]`, "tool_use blocks of the previous turn are unanswered");
        }
      });
    },
  },
  {
    id: "anthropic.prefill_trailing_whitespace",
    // "final assistant content cannot end with trailing whitespace".
    source: "https://docs.anthropic.com/en/api/messages",
    check: (body, report) => {
      const messages = list(body["messages"]);
      const last = messages.at(-1);
      const block = last ? list(last["content"]).at(-1) : undefined;
      if (last?.["role"] === "assistant" && block?.["type"] === "text" && /\s$/.test(String(block["text"]))) report(`messages[${messages.length - 1}]`, "final assistant content ends in whitespace");
    },
  },
  {
    id: "anthropic.media_sources",
    source: "https://docs.anthropic.com/en/docs/build-with-claude/pdf-support",
    check: (body, report) =>
      list(body["messages"]).forEach((message, index) =>
        list(message["content"]).forEach((block, at) => {
          const source = block["source"] as Json | undefined;
          if (block["type"] === "image" && source?.["type"] === "base64" && !webImages.includes(String(source["media_type"]))) report(`messages[${index}].content[${at}]`, "image type");
          if (block["type"] === "document" && source?.["type"] === "base64" && source["media_type"] !== "application/pdf") report(`messages[${index}].content[${at}]`, "base64 document is not a PDF");
        }),
      ),
  },
  {
    id: "anthropic.cache_breakpoints",
    source: "https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching",
    check: (body, report) => {
      const count = JSON.stringify(body).split('"cache_control"').length - 1;
      if (count > 4) report("cache_control", `${count} breakpoints; at most 4`);
    },
  },
];

const geminiRules: Rule[] = [
  {
    id: "gemini.function_call_turn_position",
    // "function call turn comes immediately after a user turn or after a function response turn".
    source: "https://ai.google.dev/gemini-api/docs/function-calling",
    check: (body, report) => {
      const contents = list(body["contents"]);
      contents.forEach((content, index) => {
        if (!list(content["parts"]).some((part) => part["functionCall"])) return;
        const previous = contents[index - 1];
        if (!previous || previous["role"] !== "user") report(`contents[${index}]`, "function call turn not right after a user or function response turn");
      });
    },
  },
  {
    id: "gemini.function_responses_answer_calls",
    source: "https://ai.google.dev/gemini-api/docs/function-calling",
    check: (body, report) => {
      const contents = list(body["contents"]);
      const seen = new Set<string>();
      contents.forEach((content, index) => {
        const parts = list(content["parts"]);
        for (const part of parts) {
          const call = part["functionCall"] as Json | undefined;
          if (call?.["id"] !== undefined) {
            if (seen.has(String(call["id"]))) report(`contents[${index}]`, `call id "${String(call["id"])}" used twice`);
            seen.add(String(call["id"]));
          }
        }
        const responses = parts.filter((part) => part["functionResponse"]);
        if (responses.length === 0) return;
        if (responses.length !== parts.length) report(`contents[${index}]`, "function responses mixed with other parts");
        const calls = index > 0 ? list(contents[index - 1]!["parts"]).flatMap((part) => (part["functionCall"] ? [part["functionCall"] as Json] : [])) : [];
        for (const response of responses) {
          const answer = response["functionResponse"] as Json;
          if (!calls.some((call) => call["id"] === answer["id"] && call["name"] === answer["name"])) report(`contents[${index}]`, `function response "${String(answer["name"])}" answers no call of the previous turn`);
        }
      });
    },
  },
  {
    id: "gemini.inline_types",
    source: "https://ai.google.dev/gemini-api/docs/document-processing",
    check: (body, report) =>
      list(body["contents"]).forEach((content, index) =>
        list(content["parts"]).forEach((part, at) => {
          const inline = part["inlineData"] as Json | undefined;
          if (inline && !/^(image|audio|video)\/|^application\/pdf$|^text\/plain$/.test(String(inline["mimeType"]))) report(`contents[${index}].parts[${at}]`, `inline type ${String(inline["mimeType"])}`);
        }),
      ),
  },
];

export const providerRules: Record<ProviderName, Rule[]> = {
  openai_chat: chatRules,
  openai_responses: responsesRules,
  anthropic: anthropicRules,
  gemini: geminiRules,
};

/** Every documented rule `body` breaks. */
export function checkProviderRules(provider: ProviderName, body: Json): RuleViolation[] {
  const violations: RuleViolation[] = [];
  for (const rule of providerRules[provider]) rule.check(body, (path, detail) => violations.push({ rule: rule.id, source: rule.source, path, detail }));
  return violations;
}
