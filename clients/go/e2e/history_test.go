package e2e

import (
	"errors"
	"testing"

	"github.com/contextd-dev/contextd/clients/go/contextd"
	"github.com/contextd-dev/contextd/clients/go/internal/sidecartest"
	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// TestForkHistoryAndRewind forks a conversation at a past version, reads that version with
// GetState AtVersion, and rewinds the source to it, over both protocols (docs/history.md).
func TestForkHistoryAndRewind(t *testing.T) {
	sidecar := sidecartest.Start(t)
	for name, opts := range protocols {
		t.Run(name, func(t *testing.T) {
			client := dial(t, sidecar.Address, opts...)
			ctx := testContext(t)
			id := "history-" + name
			for version, text := range []string{"plan a trip", "to Oslo", "no, to Tokyo"} {
				if _, err := client.Commit(ctx, &contextdv1.CommitRequest{ConversationId: id, ExpectedVersion: proto.Int64(int64(version)),
					Deltas: []*contextdv1.Delta{contextd.AppendUser(contextd.UserText(text))}}); err != nil {
					t.Fatal(err)
				}
			}
			past, err := client.GetState(ctx, &contextdv1.GetStateRequest{ConversationId: id, AtVersion: proto.Int64(2)})
			if err != nil {
				t.Fatal(err)
			}
			if got := len(past.GetState().GetHistory()); got != 2 || past.GetState().GetVersion() != 2 {
				t.Fatalf("version 2 has %d messages at version %d, want 2 at 2", got, past.GetState().GetVersion())
			}

			forked, err := client.Fork(ctx, &contextdv1.ForkRequest{ConversationId: id, AtVersion: proto.Int64(2), NewConversationId: id + "-branch"})
			if err != nil {
				t.Fatal(err)
			}
			if forked.GetVersion() != 1 || forked.GetForkedFrom().GetVersion() != 2 || forked.GetForkedFrom().GetConversationId() != id {
				t.Fatalf("fork answered %v", forked)
			}
			branch, err := client.GetState(ctx, &contextdv1.GetStateRequest{ConversationId: id + "-branch"})
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(&contextdv1.ConversationState{History: branch.GetState().GetHistory()}, &contextdv1.ConversationState{History: past.GetState().GetHistory()}) {
				t.Fatalf("the branch's history differs from version 2's: %v", branch.GetState().GetHistory())
			}
			_, err = client.Fork(ctx, &contextdv1.ForkRequest{ConversationId: id, NewConversationId: id + "-branch"})
			if status.Code(err) != codes.AlreadyExists {
				t.Fatalf("a second fork into the same id: %v, want AlreadyExists", err)
			}

			rewound, err := client.Rewind(ctx, &contextdv1.RewindRequest{ConversationId: id, ToVersion: 2, ExpectedVersion: proto.Int64(3)})
			if err != nil {
				t.Fatal(err)
			}
			if rewound.GetVersion() != 4 || rewound.GetReplayed() {
				t.Fatalf("rewind answered %v", rewound)
			}
			_, err = client.Rewind(ctx, &contextdv1.RewindRequest{ConversationId: id, ToVersion: 1, ExpectedVersion: proto.Int64(3)})
			if !errors.Is(err, contextd.ErrVersionConflict) {
				t.Fatalf("a stale rewind: %v, want a version conflict", err)
			}
			_, err = client.GetState(ctx, &contextdv1.GetStateRequest{ConversationId: id, AtVersion: proto.Int64(9)})
			if status.Code(err) != codes.OutOfRange {
				t.Fatalf("a version past the current one: %v, want OutOfRange", err)
			}
		})
	}
}
