package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/contextd-dev/contextd/clients/go/contextd"
	"github.com/contextd-dev/contextd/clients/go/internal/sidecartest"
	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// streamGolden is one stream golden vector (format in test/golden/streams/README.md). Events and
// the body stay raw so they are sent with their keys in the file's order.
type streamGolden struct {
	Name             string            `json:"name"`
	Provider         string            `json:"provider"`
	Events           []json.RawMessage `json:"events"`
	Body             json.RawMessage   `json:"body"`
	Interrupted      bool              `json:"interrupted"`
	AbortReason      string            `json:"abort_reason"`
	ExpectedMessages []json.RawMessage `json:"expected_messages"`
	ExpectedError    *struct {
		Code            string `json:"code"`
		MessageContains string `json:"message_contains"`
	} `json:"expected_error"`
}

// eventBytes is what is sent for one event: a JSON string as its text ("[DONE]"), anything else
// as its JSON text, compacted.
func eventBytes(raw json.RawMessage) ([]byte, error) {
	if len(raw) > 0 && raw[0] == '"' {
		var text string
		err := json.Unmarshal(raw, &text)
		return []byte(text), err
	}
	var compact bytes.Buffer
	err := json.Compact(&compact, raw)
	return compact.Bytes(), err
}

// TestGoldenStreams commits each vector's stream with append_provider_stream, and its body with
// append_provider_response, to a real sidecar: both store byte-identical messages, equal to the
// vector's expected messages; a refused stream has the expected code and appends nothing.
func TestGoldenStreams(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(sidecartest.RepoRoot(), "test", "golden", "streams", "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no stream golden vectors found (%v)", err)
	}
	sidecar := sidecartest.Start(t)
	client := dial(t, sidecar.Address)
	ctx := testContext(t)
	covered := map[string]bool{}
	for _, path := range paths {
		var golden streamGolden
		raw, err := os.ReadFile(path)
		if err == nil {
			err = json.Unmarshal(raw, &golden)
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		provider := contextdv1.Provider(contextdv1.Provider_value["PROVIDER_"+golden.Provider])
		var events [][]byte
		for index, event := range golden.Events {
			encoded, err := eventBytes(event)
			if err != nil {
				t.Fatalf("%s: events[%d]: %v", path, index, err)
			}
			events = append(events, encoded)
		}
		streamDelta := contextd.AppendProviderStream(provider, events)
		if golden.Interrupted {
			streamDelta = contextd.AppendInterruptedProviderStream(provider, events, golden.AbortReason)
		}
		t.Run(golden.Name, func(t *testing.T) {
			conversationID := fmt.Sprintf("go-golden-stream-%s", golden.Name)
			if golden.ExpectedError != nil {
				_, err := client.Commit(ctx, &contextdv1.CommitRequest{ConversationId: conversationID, Deltas: []*contextdv1.Delta{streamDelta}})
				var typed *contextd.Error
				if !errors.As(err, &typed) || typed.Code.String() != goGRPCCodeName(golden.ExpectedError.Code) {
					t.Fatalf("want %s, got %v", golden.ExpectedError.Code, err)
				}
				if !strings.Contains(typed.Message, golden.ExpectedError.MessageContains) {
					t.Fatalf("message %q does not contain %q", typed.Message, golden.ExpectedError.MessageContains)
				}
				state, err := client.GetState(ctx, &contextdv1.GetStateRequest{ConversationId: conversationID})
				if err != nil || state.GetState().GetVersion() != 0 || len(state.GetState().GetHistory()) != 0 {
					t.Fatalf("a refused stream appended something: %v %v", state, err)
				}
				return
			}
			fromStream := appendedMessages(t, client, conversationID+"-stream", streamDelta)
			var expected [][]byte
			for _, value := range golden.ExpectedMessages {
				message := &contextdv1.Message{}
				if err := protojson.Unmarshal(value, message); err != nil {
					t.Fatal(err)
				}
				expected = append(expected, marshalDeterministic(t, message))
			}
			if !equalBytes(fromStream, expected) {
				t.Fatalf("stream appended other messages than expected_messages")
			}
			if golden.Body == nil {
				return
			}
			covered[golden.Provider] = true
			body, err := eventBytes(golden.Body)
			if err != nil {
				t.Fatal(err)
			}
			bodyDelta := &contextdv1.Delta{Operation: &contextdv1.Delta_AppendProviderResponse{
				AppendProviderResponse: &contextdv1.AppendProviderResponse{Provider: provider, Json: body},
			}}
			if !equalBytes(fromStream, appendedMessages(t, client, conversationID+"-body", bodyDelta)) {
				t.Fatalf("the stream and the body appended different messages")
			}
		})
	}
	if len(covered) != 4 {
		t.Fatalf("vectors with a body cover %v, want all four providers", covered)
	}
}

// appendedMessages commits delta to a new conversation and returns its history serialized, with
// the assigned message ids cleared.
func appendedMessages(t *testing.T, client *contextd.Client, conversationID string, delta *contextdv1.Delta) [][]byte {
	t.Helper()
	ctx := testContext(t)
	if _, err := client.Commit(ctx, &contextdv1.CommitRequest{ConversationId: conversationID, Deltas: []*contextdv1.Delta{delta}}); err != nil {
		t.Fatal(err)
	}
	state, err := client.GetState(ctx, &contextdv1.GetStateRequest{ConversationId: conversationID})
	if err != nil {
		t.Fatal(err)
	}
	var messages [][]byte
	for _, message := range state.GetState().GetHistory() {
		message.Id = ""
		messages = append(messages, marshalDeterministic(t, message))
	}
	return messages
}

func marshalDeterministic(t *testing.T, message *contextdv1.Message) []byte {
	t.Helper()
	encoded, err := proto.MarshalOptions{Deterministic: true}.Marshal(message)
	if err != nil {
		t.Fatal(err)
	}
	return encoded
}

func equalBytes(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for index := range a {
		if !bytes.Equal(a[index], b[index]) {
			return false
		}
	}
	return true
}
