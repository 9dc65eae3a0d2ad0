package contextd_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"testing"

	"github.com/contextd-dev/contextd/clients/go/contextd"
	"github.com/contextd-dev/contextd/clients/go/internal/sidecartest"
	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
)

// The examples talk to a real sidecar: TestMain starts one and hands its address over in
// CONTEXTD_ADDRESS, which the examples read as an agent would.
func TestMain(m *testing.M) {
	os.Exit(sidecartest.RunWithSidecar(m))
}

// One agent step per call: commit what happened, get the next prompt.
func ExampleClient_Turn() {
	ctx := context.Background()
	client, err := contextd.Dial(os.Getenv("CONTEXTD_ADDRESS")) // "" = 127.0.0.1:7420
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	request := &contextdv1.CompileRequest{
		ConversationId: "example-" + rand.Text(),
		Render:         &contextdv1.RenderOptions{Provider: contextdv1.Provider_PROVIDER_OPENAI_CHAT, Model: "gpt-4o"},
	}
	result, err := client.Turn(ctx, request, 0, contextd.AppendUser(contextd.UserText("Weather in Oslo?")))
	if err != nil {
		log.Fatal(err)
	}
	round, err := contextd.NewToolRound("", contextd.ToolCall("call_1", "weather", `{"city":"Oslo"}`)).
		Answer("call_1", contextd.TextPayload("4°C, rain"), false).Delta()
	if err != nil {
		log.Fatal(err)
	}
	result, err = client.Turn(ctx, request, result.GetCommittedVersion(), round)
	if err != nil {
		log.Fatal(err)
	}
	var body struct {
		Messages []struct{ Role string } `json:"messages"`
	}
	if err := json.Unmarshal(result.GetRendered().GetJson(), &body); err != nil {
		log.Fatal(err)
	}
	for _, message := range body.Messages {
		fmt.Println(message.Role)
	}
	fmt.Println("version", result.GetCommittedVersion())
	// Output:
	// user
	// assistant
	// tool
	// version 2
}

// A stale expected version is a conflict that carries the current version.
func ExampleVersionConflictError() {
	ctx := context.Background()
	client, err := contextd.Dial(os.Getenv("CONTEXTD_ADDRESS"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	id := "example-" + rand.Text()
	if _, err := client.Commit(ctx, &contextdv1.CommitRequest{ConversationId: id,
		Deltas: []*contextdv1.Delta{contextd.AppendUser(contextd.UserText("first"))}}); err != nil {
		log.Fatal(err)
	}
	stale := int64(0)
	_, err = client.Commit(ctx, &contextdv1.CommitRequest{ConversationId: id, ExpectedVersion: &stale,
		Deltas: []*contextdv1.Delta{contextd.AppendUser(contextd.UserText("second"))}})
	var conflict *contextd.VersionConflictError
	fmt.Println(errors.Is(err, contextd.ErrVersionConflict), errors.As(err, &conflict) && conflict.CurrentVersion == 1)
	// Output: true true
}

// CommitWithRetry reloads the state and applies the change again when another writer got there first.
func ExampleClient_CommitWithRetry() {
	ctx := context.Background()
	client, err := contextd.Dial(os.Getenv("CONTEXTD_ADDRESS"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	committed, err := client.CommitWithRetry(ctx, "example-"+rand.Text(), func(state *contextdv1.ConversationState) ([]*contextdv1.Delta, error) {
		return []*contextdv1.Delta{contextd.AppendUser(contextd.UserText(fmt.Sprintf("message %d", len(state.GetHistory())+1)))}, nil
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("version", committed.GetVersion())
	// Output: version 1
}
