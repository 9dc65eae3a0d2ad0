package e2e

import (
	"errors"
	"slices"
	"testing"

	"github.com/contextd-dev/contextd/clients/go/contextd"
	"github.com/contextd-dev/contextd/clients/go/internal/sidecartest"
	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
	"google.golang.org/protobuf/proto"
)

// TestErrorDetails reads the structured details (google.rpc.ErrorInfo and BadRequest) of real
// failed calls over gRPC and Connect: a stable reason, its metadata and the field violations.
func TestErrorDetails(t *testing.T) {
	sidecar := sidecartest.Start(t)
	for name, opts := range protocols {
		t.Run(name, func(t *testing.T) {
			client := dial(t, sidecar.Address, opts...)
			ctx := testContext(t)
			id := "error-details-" + name
			_, err := client.Commit(ctx, &contextdv1.CommitRequest{ConversationId: id, Deltas: []*contextdv1.Delta{
				contextd.AppendUser(contextd.UserText("Weather?")),
				contextd.AppendAssistant("", contextd.ToolCall("k1", "get_weather", "city=Oslo")),
			}})
			var invalid *contextd.Error
			if !errors.Is(err, contextd.ErrInvalidArgument) || !errors.As(err, &invalid) {
				t.Fatalf("invalid arguments: err = %v, want INVALID_ARGUMENT", err)
			}
			if invalid.Reason() != "TOOL_ARGUMENTS_INVALID" || invalid.Metadata()["tool_call_id"] != "k1" {
				t.Errorf("reason %q, metadata %v; want TOOL_ARGUMENTS_INVALID naming k1", invalid.Reason(), invalid.Metadata())
			}
			wantField := "deltas[1].append_assistant.message.parts[0].tool_call.arguments"
			if violations := invalid.FieldViolations(); len(violations) != 1 || violations[0].Field != wantField || !containsAll(violations[0].Description, `tool call "k1" must be a JSON object`) {
				t.Errorf("field violations %+v, want one at %s", violations, wantField)
			}

			_, err = client.Commit(ctx, &contextdv1.CommitRequest{ConversationId: id, Deltas: []*contextdv1.Delta{{}}})
			if errors.As(err, &invalid); invalid.Reason() != "INVALID_ARGUMENT" ||
				!slices.Equal(invalid.FieldViolations(), []contextd.FieldViolation{{Field: "deltas[0]", Description: "no operation set"}}) {
				t.Errorf("delta without an operation: reason %q, violations %+v", invalid.Reason(), invalid.FieldViolations())
			}

			if _, err := client.Commit(ctx, &contextdv1.CommitRequest{ConversationId: id, Deltas: []*contextdv1.Delta{contextd.Remember("one")}}); err != nil {
				t.Fatal(err)
			}
			_, err = client.Commit(ctx, &contextdv1.CommitRequest{ConversationId: id, ExpectedVersion: proto.Int64(0), Deltas: []*contextdv1.Delta{contextd.Remember("stale")}})
			var conflict *contextd.VersionConflictError
			if !errors.As(err, &conflict) || conflict.Reason() != "VERSION_CONFLICT" || conflict.Metadata()["current_version"] != "1" || conflict.CurrentVersion != 1 {
				t.Errorf("stale commit = %v, want VERSION_CONFLICT at current version 1", err)
			}

			_, err = client.Compile(ctx, &contextdv1.CompileRequest{ConversationId: "error-details-empty-" + name, Render: &contextdv1.RenderOptions{Provider: contextdv1.Provider_PROVIDER_OPENAI_CHAT, Model: "m"}})
			var empty *contextd.Error
			if !errors.Is(err, contextd.ErrFailedPrecondition) || !errors.As(err, &empty) || empty.Reason() != "CONVERSATION_EMPTY" || len(empty.FieldViolations()) != 0 {
				t.Errorf("compile of an empty conversation = %v, want FAILED_PRECONDITION with reason CONVERSATION_EMPTY", err)
			}
		})
	}
}
