package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/contextd-dev/contextd/clients/go/internal/sidecartest"
	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// systemPromptGolden is one system-prompt golden vector (format in
// test/golden/system-prompt/README.md).
type systemPromptGolden struct {
	Name                    string                     `json:"name"`
	Request                 json.RawMessage            `json:"request"`
	Render                  struct{ Model string }     `json:"render"`
	ExpectedSystem          []json.RawMessage          `json:"expected_system"`
	ExpectedIntroduced      []string                   `json:"expected_introduced"`
	ExpectedTransformations map[string]goldenRecord    `json:"expected_transformations"`
	Expected                map[string]json.RawMessage `json:"expected"`
}

// goldenRecord is a Transformation by its enum names.
type goldenRecord struct {
	Action string `json:"action"`
	Reason string `json:"reason"`
}

// jsonValue parses JSON text into a generic value, for comparing JSON written by different encoders.
func jsonValue(t *testing.T, raw []byte) any {
	t.Helper()
	var value any
	if err := json.Unmarshal(raw, &value); err != nil {
		t.Fatalf("not JSON: %v: %s", err, raw)
	}
	return value
}

// TestGoldenSystemPrompt sends each system-prompt golden request to a real sidecar and checks the
// system segment it compiled, the introduced blocks, their records and every provider's body.
func TestGoldenSystemPrompt(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(sidecartest.RepoRoot(), "test", "golden", "system-prompt", "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no system-prompt golden vectors found (%v)", err)
	}
	sidecar := sidecartest.Start(t)
	client := dial(t, sidecar.Address)
	ctx := testContext(t)
	for _, path := range paths {
		var golden systemPromptGolden
		raw, err := os.ReadFile(path)
		if err == nil {
			err = json.Unmarshal(raw, &golden)
		}
		request := &contextdv1.CompileRequest{}
		if err == nil {
			err = protojson.Unmarshal(golden.Request, request)
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		t.Run(golden.Name+"/system", func(t *testing.T) {
			response, err := client.Compile(ctx, request)
			if err != nil {
				t.Fatal(err)
			}
			result := response.GetResult()
			var got, want []any
			for _, message := range result.GetPayload().GetSystem() {
				encoded, err := protojson.Marshal(message)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, jsonValue(t, encoded))
			}
			for _, message := range golden.ExpectedSystem {
				want = append(want, jsonValue(t, message))
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("system segment\n got %v\nwant %v", got, want)
			}
			var introduced []string
			for _, message := range result.GetIntroduced() {
				introduced = append(introduced, message.GetMessage().GetId())
			}
			if len(introduced) != len(golden.ExpectedIntroduced) || (len(introduced) > 0 && !reflect.DeepEqual(introduced, golden.ExpectedIntroduced)) {
				t.Fatalf("introduced %v, want %v", introduced, golden.ExpectedIntroduced)
			}
			records := map[string]goldenRecord{}
			for id, record := range result.GetTransformations() {
				if record.GetReason() == contextdv1.TransformationReason_TRANSFORMATION_REASON_SYSTEM_PROMPT_ASSEMBLY {
					records[id] = goldenRecord{Action: record.GetAction().String(), Reason: record.GetReason().String()}
				}
			}
			if !reflect.DeepEqual(records, golden.ExpectedTransformations) && !(len(records) == 0 && len(golden.ExpectedTransformations) == 0) {
				t.Fatalf("records %v, want %v", records, golden.ExpectedTransformations)
			}
		})
		for providerName, expected := range golden.Expected {
			t.Run(golden.Name+"/"+providerName, func(t *testing.T) {
				rendered := proto.Clone(request).(*contextdv1.CompileRequest)
				rendered.Render = &contextdv1.RenderOptions{
					Provider: contextdv1.Provider(contextdv1.Provider_value["PROVIDER_"+providerName]),
					Model:    golden.Render.Model,
				}
				response, err := client.Compile(ctx, rendered)
				if err != nil {
					t.Fatal(err)
				}
				body := response.GetResult().GetRendered().GetJson()
				if !reflect.DeepEqual(jsonValue(t, body), jsonValue(t, expected)) {
					t.Fatalf("rendered body\n got %s\nwant %s", body, expected)
				}
			})
		}
	}
}
