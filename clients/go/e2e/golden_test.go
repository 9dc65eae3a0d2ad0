package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/contextd-dev/contextd/clients/go/contextd"
	"github.com/contextd-dev/contextd/clients/go/internal/sidecartest"
	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// goldenFile is one provider golden vector (format in test/golden/providers/README.md).
type goldenFile struct {
	Name   string                 `json:"name"`
	Input  json.RawMessage        `json:"input"`
	Render struct{ Model string } `json:"render"`
	// Sent as the current turn (the last history message) instead of in history, when set.
	CurrentTurnID string                     `json:"current_turn_id"`
	Expected      map[string]json.RawMessage `json:"expected"`
	// Providers that refuse the payload, with the rule and the message it names.
	ExpectedErrors map[string]goldenError `json:"expected_errors"`
}

// goldenError is a provider's refusal of a golden payload.
type goldenError struct {
	Code      string `json:"code"`
	Rule      string `json:"rule"`
	MessageID string `json:"message_id"`
}

// TestGoldenProviderBodies compiles each golden payload statelessly with a render option and
// checks the body the sidecar returns against the shared expected JSON, for every provider.
func TestGoldenProviderBodies(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(sidecartest.RepoRoot(), "test", "golden", "providers", "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no golden vectors found (%v)", err)
	}
	sidecar := sidecartest.Start(t)
	client := dial(t, sidecar.Address)
	ctx := testContext(t)
	for _, path := range paths {
		var golden goldenFile
		raw, err := os.ReadFile(path)
		if err == nil {
			err = json.Unmarshal(raw, &golden)
		}
		payload := &contextdv1.CompiledPayload{}
		if err == nil {
			err = protojson.Unmarshal(golden.Input, payload)
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		history := payload.GetHistory()
		var currentTurn *contextdv1.CurrentTurn
		if last := len(history) - 1; golden.CurrentTurnID != "" && last >= 0 && history[last].GetId() == golden.CurrentTurnID {
			currentTurn = &contextdv1.CurrentTurn{Raw: history[last]}
			history = history[:last]
		}
		request := func(providerName string) *contextdv1.CompileRequest {
			return &contextdv1.CompileRequest{
				System:          &contextdv1.MessageList{Messages: payload.GetSystem()},
				History:         &contextdv1.MessageList{Messages: history},
				CurrentTurn:     currentTurn,
				Memory:          &contextdv1.MessageList{Messages: payload.GetMemory()},
				Tools:           &contextdv1.MessageList{Messages: payload.GetTools()},
				Scratch:         payload.GetScratch(),
				ToolDefinitions: &contextdv1.ToolDefinitionList{ToolDefinitions: payload.GetToolDefinitions()},
				Render: &contextdv1.RenderOptions{
					Provider: contextdv1.Provider(contextdv1.Provider_value["PROVIDER_"+providerName]),
					Model:    golden.Render.Model,
				},
				// The vector's payload rendered as given: no tool-round repair (an open round
				// before the current turn is a vector of the renderers' refusal).
				Repair: contextdv1.ToolRoundRepair_TOOL_ROUND_REPAIR_REJECT,
			}
		}
		for providerName, expected := range golden.ExpectedErrors {
			t.Run(golden.Name+"/"+providerName+"/refused", func(t *testing.T) {
				_, err := client.Compile(ctx, request(providerName))
				var typed *contextd.Error
				if !errors.As(err, &typed) || typed.Code.String() != goGRPCCodeName(expected.Code) {
					t.Fatalf("want %s, got %v", expected.Code, err)
				}
				if want := "provider rule " + expected.Rule + " violated at message \"" + expected.MessageID + "\""; !strings.HasPrefix(typed.Message, want) {
					t.Fatalf("message %q does not start with %q", typed.Message, want)
				}
			})
		}
		for providerName, expected := range golden.Expected {
			t.Run(golden.Name+"/"+providerName, func(t *testing.T) {
				response, err := client.Compile(ctx, request(providerName))
				if err != nil {
					t.Fatal(err)
				}
				var got, want any
				if err := json.Unmarshal(response.GetResult().GetRendered().GetJson(), &got); err != nil {
					t.Fatalf("rendered body is not JSON: %v", err)
				}
				if err := json.Unmarshal(expected, &want); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("rendered body\n got %s\nwant %s", response.GetResult().GetRendered().GetJson(), expected)
				}
			})
		}
	}
}

// goGRPCCodeName spells a gRPC code name ("FAILED_PRECONDITION") as codes.Code.String does
// ("FailedPrecondition").
func goGRPCCodeName(name string) string {
	words := strings.Split(strings.ToLower(name), "_")
	for index, word := range words {
		if word != "" {
			words[index] = strings.ToUpper(word[:1]) + word[1:]
		}
	}
	return strings.Join(words, "")
}
