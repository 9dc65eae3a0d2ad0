package e2e

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/contextd-dev/contextd/clients/go/contextd"
	"github.com/contextd-dev/contextd/clients/go/internal/sidecartest"
	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
)

// tenPerMessage makes budgets read as message counts.
var tenPerMessage = &contextdv1.Estimator{Kind: contextdv1.EstimatorKind_ESTIMATOR_KIND_FIXED, FixedPerMessage: 10}

func ids(messages []*contextdv1.Message) []string {
	var out []string
	for _, message := range messages {
		out = append(out, message.GetId())
	}
	return out
}

// storeSixUnits stores user, a tool round (2 calls), user, assistant, user, assistant: 8 messages.
func storeSixUnits(t *testing.T, client *contextd.Client, id string) *contextdv1.ConversationState {
	t.Helper()
	round, err := contextd.NewToolRound("", contextd.ToolCall("c1", "search", `{"q":"a"}`), contextd.ToolCall("c2", "search", `{"q":"b"}`)).
		Answer("c1", contextd.TextPayload("a"), false).Answer("c2", contextd.TextPayload("b"), false).Delta()
	if err != nil {
		t.Fatal(err)
	}
	response, err := client.Commit(testContext(t), &contextdv1.CommitRequest{ConversationId: id, Deltas: []*contextdv1.Delta{
		contextd.AppendUser(contextd.UserText("look up a and b")),
		round,
		contextd.AppendUser(contextd.UserText("thanks")),
		contextd.AppendAssistant("you're welcome"),
		contextd.AppendUser(contextd.UserText("one more")),
		contextd.AppendAssistant("sure"),
	}, IncludeState: true})
	if err != nil {
		t.Fatal(err)
	}
	return response.GetState()
}

