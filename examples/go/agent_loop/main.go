// Command agent_loop is a minimal agent loop on contextd, with a stub in place of the LLM.
//
// Run a sidecar (`node dist/src/main.js`), then `go run ./agent_loop` from examples/go.
// CONTEXTD_ADDRESS overrides the default 127.0.0.1:7420.
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/contextd-dev/contextd/clients/go/contextd"
	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
)

// chatBody is the part of an OpenAI Chat request body the stub model reads.
type chatBody struct {
	Messages []struct {
		Role    string `json:"role"`
		Content any    `json:"content"`
	} `json:"messages"`
}

// reply is what the stub model answers: text, or tool calls.
type reply struct {
	Text  string
	Calls []*contextdv1.ToolCallPart
}

// stubModel is a STUB MODEL, NOT AN LLM: it answers an OpenAI Chat request body with canned
// replies, so the loop runs without network or keys. Replace it with a call to your provider.
func stubModel(body []byte) (reply, error) {
	var request chatBody
	if err := json.Unmarshal(body, &request); err != nil {
		return reply{}, fmt.Errorf("stub model: parse request: %w", err)
	}
	last := request.Messages[len(request.Messages)-1]
	switch {
	case last.Role == "user" && strings.Contains(strings.ToLower(fmt.Sprint(last.Content)), "weather"):
		return reply{Calls: []*contextdv1.ToolCallPart{
			contextd.ToolCall("call_"+rand.Text()[:8], "weather", `{"city":"Oslo"}`),
			contextd.ToolCall("call_"+rand.Text()[:8], "clock", `{"zone":"Europe/Oslo"}`),
		}}, nil
	case last.Role == "tool":
		// The results of the last round are the tool messages at the end of the request.
		var results []string
		for i := len(request.Messages) - 1; i >= 0 && request.Messages[i].Role == "tool"; i-- {
			results = append([]string{fmt.Sprint(request.Messages[i].Content)}, results...)
		}
		return reply{Text: "Here is what I found: " + strings.Join(results, "; ")}, nil
	default:
		return reply{Text: fmt.Sprintf("You said: %v", last.Content)}, nil
	}
}

// runTool is a stub tool: canned results.
func runTool(call *contextdv1.ToolCallPart) string {
	return map[string]string{"weather": "4°C, light rain", "clock": "09:30"}[call.GetName()]
}

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := contextd.Dial(os.Getenv("CONTEXTD_ADDRESS"))
	if err != nil {
		return err
	}
	defer client.Close()
	if err := client.WaitReady(ctx); err != nil {
		return err
	}
	id := "example-" + rand.Text()[:8]
	request := &contextdv1.CompileRequest{
		ConversationId: id,
		Budget:         &contextdv1.Budget{MaxTokens: 8000},
		Render:         &contextdv1.RenderOptions{Provider: contextdv1.Provider_PROVIDER_OPENAI_CHAT, Model: "stub"},
	}
	// One RPC per model call: each Turn commits what happened since the last call (the previous
	// answer, a tool round, the next user message) and returns the context for the next one.
	version := int64(0)
	var produced []*contextdv1.Delta
	for _, text := range []string{"Hi!", "What's the weather in Oslo right now?"} {
		produced = append(produced, contextd.AppendUser(contextd.UserText(text)))
		for {
			compiled, err := client.Turn(ctx, request, version, produced...)
			if err != nil {
				return err
			}
			version = compiled.GetCommittedVersion()
			answer, err := stubModel(compiled.GetRendered().GetJson())
			if err != nil {
				return err
			}
			if len(answer.Calls) == 0 {
				fmt.Printf("user: %s\nassistant: %s\n", text, answer.Text)
				produced = []*contextdv1.Delta{contextd.AppendAssistant(answer.Text)}
				break
			}
			round := contextd.NewToolRound("", answer.Calls...)
			for _, call := range answer.Calls { // a real agent runs these in parallel
				round.Answer(call.GetId(), contextd.TextPayload(runTool(call)), false)
			}
			delta, err := round.Delta()
			if err != nil {
				return err
			}
			produced = []*contextdv1.Delta{delta}
		}
	}
	// The last answer has no next model call to travel with.
	_, err = client.Commit(ctx, &contextdv1.CommitRequest{ConversationId: id, ExpectedVersion: &version, Deltas: produced})
	return err
}
