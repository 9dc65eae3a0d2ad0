package e2e

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/contextd-dev/contextd/clients/go/contextd"
	"github.com/contextd-dev/contextd/clients/go/internal/sidecartest"
	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
)

// A usage report over either protocol changes the next compile's budget: 100 estimated tokens
// counted as 125 by the provider hold later compiles to floor(100 / 1.25) = 80 estimated tokens.
func TestReportUsageCorrectsTheNextCompilesBudget(t *testing.T) {
	sidecar := sidecartest.Start(t)
	for name, opts := range map[string][]contextd.Option{
		"grpc":    nil,
		"connect": {contextd.WithConnectProtocol(&http.Client{})},
	} {
		t.Run(name, func(t *testing.T) {
			client := dial(t, sidecar.Address, opts...)
			ctx := testContext(t)
			history := make([]*contextdv1.Message, 12)
			for index := range history {
				role := contextdv1.Role_ROLE_USER
				if index%2 == 1 {
					role = contextdv1.Role_ROLE_ASSISTANT
				}
				history[index] = contextd.TextMessage(role, fmt.Sprintf("message %d", index))
				history[index].Id = fmt.Sprintf("m%d", index)
			}
			request := &contextdv1.CompileRequest{
				History: &contextdv1.MessageList{Messages: history},
				Budget:  &contextdv1.Budget{MaxTokens: 100, Estimator: &contextdv1.Estimator{Kind: contextdv1.EstimatorKind_ESTIMATOR_KIND_FIXED, FixedPerMessage: 10}},
				Render:  &contextdv1.RenderOptions{Provider: contextdv1.Provider_PROVIDER_ANTHROPIC_MESSAGES, Model: "calibrated-" + name},
				// The typed payload beside the rendered body (a rendered compile sends it only when asked).
				Include: []contextdv1.CompileResultPart{contextdv1.CompileResultPart_COMPILE_RESULT_PART_PAYLOAD},
			}
			first, err := client.Compile(ctx, request)
			if err != nil {
				t.Fatal(err)
			}
			calibration := first.GetResult().GetCalibration()
			if calibration.GetCorrection() != 1 || calibration.GetEstimatedTokens() != 100 || len(first.GetResult().GetPayload().GetHistory()) != 10 {
				t.Fatalf("first compile: calibration %v, %d messages", calibration, len(first.GetResult().GetPayload().GetHistory()))
			}
			reported, err := client.ReportUsage(ctx, &contextdv1.ReportUsageRequest{
				Provider:          calibration.GetProvider(),
				Model:             calibration.GetModel(),
				Estimator:         calibration.GetEstimator(),
				EstimatedTokens:   calibration.GetEstimatedTokens(),
				ActualInputTokens: 125,
			})
			if err != nil {
				t.Fatal(err)
			}
			if reported.GetCorrection() != 1.25 || reported.GetReports() != 1 {
				t.Fatalf("report: %v", reported)
			}
			second, err := client.Compile(ctx, request)
			if err != nil {
				t.Fatal(err)
			}
			result := second.GetResult()
			if got := result.GetPayload().GetHistory(); len(got) != 8 || got[0].GetId() != "m4" {
				t.Fatalf("second compile kept %d messages", len(got))
			}
			if result.GetUsage().GetLimit() != 80 || result.GetCalibration().GetCorrection() != 1.25 || result.GetCalibration().GetCorrectedTokens() != 100 {
				t.Fatalf("second compile: usage %v, calibration %v", result.GetUsage(), result.GetCalibration())
			}
		})
	}
}
