package e2e

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/contextd-dev/contextd/clients/go/contextd"
	"github.com/contextd-dev/contextd/clients/go/internal/sidecartest"
	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
)

var charsEstimator = &contextdv1.Estimator{Kind: contextdv1.EstimatorKind_ESTIMATOR_KIND_CHARS}

// storeTripPlanning stores a conversation of three units before a tool round and an answer after
// it, and returns the round's messages and the answer.
func storeTripPlanning(t *testing.T, client *contextd.Client, id string) (round []*contextdv1.Message, answer *contextdv1.Message) {
	t.Helper()
	ctx := testContext(t)
	filler := strings.Repeat("We compared trains, flights and ferries in detail. ", 4)
	toolRound, err := contextd.NewToolRound("Checking weather and trains in parallel.",
		contextd.ToolCall("call_weather", "weather", `{"city":"Bergen"}`),
		contextd.ToolCall("call_trains", "trains", `{"from":"Oslo","to":"Bergen"}`)).
		Answer("call_weather", contextd.TextPayload("Rain, 9°C. "+filler), false).
		Answer("call_trains", contextd.TextPayload("07:25, 11:25, 15:25. "+filler), false).
		Delta()
	if err != nil {
		t.Fatal(err)
	}
	response, err := client.Commit(ctx, &contextdv1.CommitRequest{ConversationId: id, Deltas: []*contextdv1.Delta{
		contextd.AppendMessages(contextdv1.Segment_SEGMENT_SYSTEM, contextd.SystemText("You plan trips.")),
		contextd.AppendUser(contextd.UserText("I want to visit Bergen. " + filler)),
		contextd.AppendAssistant("Happy to help. " + filler),
		contextd.AppendUser(contextd.UserText("How is the weather, and which trains go there? " + filler)),
		toolRound,
		contextd.AppendAssistant("Take the 07:25 train and pack a raincoat. " + filler),
	}, IncludeState: true})
	if err != nil {
		t.Fatal(err)
	}
	history := response.GetState().GetHistory()
	return history[3:6], history[6]
}

func countTokens(t *testing.T, client *contextd.Client, messages ...*contextdv1.Message) int64 {
	t.Helper()
	response, err := client.CountTokens(testContext(t), &contextdv1.CountTokensRequest{Messages: messages, Estimator: charsEstimator})
	if err != nil {
		t.Fatal(err)
	}
	return response.GetTotal()
}

