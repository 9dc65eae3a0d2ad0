package e2e

import (
	"bufio"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/contextd-dev/contextd/clients/go/contextd"
	"github.com/contextd-dev/contextd/clients/go/internal/sidecartest"
	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
	"google.golang.org/protobuf/proto"
)

// TestTurnIsOneRPCPerModelCall drives an agent loop with Turn only: each call commits the previous
// answer (and tool round) with the next user message and returns the context for the next call.
func TestTurnIsOneRPCPerModelCall(t *testing.T) {
	sidecar := sidecartest.StartWithRedis(t)
	for name, opts := range protocols {
		t.Run(name, func(t *testing.T) {
			client := dial(t, sidecar.Address, opts...)
			ctx := testContext(t)
			request := &contextdv1.CompileRequest{
				ConversationId: "turns-" + name,
				Render:         &contextdv1.RenderOptions{Provider: contextdv1.Provider_PROVIDER_OPENAI_CHAT, Model: "gpt-4o"},
				// The typed payload beside the rendered body (a rendered compile sends it only when asked).
				Include: []contextdv1.CompileResultPart{contextdv1.CompileResultPart_COMPILE_RESULT_PART_PAYLOAD},
			}
			result, err := client.Turn(ctx, request, 0,
				contextd.AppendMessages(contextdv1.Segment_SEGMENT_SYSTEM, contextd.SystemText("You are terse.")),
				contextd.AppendUser(contextd.UserText("Weather in Oslo?")))
			if err != nil {
				t.Fatal(err)
			}
			round, err := contextd.NewToolRound("", contextd.ToolCall("call_1", "weather", `{"city":"Oslo"}`)).
				Answer("call_1", contextd.TextPayload("4°C"), false).Delta()
			if err != nil {
				t.Fatal(err)
			}
			steps := [][]*contextdv1.Delta{
				{round},
				{contextd.AppendAssistant("4°C in Oslo."), contextd.AppendUser(contextd.UserText("And tomorrow?"))},
			}
			for _, deltas := range steps {
				previous := result.GetCommittedVersion()
				if result, err = client.Turn(ctx, request, previous, deltas...); err != nil {
					t.Fatal(err)
				}
				if result.GetCommittedVersion() != previous+1 || result.GetVersion() != previous+1 {
					t.Fatalf("turn after version %d: compiled %d, committed %d", previous, result.GetVersion(), result.GetCommittedVersion())
				}
			}
			var shape []string
			for _, message := range result.GetPayload().GetHistory() {
				shape = append(shape, roleAndParts(message))
			}
			want := "USER:text ASSISTANT:tool_call TOOL:tool_result ASSISTANT:text USER:text"
			if got := joinShape(shape); got != want {
				t.Fatalf("the last turn's payload is %s, want %s", got, want)
			}
			if !containsAll(string(result.GetRendered().GetJson()), "And tomorrow?", "call_1", "You are terse.") {
				t.Fatalf("rendered body lacks the turn's messages: %s", result.GetRendered().GetJson())
			}

			// The user's message goes in the deltas; a current turn would be compiled twice by a replay.
			withCurrentTurn := &contextdv1.CompileRequest{ConversationId: request.GetConversationId(), CurrentTurn: &contextdv1.CurrentTurn{Raw: contextd.UserText("?")}}
			if _, err := client.Turn(ctx, withCurrentTurn, result.GetCommittedVersion()); err == nil || !containsAll(err.Error(), "AppendUser") {
				t.Fatalf("Turn with a current turn = %v, want a refusal naming AppendUser", err)
			}
			// A stale version is a conflict, and nothing of that turn is stored.
			if _, err := client.Turn(ctx, request, 1, contextd.AppendAssistant("late")); !errors.Is(err, contextd.ErrVersionConflict) {
				t.Fatalf("stale turn = %v, want a version conflict", err)
			}
			state, err := client.GetState(ctx, &contextdv1.GetStateRequest{ConversationId: request.GetConversationId()})
			if err != nil || state.GetState().GetVersion() != result.GetCommittedVersion() || len(state.GetState().GetHistory()) != 5 {
				t.Fatalf("after the stale turn: %v, version %d, %d messages", err, state.GetState().GetVersion(), len(state.GetState().GetHistory()))
			}
		})
	}
}

// TestARenderedTurnSendsItsPromptOnce: with Render set, a turn answers with the rendered body and
// no typed payload unless Include names COMPILE_RESULT_PART_PAYLOAD, and Turn takes the rendered
// body as the prompt: one Compile RPC per turn, not a second compile looking for a payload.
func TestARenderedTurnSendsItsPromptOnce(t *testing.T) {
	sidecar := sidecartest.Start(t)
	for name, opts := range protocols {
		t.Run(name, func(t *testing.T) {
			client := dial(t, sidecar.Address, opts...)
			ctx := testContext(t)
			request := &contextdv1.CompileRequest{
				ConversationId: "rendered-turns-" + name,
				Render:         &contextdv1.RenderOptions{Provider: contextdv1.Provider_PROVIDER_OPENAI_CHAT, Model: "gpt-4o"},
			}
			before := compileCalls(t, sidecar.URL())
			result, err := client.Turn(ctx, request, 0, contextd.AppendUser(contextd.UserText("Weather in Oslo?")))
			if err != nil {
				t.Fatal(err)
			}
			if calls := compileCalls(t, sidecar.URL()) - before; calls != 1 {
				t.Fatalf("a rendered turn took %d Compile RPCs, want 1", calls)
			}
			if result.GetPayload() != nil || !containsAll(string(result.GetRendered().GetJson()), "Weather in Oslo?") {
				t.Fatalf("default rendered turn: payload %v, rendered %s; want no payload and the body", result.GetPayload(), result.GetRendered().GetJson())
			}
			asked := proto.CloneOf(request)
			asked.Include = []contextdv1.CompileResultPart{contextdv1.CompileResultPart_COMPILE_RESULT_PART_PAYLOAD}
			next, err := client.Turn(ctx, asked, result.GetCommittedVersion(), contextd.AppendAssistant("Rain."), contextd.AppendUser(contextd.UserText("Tomorrow?")))
			if err != nil {
				t.Fatal(err)
			}
			if got := len(next.GetPayload().GetHistory()); got != 3 || next.GetRendered() == nil {
				t.Fatalf("turn with PAYLOAD included: %d payload messages, rendered %v; want 3 and the body", got, next.GetRendered() != nil)
			}
		})
	}
}

// compileCalls is how many Compile RPCs the sidecar has answered OK (its /metrics counter).
func compileCalls(t *testing.T, url string) int {
	t.Helper()
	response, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer response.Body.Close()
	scanner := bufio.NewScanner(response.Body)
	for scanner.Scan() {
		line, found := strings.CutPrefix(scanner.Text(), `contextd_rpc_requests_total{method="contextd.v1.ContextService/Compile",code="ok"} `)
		if found {
			count, err := strconv.ParseFloat(line, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int(count)
		}
	}
	if err := scanner.Err(); err != nil {
		t.Fatal(err)
	}
	return 0
}

func joinShape(shape []string) string {
	out := ""
	for i, s := range shape {
		if i > 0 {
			out += " "
		}
		out += s
	}
	return out
}
