package e2e

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/contextd-dev/contextd/clients/go/contextd"
	"github.com/contextd-dev/contextd/clients/go/internal/sidecartest"
	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
)

// Reports recorded in a conversation's usage ledger over either protocol: a report sent twice
// counts once, GetUsage answers the entries and the totals, ListTenantUsage the tenant's totals.
func TestUsageLedgerCountsEachReportOnceAndReadsItBack(t *testing.T) {
	sidecar := sidecartest.Start(t)
	for name, opts := range map[string][]contextd.Option{
		"grpc":    nil,
		"connect": {contextd.WithConnectProtocol(&http.Client{})},
	} {
		t.Run(name, func(t *testing.T) {
			client := dial(t, sidecar.Address, opts...)
			ctx := testContext(t)
			tenant := "go-ledger-" + name
			conversation := tenant + "/chat"
			report := func(n int64) *contextdv1.ReportUsageRequest {
				return &contextdv1.ReportUsageRequest{
					ConversationId:    conversation,
					TurnId:            fmt.Sprintf("turn-%d", n),
					ReportId:          fmt.Sprintf("response-%d", n),
					Provider:          contextdv1.Provider_PROVIDER_OPENAI_CHAT,
					Model:             "gpt-4o",
					Estimator:         contextdv1.EstimatorKind_ESTIMATOR_KIND_TOKENIZER,
					EstimatedTokens:   1000 * n,
					ActualInputTokens: 1100 * n,
					CachedInputTokens: 500 * n,
					OutputTokens:      70 * n,
				}
			}
			// The third is the second again, as a retry after a lost answer sends it.
			for index, n := range []int64{1, 2, 2} {
				answer, err := client.ReportUsage(ctx, report(n))
				if err != nil {
					t.Fatal(err)
				}
				retry := index == 2
				if answer.GetDuplicate() != retry || answer.GetConversationTotals().GetReports() != min(n, 2) {
					t.Fatalf("report %d: %v", index, answer)
				}
			}
			ledger, err := client.GetUsage(ctx, &contextdv1.GetUsageRequest{ConversationId: conversation})
			if err != nil {
				t.Fatal(err)
			}
			totals := ledger.GetTotals()
			if totals.GetReports() != 2 || totals.GetInputTokens() != 3300 || totals.GetCachedInputTokens() != 1500 || totals.GetOutputTokens() != 210 || totals.GetCompiledTokens() != 3000 {
				t.Fatalf("totals: %v", totals)
			}
			if len(ledger.GetEntries()) != 2 || ledger.GetEntries()[1].GetTurnId() != "turn-2" || ledger.GetEntries()[1].GetReportId() != "response-2" {
				t.Fatalf("entries: %v", ledger.GetEntries())
			}
			page, err := client.ListTenantUsage(ctx, &contextdv1.ListTenantUsageRequest{Tenant: tenant})
			if err != nil {
				t.Fatal(err)
			}
			if page.GetTotals().GetReports() != 2 || len(page.GetConversations()) != 1 || page.GetConversations()[0].GetConversationId() != conversation {
				t.Fatalf("tenant page: %v", page)
			}
		})
	}
}