func TestCompileUnderBudgetKeepsRoundsWholeAndProtectsTheCurrentTurn(t *testing.T) {
	sidecar := sidecartest.StartWithRedis(t)
	client := dial(t, sidecar.Address)
	ctx := testContext(t)
	const id = "trip"
	round, answer := storeTripPlanning(t, client, id)
	currentTurn := &contextdv1.CurrentTurn{
		Raw:        contextd.UserText("Book it on card 4111 1111 1111 1111."),
		PromptSafe: contextd.UserText("Book it on the card on file."),
	}
	// HISTORY_START_ANY: what the strategy keeps, so the round can be seen kept whole on its own
	// (by default, history after trimming must start on a user turn; see the end of the test).
	compileFrom := func(maxTokens int64, start contextdv1.HistoryStart) (*contextdv1.CompileResult, error) {
		response, err := client.Compile(ctx, &contextdv1.CompileRequest{
			ConversationId: id,
			CurrentTurn:    currentTurn,
			Budget:         &contextdv1.Budget{MaxTokens: maxTokens, Estimator: charsEstimator, HistoryStart: start},
			// The source (for the current turn's id) and the records of the messages the budget
			// dropped are not in the default answer.
			Include: []contextdv1.CompileResultPart{contextdv1.CompileResultPart_COMPILE_RESULT_PART_SOURCE, contextdv1.CompileResultPart_COMPILE_RESULT_PART_ALL_TRANSFORMATIONS},
		})
		return response.GetResult(), err
	}
	compile := func(maxTokens int64) (*contextdv1.CompileResult, error) {
		return compileFrom(maxTokens, contextdv1.HistoryStart_HISTORY_START_ANY)
	}
	unlimited, err := compile(0)
	if err != nil {
		t.Fatal(err)
	}
	reserved := unlimited.GetUsage().GetReserved()
	roundTokens, answerTokens := countTokens(t, client, round...), countTokens(t, client, answer)

	// Room for the answer and half the round: the round cannot be split, so it goes entirely.
	tight, err := compile(reserved + answerTokens + roundTokens/2)
	if err != nil {
		t.Fatal(err)
	}
	if got := historyIDs(tight); !slices.Equal(got, []string{answer.GetId(), tight.GetSource().GetCurrentTurn().GetRaw().GetId()}) {
		t.Fatalf("tight budget kept %v, want the answer and the current turn", got)
	}
	for _, message := range round {
		record := tight.GetTransformations()[message.GetId()]
		if record.GetAction() != contextdv1.TransformationAction_TRANSFORMATION_ACTION_DROPPED {
			t.Errorf("round message %s: %v, want DROPPED with its round", message.GetId(), record)
		}
	}

	// By default the answer left at the head without its question goes too.
	aligned, err := compileFrom(reserved+answerTokens+roundTokens/2, contextdv1.HistoryStart_HISTORY_START_UNSPECIFIED)
	if err != nil {
		t.Fatal(err)
	}
	if got := historyIDs(aligned); len(got) != 1 || aligned.GetTransformations()[answer.GetId()].GetReason() != contextdv1.TransformationReason_TRANSFORMATION_REASON_HISTORY_ALIGNMENT {
		t.Fatalf("default budget kept %v (answer: %v), want only the current turn, the answer dropped for alignment", got, aligned.GetTransformations()[answer.GetId()])
	}

	// Room for the answer and the whole round: the round stays, whole, and older turns go.
	roomy, err := compile(reserved + answerTokens + roundTokens)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{round[0].GetId(), round[1].GetId(), round[2].GetId(), answer.GetId()}
	if got := historyIDs(roomy); !slices.Equal(got[:len(got)-1], want) {
		t.Fatalf("roomy budget kept %v, want the round, the answer and the current turn", got)
	}

	// The current turn is never trimmed, and the prompt sees only its prompt-safe form.
	for _, result := range []*contextdv1.CompileResult{tight, roomy} {
		history := result.GetPayload().GetHistory()
		last := history[len(history)-1]
		if text := last.GetParts()[0].GetText().GetText(); text != "Book it on the card on file." {
			t.Errorf("last prompt message is %q, want the prompt-safe current turn", text)
		}
		if record := result.GetTransformations()[last.GetId()]; record.GetReason() != contextdv1.TransformationReason_TRANSFORMATION_REASON_CURRENT_TURN_PROJECTION {
			t.Errorf("current turn record = %v, want CURRENT_TURN_PROJECTION", record)
		}
	}
	if usage := tight.GetUsage(); usage.GetTotal() > usage.GetLimit() {
		t.Errorf("compiled %d tokens over a limit of %d", usage.GetTotal(), usage.GetLimit())
	}
}

func historyIDs(result *contextdv1.CompileResult) []string {
	var ids []string
	for _, message := range result.GetPayload().GetHistory() {
		ids = append(ids, message.GetId())
	}
	return ids
}

