package contextd

import (
	"strings"
	"testing"

	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
)

func TestToolRoundOrdersResultsByCall(t *testing.T) {
	round := NewToolRound("checking both",
		ToolCall("call_a", "weather", `{"city":"Oslo"}`),
		ToolCall("call_b", "time", `{"zone":"CET"}`))
	round.Answer("call_b", TextPayload("12:00"), false).Answer("call_a", ErrorPayload("timeout", "no answer"), true)
	delta, err := round.Delta()
	if err != nil {
		t.Fatal(err)
	}
	appended := delta.GetAppendToolRound()
	if got := len(appended.GetAssistant().GetParts()); got != 3 {
		t.Fatalf("assistant has %d parts, want text + 2 calls", got)
	}
	var ids []string
	for _, message := range appended.GetResults() {
		result := message.GetParts()[0].GetToolResult()
		if message.GetRole() != contextdv1.Role_ROLE_TOOL {
			t.Errorf("result %s has role %v", result.GetToolCallId(), message.GetRole())
		}
		ids = append(ids, result.GetToolCallId()+"/"+result.GetName())
	}
	if got := strings.Join(ids, ","); got != "call_a/weather,call_b/time" {
		t.Fatalf("results = %s", got)
	}
	if !appended.GetResults()[0].GetParts()[0].GetToolResult().GetIsError() {
		t.Error("call_a's error flag was lost")
	}
}

func TestToolRoundRejectsIncompleteAndUnknownResults(t *testing.T) {
	round := NewToolRound("", ToolCall("call_a", "weather", `{}`), ToolCall("call_b", "time", `{}`))
	round.Answer("call_a", TextPayload("sunny"), false)
	if _, err := round.Delta(); err == nil || !strings.Contains(err.Error(), `"call_b"`) {
		t.Fatalf("incomplete round: err = %v", err)
	}
	round.Answer("call_b", TextPayload("noon"), false).Answer("call_c", TextPayload("?"), false)
	if _, err := round.Messages(); err == nil || !strings.Contains(err.Error(), `"call_c"`) {
		t.Fatalf("unknown call: err = %v", err)
	}
}
