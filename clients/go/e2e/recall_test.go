package e2e

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/contextd-dev/contextd/clients/go/contextd"
	"github.com/contextd-dev/contextd/clients/go/internal/sidecartest"
	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// TestAnswerRecallToolCall trims a coding history with the recall tools on, then answers the
// model's search_history and recall_message calls with one AnswerRecallToolCall each, over both
// protocols, from what the budget dropped.
func TestAnswerRecallToolCall(t *testing.T) {
	sidecar := sidecartest.Start(t)
	for name, opts := range protocols {
		t.Run(name, func(t *testing.T) {
			client := dial(t, sidecar.Address, opts...)
			ctx := testContext(t)
			id := "recall-" + name
			var deltas []*contextdv1.Delta
			for index := 0; index < 30; index++ {
				args, _ := json.Marshal(map[string]string{"command": fmt.Sprintf("make -C services/worker_%d test", index)})
				round, err := contextd.NewToolRound("", contextd.ToolCall(fmt.Sprintf("c%d", index), "run_command", string(args))).
					Answer(fmt.Sprintf("c%d", index), contextd.TextPayload(fmt.Sprintf("ok services/worker_%d\n%s", index, strings.Repeat("build output line\n", 100))), false).Delta()
				if err != nil {
					t.Fatal(err)
				}
				deltas = append(deltas, contextd.AppendUser(contextd.UserText(fmt.Sprintf("step %d", index))), round)
			}
			if _, err := client.Commit(ctx, &contextdv1.CommitRequest{ConversationId: id, ExpectedVersion: proto.Int64(0), Deltas: deltas}); err != nil {
				t.Fatal(err)
			}
			compiled, err := client.Compile(ctx, &contextdv1.CompileRequest{ConversationId: id, Budget: &contextdv1.Budget{MaxTokens: 2000}, RecallTools: true,
				Render: &contextdv1.RenderOptions{Provider: contextdv1.Provider_PROVIDER_ANTHROPIC_MESSAGES, Model: "claude-sonnet-4-5"}})
			if err != nil {
				t.Fatal(err)
			}
			var body struct {
				Tools []struct {
					Name string `json:"name"`
				} `json:"tools"`
			}
			if err := json.Unmarshal(compiled.GetResult().GetRendered().GetJson(), &body); err != nil {
				t.Fatal(err)
			}
			var recallTools []string
			for _, tool := range body.Tools {
				if contextd.IsRecallTool(tool.Name) {
					recallTools = append(recallTools, tool.Name)
				}
			}
			if strings.Join(recallTools, ",") != strings.Join(contextd.RecallToolNames, ",") || compiled.GetResult().GetBudgetDroppedMessages() == 0 {
				t.Fatalf("recall tools %v, %d messages dropped", recallTools, compiled.GetResult().GetBudgetDroppedMessages())
			}
			found, err := client.AnswerRecallToolCall(ctx, id, "contextd_search_history", `{"query":"services/worker_2","max_results":3}`)
			if err != nil {
				t.Fatal(err)
			}
			match := regexp.MustCompile(`--- message (\S+) · position \d+ · assistant · run_command\ntool call run_command \(c2\)`).FindStringSubmatch(found)
			if match == nil {
				t.Fatalf("the search did not find c2's call:\n%s", found)
			}
			whole, err := client.AnswerRecallToolCall(ctx, id, "contextd_recall_message", fmt.Sprintf(`{"message_ids":[%q]}`, match[1]))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(whole, `make -C services/worker_2 test`) {
				t.Fatalf("recalled:\n%s", whole)
			}
			_, err = client.AnswerRecallToolCall(ctx, id, "read_file", "{}")
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `tool_call.name: "read_file" is not a recall tool`) {
				t.Fatalf("a call of another tool: %v", err)
			}
		})
	}
}