func TestCompileErrorCodesForBadInput(t *testing.T) {
	sidecar := sidecartest.StartWithRedis(t)
	client := dial(t, sidecar.Address)
	ctx := testContext(t)
	duplicate := contextd.UserText("hello")
	duplicate.Id = "m1"
	cases := map[string]struct {
		request *contextdv1.CompileRequest
		want    error
	}{
		"duplicate message ids": {
			&contextdv1.CompileRequest{History: &contextdv1.MessageList{Messages: []*contextdv1.Message{duplicate, duplicate}}},
			contextd.ErrInvalidArgument,
		},
		"current turn over the budget": {
			&contextdv1.CompileRequest{
				CurrentTurn: &contextdv1.CurrentTurn{Raw: contextd.UserText(strings.Repeat("long ", 100))},
				Budget:      &contextdv1.Budget{MaxTokens: 5, Estimator: charsEstimator},
			},
			contextd.ErrResourceExhausted,
		},
		"missing identity policy": {
			&contextdv1.CompileRequest{
				History:  &contextdv1.MessageList{Messages: []*contextdv1.Message{contextd.UserText("no id")}},
				Identity: &contextdv1.IdentityOptions{RequireDurable: true},
			},
			contextd.ErrFailedPrecondition,
		},
	}
	for name, c := range cases {
		if _, err := client.Compile(ctx, c.request); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", name, err, c.want)
		}
	}
}

func TestTelemetryOfACompile(t *testing.T) {
	sidecar := sidecartest.StartWithRedis(t)
	client := dial(t, sidecar.Address)
	ctx := testContext(t)
	const id = "observed"
	storeTripPlanning(t, client, id)

	events := make(chan *contextdv1.ObserverEvent, 1024)
	go func() {
		for response, err := range client.WatchEvents(ctx, &contextdv1.WatchEventsRequest{ConversationId: id}) {
			if err != nil {
				return
			}
			events <- response.GetEvent()
		}
	}()
	// The subscription is live once a compile's events arrive; compile until one does.
	request := &contextdv1.CompileRequest{ConversationId: id, Budget: &contextdv1.Budget{MaxTokens: 400, Estimator: charsEstimator}}
	byCompile := map[string][]*contextdv1.ObserverEvent{}
	var finished string
	for finished == "" {
		if _, err := client.Compile(ctx, request); err != nil {
			t.Fatal(err)
		}
		// Another conversation's compile must not reach this filtered subscriber.
		if _, err := client.Compile(ctx, &contextdv1.CompileRequest{ConversationId: "someone-else"}); err != nil {
			t.Fatal(err)
		}
		for drained := false; !drained && finished == ""; {
			select {
			case event := <-events:
				if event.GetConversationId() != id {
					t.Fatalf("filtered subscriber got an event of %q", event.GetConversationId())
				}
				byCompile[event.GetCompileId()] = append(byCompile[event.GetCompileId()], event)
				if event.GetPipelineCompiled() != nil {
					finished = event.GetCompileId()
				}
			case <-time.After(200 * time.Millisecond):
				drained = true
			case <-ctx.Done():
				t.Fatal("no telemetry for any compile")
			}
		}
	}
	var estimated, dropped int
	for _, event := range byCompile[finished] {
		if event.GetTokensEstimated() != nil {
			estimated++
		}
		if run := event.GetHistoryHeadDropped(); run != nil && run.GetCount() > 0 {
			dropped++
		}
	}
	if estimated == 0 || dropped == 0 {
		t.Fatalf("compile %s: %d tokens_estimated and %d history_head_dropped events, want both (the budget trims the head of the history)", finished, estimated, dropped)
	}

	// CompileStream delivers the same kinds of events to the caller, then the result.
	var streamed []*contextdv1.ObserverEvent
	result, err := client.CompileStream(ctx, &contextdv1.CompileStreamRequest{Request: request}, func(event *contextdv1.ObserverEvent) {
		streamed = append(streamed, event)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(streamed) == 0 || streamed[len(streamed)-1].GetPipelineCompiled() == nil {
		t.Fatalf("CompileStream events end with %v, want pipeline_compiled last", streamed)
	}
	if result.GetUsage().GetLimit() != 400 || result.GetVersion() != 1 {
		t.Fatalf("CompileStream result: limit %d version %d", result.GetUsage().GetLimit(), result.GetVersion())
	}
}
