package e2e

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/contextd-dev/contextd/clients/go/contextd"
	"github.com/contextd-dev/contextd/clients/go/internal/sidecartest"
	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
	"google.golang.org/protobuf/proto"
)

// TestDefaultLimitsCarryAFiveMegabyteCommitAndALargeCompile: grpc-go's own receive limit is 4 MiB;
// the client's default is the sidecar's 16 MiB, both ways, over both protocols.
func TestDefaultLimitsCarryAFiveMegabyteCommitAndALargeCompile(t *testing.T) {
	sidecar := sidecartest.StartWithRedis(t)
	for name, opts := range protocols {
		t.Run(name, func(t *testing.T) {
			client := dial(t, sidecar.Address, opts...)
			ctx := testContext(t)
			id := "large-" + name
			var deltas []*contextdv1.Delta
			for i := range 5 {
				deltas = append(deltas, contextd.AppendUser(contextd.UserText(strings.Repeat(string(rune('a'+i)), 1<<20))), contextd.AppendAssistant("noted"))
			}
			request := &contextdv1.CommitRequest{ConversationId: id, Deltas: deltas}
			if size := proto.Size(request); size < 5<<20 {
				t.Fatalf("the commit is %d bytes, want at least 5 MiB", size)
			}
			committed, err := client.Commit(ctx, request)
			if err != nil {
				t.Fatalf("5 MiB commit with default options: %v", err)
			}
			compiled, err := client.Compile(ctx, &contextdv1.CompileRequest{
				ConversationId: id,
				Render:         &contextdv1.RenderOptions{Provider: contextdv1.Provider_PROVIDER_OPENAI_CHAT, Model: "gpt-4o"},
				// The typed payload beside the rendered body (a rendered compile sends it only when asked).
				Include: []contextdv1.CompileResultPart{contextdv1.CompileResultPart_COMPILE_RESULT_PART_PAYLOAD},
			})
			if err != nil {
				t.Fatalf("compile of the 5 MiB conversation with default options: %v", err)
			}
			if size := proto.Size(compiled); size <= 4<<20 {
				t.Fatalf("the compile answer is %d bytes; the test needs one over grpc-go's default 4 MiB", size)
			}
			if got := len(compiled.GetResult().GetPayload().GetHistory()); got != 10 || compiled.GetResult().GetVersion() != committed.GetVersion() {
				t.Fatalf("compiled %d messages at version %d, want 10 at %d", got, compiled.GetResult().GetVersion(), committed.GetVersion())
			}
		})
	}
}

// TestACommitWhoseAnswerIsLostIsAppliedOnce: an answer over the client's receive limit hides a
// commit that applied. The client retries with the same key, asking for less, and reports the
// commit as applied once.
func TestACommitWhoseAnswerIsLostIsAppliedOnce(t *testing.T) {
	sidecar := sidecartest.StartWithRedis(t)
	for name, opts := range protocols {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			reader := dial(t, sidecar.Address, opts...)
			small := dial(t, sidecar.Address, append([]contextd.Option{contextd.WithMaxReceiveBytes(2048)}, opts...)...)
			id := "lost-answer-" + name
			big := strings.Repeat("a long question ", 400)

			// Commit: the state asked for is over 2 KiB, the version alone is not.
			response, err := small.Commit(ctx, &contextdv1.CommitRequest{
				ConversationId: id, ExpectedVersion: proto.Int64(0), IncludeState: true,
				Deltas: []*contextdv1.Delta{contextd.AppendUser(contextd.UserText(big))},
			})
			if err != nil {
				t.Fatalf("commit whose first answer was over the receive limit: %v", err)
			}
			if response.GetVersion() != 1 || !response.GetReplayed() {
				t.Fatalf("commit answered version %d replayed %v, want version 1 answered from its key's record", response.GetVersion(), response.GetReplayed())
			}

			// A turn: the included source is over 2 KiB, the budgeted compile is not.
			result, err := small.Turn(ctx, &contextdv1.CompileRequest{
				ConversationId: id,
				Budget:         &contextdv1.Budget{MaxTokens: 200, Estimator: charsEstimator},
				Include:        []contextdv1.CompileResultPart{contextdv1.CompileResultPart_COMPILE_RESULT_PART_SOURCE},
			}, 1, contextd.AppendAssistant("ok"), contextd.AppendUser(contextd.UserText("short")))
			if err != nil {
				t.Fatalf("turn whose first answer was over the receive limit: %v", err)
			}
			replayed := slices.ContainsFunc(result.GetWarnings(), func(w *contextdv1.Warning) bool { return w.GetCode() == "idempotent_replay" })
			if result.GetCommittedVersion() != 2 || result.GetPayload() == nil || !replayed {
				t.Fatalf("turn: committed version %d, payload %v, warnings %v; want 2, a payload, idempotent_replay", result.GetCommittedVersion(), result.GetPayload() != nil, result.GetWarnings())
			}

			// Even the version-only answer can be refused: the error says the outcome is unknown and
			// names the key, and sending it again with that key applies nothing twice.
			tiny := dial(t, sidecar.Address, append([]contextd.Option{contextd.WithMaxReceiveBytes(1)}, opts...)...)
			request := &contextdv1.CommitRequest{ConversationId: id, Deltas: []*contextdv1.Delta{contextd.AppendAssistant("one answer")}}
			_, err = tiny.Commit(ctx, request)
			var unknown *contextd.OutcomeUnknownError
			if !errors.As(err, &unknown) || !errors.Is(err, contextd.ErrResourceExhausted) || unknown.IdempotencyKey == "" {
				t.Fatalf("commit with every answer over the limit = %v, want an *OutcomeUnknownError naming its key", err)
			}
			request.IdempotencyKey = unknown.IdempotencyKey
			again, err := reader.Commit(ctx, request)
			if err != nil || !again.GetReplayed() || again.GetVersion() != 3 {
				t.Fatalf("the same commit with the key: %v (replayed %v, version %d), want replayed version 3", err, again.GetReplayed(), again.GetVersion())
			}

			state, err := reader.GetState(ctx, &contextdv1.GetStateRequest{ConversationId: id})
			if err != nil {
				t.Fatal(err)
			}
			var shape []string
			for _, message := range state.GetState().GetHistory() {
				shape = append(shape, roleAndParts(message))
			}
			if state.GetState().GetVersion() != 3 || strings.Join(shape, " ") != "USER:text ASSISTANT:text USER:text ASSISTANT:text" {
				t.Fatalf("stored version %d, history %v; want version 3 and each write once", state.GetState().GetVersion(), shape)
			}
		})
	}
}
