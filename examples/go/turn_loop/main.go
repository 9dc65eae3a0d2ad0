// The 20-turn agent loop of docs/responses-and-clients.md ("Lines per agent loop") with contextd:
// one Turn call per model call commits what happened and returns the trimmed OpenAI Chat body. A
// stub stands in for the model. Run a sidecar, then `go run ./turn_loop` in examples/go
// (CONTEXTD_ADDRESS overrides 127.0.0.1:7420).
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/contextd-dev/contextd/clients/go/contextd"
	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
)

// The same stub as bench/turn-loops/stub_model.py. STUB MODEL, NOT AN LLM: it answers an OpenAI
// Chat messages list with a Chat Completions response, calling the lookup tool on every other user
// turn and answering in text otherwise.
const (
	system       = "You are a terse assistant. Use the lookup tool when asked to."
	turns        = 20
	budgetTokens = 1_000
)

type chatMessage struct {
	Role      string     `json:"role"`
	Content   any        `json:"content"`
	ToolCalls []toolCall `json:"tool_calls,omitempty"`
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func userMessage(turn int) string {
	ask := "just answer"
	if turn%2 == 0 {
		ask = "look it up"
	}
	return fmt.Sprintf("Question %d: %s.%s", turn, ask, strings.Repeat(" Please be thorough.", 20))
}

func stubModel(body []byte) (response []byte, calls []toolCall, err error) {
	var request struct{ Messages []chatMessage }
	if err := json.Unmarshal(body, &request); err != nil {
		return nil, nil, err
	}
	last := request.Messages[len(request.Messages)-1]
	message := chatMessage{Role: "assistant", Content: fmt.Sprintf("Answer after %d messages.", len(request.Messages))}
	if text, _ := last.Content.(string); last.Role == "user" && strings.Contains(text, "look it up") {
		call := toolCall{ID: "call_" + rand.Text()[:12], Type: "function"}
		call.Function.Name, call.Function.Arguments = "lookup", fmt.Sprintf(`{"q":%q}`, text[:12])
		message = chatMessage{Role: "assistant", ToolCalls: []toolCall{call}}
	}
	response, err = json.Marshal(map[string]any{"id": "stub", "object": "chat.completion", "model": "stub",
		"choices": []any{map[string]any{"index": 0, "message": message, "finish_reason": "stop"}}})
	return response, message.ToolCalls, err
}

func lookup(arguments string) string {
	var args struct{ Q string }
	_ = json.Unmarshal([]byte(arguments), &args)
	return "found: " + args.Q
}

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	// loop:start
	ctx := context.Background()
	client, err := contextd.Dial(os.Getenv("CONTEXTD_ADDRESS"))
	if err != nil {
		return err
	}
	defer client.Close()
	if err := client.WaitReady(ctx); err != nil {
		return err
	}
	request := &contextdv1.CompileRequest{ConversationId: "turn-loop-" + rand.Text(),
		Budget: &contextdv1.Budget{MaxTokens: budgetTokens},
		Render: &contextdv1.RenderOptions{Provider: contextdv1.Provider_PROVIDER_OPENAI_CHAT, Model: "gpt-4o"}}
	version, produced := int64(0), []*contextdv1.Delta{contextd.AppendMessages(contextdv1.Segment_SEGMENT_SYSTEM, contextd.SystemText(system))}
	var result *contextdv1.CompileResult
	for turn := range turns {
		produced = append(produced, contextd.AppendUser(contextd.UserText(userMessage(turn))))
		for {
			if result, err = client.Turn(ctx, request, version, produced...); err != nil { // commit what happened, compile the next prompt
				return err
			}
			response, calls, err := stubModel(result.GetRendered().GetJson())
			if err != nil {
				return err
			}
			version, produced = result.GetCommittedVersion(), []*contextdv1.Delta{contextd.AppendProviderResponse(contextdv1.Provider_PROVIDER_OPENAI_CHAT, response)}
			for _, call := range calls {
				produced = append(produced, contextd.AppendToolResult(call.ID, "lookup", contextd.TextPayload(lookup(call.Function.Arguments)), false))
			}
			if len(calls) == 0 {
				break
			}
		}
	}
	if _, err := client.Commit(ctx, &contextdv1.CommitRequest{ConversationId: request.GetConversationId(), ExpectedVersion: &version, Deltas: produced}); err != nil {
		return err
	}
	// loop:end
	var last struct{ Messages []json.RawMessage }
	if err := json.Unmarshal(result.GetRendered().GetJson(), &last); err != nil {
		return err
	}
	fmt.Printf("%d turns; the last prompt, trimmed to a %d-token budget, held %d messages\n", turns, budgetTokens, len(last.Messages))
	return nil
}
