package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
	"github.com/contextd-dev/contextd/gen/go/internal/sidecartest"
	"google.golang.org/protobuf/encoding/protojson"
)

// goldenFile is one provider golden vector (format in test/golden/providers/README.md).
type goldenFile struct {
	Name     string                     `json:"name"`
	Input    json.RawMessage            `json:"input"`
	Render   struct{ Model string }     `json:"render"`
	Expected map[string]json.RawMessage `json:"expected"`
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
		for providerName, expected := range golden.Expected {
			t.Run(golden.Name+"/"+providerName, func(t *testing.T) {
				response, err := client.Compile(ctx, &contextdv1.CompileRequest{
					System:          &contextdv1.MessageList{Messages: payload.GetSystem()},
					History:         &contextdv1.MessageList{Messages: payload.GetHistory()},
					Memory:          &contextdv1.MessageList{Messages: payload.GetMemory()},
					Tools:           &contextdv1.MessageList{Messages: payload.GetTools()},
					Scratch:         payload.GetScratch(),
					ToolDefinitions: &contextdv1.ToolDefinitionList{ToolDefinitions: payload.GetToolDefinitions()},
					Render: &contextdv1.RenderOptions{
						Provider: contextdv1.Provider(contextdv1.Provider_value["PROVIDER_"+providerName]),
						Model:    golden.Render.Model,
					},
				})
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
