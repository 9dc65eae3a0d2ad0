package e2e

import (
	"strings"
	"testing"

	"github.com/contextd-dev/contextd/clients/go/contextd"
	"github.com/contextd-dev/contextd/clients/go/internal/sidecartest"
	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
	"google.golang.org/protobuf/proto"
)

// TestLargeToolResultsByReference compiles a large tool result as a preview and reads it back
// whole with ReadWholeToolResult, over both protocols.
func TestLargeToolResultsByReference(t *testing.T) {
	sidecar := sidecartest.Start(t)
	file := strings.Repeat("línea del fichero 😀\n", 4000)
	for name, opts := range protocols {
		t.Run(name, func(t *testing.T) {
			client := dial(t, sidecar.Address, opts...)
			ctx := testContext(t)
			id := "large-result-" + name
			round, err := contextd.NewToolRound("", contextd.ToolCall("call_read", "read_file", `{"path":"a.txt"}`)).
				Answer("call_read", contextd.TextPayload(file), false).Delta()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := client.Commit(ctx, &contextdv1.CommitRequest{ConversationId: id, ExpectedVersion: proto.Int64(0),
				Deltas: []*contextdv1.Delta{contextd.AppendUser(contextd.UserText("read a.txt")), round}}); err != nil {
				t.Fatal(err)
			}
			compiled, err := client.Compile(ctx, &contextdv1.CompileRequest{ConversationId: id,
				LargeToolResults: &contextdv1.LargeToolResults{AddReadTool: true}})
			if err != nil {
				t.Fatal(err)
			}
			sent := compiled.GetResult().GetPayload().GetHistory()[2].GetParts()[0].GetToolResult().GetPayload().GetText()
			if !strings.Contains(sent, `read more with read_tool_result(tool_call_id "call_read"`) || len(sent) > 2000 {
				t.Fatalf("the result was not sent as a preview: %.200q (%d bytes)", sent, len(sent))
			}
			whole, err := client.ReadWholeToolResult(ctx, id, "call_read")
			if err != nil {
				t.Fatal(err)
			}
			if whole != file {
				t.Fatalf("read back %d bytes, stored %d", len(whole), len(file))
			}
		})
	}
}