func TestCompileWithSummariesStoresTheSummaryAndRemembersFacts(t *testing.T) {
	sidecar := sidecartest.StartWithRedis(t)
	client := dial(t, sidecar.Address)
	ctx := testContext(t)
	const id = "go/session"
	stored := storeSixUnits(t, client, id)
	history := ids(stored.GetHistory())

	var asked []string
	var target int64
	result, err := client.CompileWithSummaries(ctx, &contextdv1.CompileRequest{
		ConversationId: id,
		Budget:         &contextdv1.Budget{MaxTokens: 50, Strategy: contextdv1.BudgetStrategy_BUDGET_STRATEGY_SUMMARIZE, Estimator: tenPerMessage},
		Commit:         &contextdv1.CommitOptions{ExpectedVersion: stored.GetVersion()},
	}, func(_ context.Context, messages []*contextdv1.Message, targetTokens int64) (*contextdv1.Message, []string, error) {
		asked, target = ids(messages), targetTokens
		return contextd.AssistantText("The user looked up a and b."), []string{"the user likes short answers"}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// 50 available, 12 kept free for the summary: drop whole units from the head until 38 remain,
	// and the answer after them too, so that the summary is followed by a user turn.
	if want := history[:6]; !slices.Equal(asked, want) {
		t.Fatalf("asked to summarise %v, want the first three units, the round whole, and the answer of the third: %v", asked, want)
	}
	if target != 30 {
		t.Errorf("target tokens %d, want the 30 left beside the kept history", target)
	}
	head := result.GetPayload().GetHistory()[0]
	if covered := head.GetProvenance().GetSummary().GetCoveredMessageIds(); !slices.Equal(covered, asked) {
		t.Errorf("summary covers %v, want %v", covered, asked)
	}
	if got, want := ids(result.GetPayload().GetHistory()[1:]), history[6:]; !slices.Equal(got, want) {
		t.Errorf("kept %v, want %v after the summary", got, want)
	}

	state, err := client.GetState(ctx, &contextdv1.GetStateRequest{ConversationId: id})
	if err != nil {
		t.Fatal(err)
	}
	if got := state.GetState(); got.GetVersion() != stored.GetVersion()+1 || got.GetHistory()[0].GetId() != head.GetId() || len(got.GetExperiences()) != 1 {
		t.Fatalf("stored v%d history %v experiences %v, want the summary and the fact in one commit", got.GetVersion(), ids(got.GetHistory()), got.GetExperiences())
	}
	next, err := client.Compile(ctx, &contextdv1.CompileRequest{ConversationId: id})
	if err != nil {
		t.Fatal(err)
	}
	system := next.GetResult().GetPayload().GetSystem()
	if len(system) != 1 || system[0].GetParts()[0].GetText().GetText() != "<experience>\n- [exp_1] the user likes short answers" {
		t.Errorf("next compile's system is %v, want the experiences block", system)
	}
}

func TestCompileWithSummariesCancelsOnASummarizeError(t *testing.T) {
	sidecar := sidecartest.StartWithRedis(t)
	client := dial(t, sidecar.Address)
	ctx := testContext(t)
	const id = "go/session-error"
	stored := storeSixUnits(t, client, id)
	modelDown := errors.New("model unavailable")
	_, err := client.CompileWithSummaries(ctx, &contextdv1.CompileRequest{
		ConversationId: id,
		Budget:         &contextdv1.Budget{ContextWindow: 70, OutputReserve: 20, AutoCompact: true, Estimator: tenPerMessage},
		Commit:         &contextdv1.CommitOptions{ExpectedVersion: stored.GetVersion()},
	}, func(context.Context, []*contextdv1.Message, int64) (*contextdv1.Message, []string, error) {
		return nil, nil, modelDown
	})
	if !errors.Is(err, modelDown) {
		t.Fatalf("error %v, want the summarize error wrapped", err)
	}
	state, err := client.GetState(ctx, &contextdv1.GetStateRequest{ConversationId: id})
	if err != nil {
		t.Fatal(err)
	}
	if state.GetState().GetVersion() != stored.GetVersion() {
		t.Errorf("version %d after a failed session, want %d (nothing committed)", state.GetState().GetVersion(), stored.GetVersion())
	}
	// The server's errors come back typed: a summary may not carry a tool call.
	_, err = client.CompileWithSummaries(ctx, &contextdv1.CompileRequest{
		ConversationId: id,
		Budget:         &contextdv1.Budget{ContextWindow: 70, OutputReserve: 20, AutoCompact: true, Estimator: tenPerMessage},
	}, func(context.Context, []*contextdv1.Message, int64) (*contextdv1.Message, []string, error) {
		call := &contextdv1.Part{Kind: &contextdv1.Part_ToolCall{ToolCall: contextd.ToolCall("c9", "search", "{}")}}
		return &contextdv1.Message{Role: contextdv1.Role_ROLE_ASSISTANT, Parts: []*contextdv1.Part{call}}, nil, nil
	})
	if !errors.Is(err, contextd.ErrInvalidArgument) {
		t.Errorf("error %v, want INVALID_ARGUMENT for a summary with tool calls", err)
	}
}

func TestCompileWithEvidenceHandsTheSummarizerTheTemplateAndFacts(t *testing.T) {
	sidecar := sidecartest.Start(t)
	client := dial(t, sidecar.Address)
	ctx := testContext(t)
	const id = "go/session-evidence"
	round, err := contextd.NewToolRound("", contextd.ToolCall("c1", "run_tests", `{"command":"go test ./pkg/parser"}`)).
		Answer("c1", contextd.TextPayload("FAIL pkg/parser/parse_test.go"), true).Delta()
	if err != nil {
		t.Fatal(err)
	}
	stored, err := client.Commit(ctx, &contextdv1.CommitRequest{ConversationId: id, Deltas: []*contextdv1.Delta{
		contextd.AppendUser(contextd.UserText("the parser tests in pkg/parser/parse.go fail")),
		round,
		contextd.AppendAssistant("one test fails"),
		contextd.AppendUser(contextd.UserText("fix it")),
		contextd.AppendAssistant("fixed"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	var sections, facts []string
	truncated := true
	_, err = client.CompileWithEvidence(ctx, &contextdv1.CompileRequest{
		ConversationId: id,
		Budget:         &contextdv1.Budget{MaxTokens: 30, Strategy: contextdv1.BudgetStrategy_BUDGET_STRATEGY_SUMMARIZE, Estimator: tenPerMessage},
		Commit:         &contextdv1.CommitOptions{ExpectedVersion: stored.GetVersion()},
	}, func(_ context.Context, asked *contextdv1.SummarizeRequest) (*contextdv1.Message, []string, error) {
		for _, section := range asked.GetTemplate().GetSections() {
			sections = append(sections, section.GetKey())
		}
		for _, fact := range asked.GetFacts() {
			facts = append(facts, fact.GetKind().String()+" "+fact.GetText())
		}
		truncated = asked.GetFactsTruncated()
		return contextd.AssistantText("The parser tests failed; fixed."), nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"goal", "decisions", "open_questions", "files", "commands", "errors"}; !slices.Equal(sections, want) {
		t.Errorf("template sections %v, want %v", sections, want)
	}
	for _, want := range []string{
		"SUMMARY_FACT_KIND_FILE_PATH pkg/parser/parse.go",
		"SUMMARY_FACT_KIND_COMMAND go test ./pkg/parser",
		"SUMMARY_FACT_KIND_ERROR_MESSAGE FAIL pkg/parser/parse_test.go",
		"SUMMARY_FACT_KIND_TOOL_NAME run_tests",
	} {
		if !slices.Contains(facts, want) {
			t.Errorf("facts %q lack %q", facts, want)
		}
	}
	if truncated {
		t.Error("facts_truncated is set for a few short messages")
	}
}
