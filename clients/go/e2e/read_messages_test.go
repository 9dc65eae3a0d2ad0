package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/contextd-dev/contextd/clients/go/contextd"
	"github.com/contextd-dev/contextd/clients/go/internal/sidecartest"
	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
)

// commitLongConversation stores count messages of about bytesEach bytes in commits of 10,000
// (the sidecar's --max-messages), each under the 16 MiB request limit.
func commitLongConversation(t *testing.T, client *contextd.Client, conversationID string, count, bytesEach int) {
	t.Helper()
	filler := strings.Repeat("x", bytesEach)
	for from := 0; from < count; from += 10_000 {
		messages := make([]*contextdv1.Message, 0, 10_000)
		for index := from; index < min(from+10_000, count); index++ {
			messages = append(messages, contextd.UserText(fmt.Sprintf("%d %s", index, filler)))
			messages[len(messages)-1].Id = fmt.Sprintf("m%d", index)
		}
		_, err := client.Commit(testContext(t), &contextdv1.CommitRequest{ConversationId: conversationID, Deltas: []*contextdv1.Delta{contextd.AppendMessages(contextdv1.Segment_SEGMENT_HISTORY, messages...)}})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// A 100,000-message, 50 MB conversation: GetState refuses it with STATE_TOO_LARGE naming the
// paged read, and MessagePages reads every message, in order, at one version.
func TestReadsA50MBConversationInPages(t *testing.T) {
	sidecar := sidecartest.Start(t)
	client := dial(t, sidecar.Address)
	commitLongConversation(t, client, "fifty-mb", 100_000, 500)

	_, err := client.GetState(testContext(t), &contextdv1.GetStateRequest{ConversationId: "fifty-mb"})
	var refused *contextd.Error
	if !errors.As(err, &refused) || !errors.Is(err, contextd.ErrResourceExhausted) || refused.Reason() != "STATE_TOO_LARGE" || !strings.Contains(refused.Message, "ConversationService.ReadMessages") {
		t.Fatalf("GetState of 50 MB = %v, want RESOURCE_EXHAUSTED STATE_TOO_LARGE naming ReadMessages", err)
	}

	read, pages, bytes := 0, 0, 0
	for page, err := range client.MessagePages(testContext(t), &contextdv1.ReadMessagesRequest{ConversationId: "fifty-mb"}) {
		if err != nil {
			t.Fatal(err)
		}
		if page.GetVersion() != 10 || page.GetSegmentSizes().GetHistory() != 100_000 || page.GetPosition() != uint64(read) {
			t.Fatalf("page %d: version %d, history %d, position %d; want 10, 100000, %d", pages, page.GetVersion(), page.GetSegmentSizes().GetHistory(), page.GetPosition(), read)
		}
		if page.GetPageBytes() > 4<<20 {
			t.Fatalf("page %d holds %d bytes, over the default 4 MiB", pages, page.GetPageBytes())
		}
		for _, message := range page.GetMessages() {
			if message.GetId() != fmt.Sprintf("m%d", read) {
				t.Fatalf("message %d has id %q", read, message.GetId())
			}
			read++
		}
		pages++
		bytes += int(page.GetPageBytes())
	}
	if read != 100_000 || bytes < 50_000_000 {
		t.Fatalf("read %d messages, %d bytes, in %d pages; want 100000 and at least 50 MB", read, bytes, pages)
	}
	t.Logf("%d messages, %d bytes in %d pages", read, bytes, pages)

	for name, c := range map[string]*contextd.Client{"grpc": client, "connect": dial(t, sidecar.Address, contextd.WithConnectProtocol(&http.Client{}))} {
		last, err := c.ReadMessages(testContext(t), &contextdv1.ReadMessagesRequest{ConversationId: "fifty-mb", Last: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(last.GetMessages()) != 10 || last.GetMessages()[0].GetId() != "m99990" || last.GetNextPageToken() != "" {
			t.Fatalf("%s: the last 10 = %d messages from %q, token %q", name, len(last.GetMessages()), last.GetMessages()[0].GetId(), last.GetNextPageToken())
		}
	}
}

// Later pages stay at the first page's version while the conversation is written to; a version
// the sidecar does not keep is a *VersionConflictError with the current version.
func TestMessagePagesStayAtOneVersion(t *testing.T) {
	sidecar := sidecartest.Start(t)
	client := dial(t, sidecar.Address)
	commitLongConversation(t, client, "pinned", 30, 100)
	var ids []string
	for page, err := range client.MessagePages(testContext(t), &contextdv1.ReadMessagesRequest{ConversationId: "pinned", MaxBytes: 300}) {
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) == 0 {
			if _, err := client.Commit(testContext(t), &contextdv1.CommitRequest{ConversationId: "pinned", Deltas: []*contextdv1.Delta{contextd.AppendUser(contextd.UserText("late"))}}); err != nil {
				t.Fatal(err)
			}
		}
		if page.GetVersion() != 1 {
			t.Fatalf("page at version %d, want 1", page.GetVersion())
		}
		for _, message := range page.GetMessages() {
			ids = append(ids, message.GetId())
		}
	}
	if len(ids) != 30 || ids[29] != "m29" {
		t.Fatalf("read %d ids ending %q, want the 30 of version 1", len(ids), ids[len(ids)-1])
	}
	_, err := client.ReadMessages(testContext(t), &contextdv1.ReadMessagesRequest{ConversationId: "pinned", Version: new(int64)})
	var conflict *contextd.VersionConflictError
	if !errors.As(err, &conflict) || conflict.CurrentVersion != 2 {
		t.Fatalf("reading version 0 = %v, want a version conflict at 2", err)
	}
}

// CommitWithRetryOnTail takes turns on a conversation GetState refuses (18 MB, over the 16 MiB
// message limit), over gRPC and Connect, reading only the tail it asks for; a writer that gets
// in between is a conflict it retries with the new tail. CommitWithRetry, which reads the whole
// state, is refused there as GetState is.
func TestCommitWithRetryOnTailWritesAConversationOverTheLimit(t *testing.T) {
	sidecar := sidecartest.Start(t)
	client := dial(t, sidecar.Address)
	const id = "eighteen-mb"
	for index := range 3 {
		message := contextd.UserText(fmt.Sprintf("%d %s", index, strings.Repeat("y", 6_000_000)))
		message.Id = fmt.Sprintf("big%d", index)
		if _, err := client.Commit(testContext(t), &contextdv1.CommitRequest{ConversationId: id, Deltas: []*contextdv1.Delta{contextd.AppendMessages(contextdv1.Segment_SEGMENT_HISTORY, message)}}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := client.CommitWithRetry(testContext(t), id, func(*contextdv1.ConversationState) ([]*contextdv1.Delta, error) {
		t.Fatal("apply called without a state")
		return nil, nil
	})
	if !errors.Is(err, contextd.ErrResourceExhausted) {
		t.Fatalf("CommitWithRetry of 18 MB = %v, want RESOURCE_EXHAUSTED", err)
	}

	for name, c := range map[string]*contextd.Client{"grpc": client, "connect": dial(t, sidecar.Address, contextd.WithConnectProtocol(&http.Client{}))} {
		var seen [][]string
		response, err := c.CommitWithRetryOnTail(testContext(t), id, 2, func(state *contextdv1.ConversationState) ([]*contextdv1.Delta, error) {
			ids := []string{}
			for _, message := range state.GetHistory() {
				ids = append(ids, message.GetId())
			}
			seen = append(seen, ids)
			if len(seen) == 1 {
				// Another writer lands between this read and its commit.
				interloper := contextd.UserText("in between")
				interloper.Id = name + "-between"
				if _, err := client.Commit(testContext(t), &contextdv1.CommitRequest{ConversationId: id, Deltas: []*contextdv1.Delta{contextd.AppendMessages(contextdv1.Segment_SEGMENT_HISTORY, interloper)}}); err != nil {
					t.Fatal(err)
				}
			}
			turn := contextd.UserText(name + " turn")
			turn.Id = name + "-turn"
			return []*contextdv1.Delta{contextd.AppendMessages(contextdv1.Segment_SEGMENT_HISTORY, turn)}, nil
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(seen) != 2 || len(seen[0]) != 2 || len(seen[1]) != 2 || seen[1][1] != name+"-between" {
			t.Fatalf("%s: apply saw %v; want two tails of 2, the second ending with the writer in between", name, seen)
		}
		last, err := c.ReadMessages(testContext(t), &contextdv1.ReadMessagesRequest{ConversationId: id, Last: 2})
		if err != nil {
			t.Fatal(err)
		}
		if last.GetVersion() != response.GetVersion() || last.GetMessages()[0].GetId() != name+"-between" || last.GetMessages()[1].GetId() != name+"-turn" {
			t.Fatalf("%s: after the commit the tail is %v at version %d; want the writer in between, then the turn, at %d", name, last.GetMessages(), last.GetVersion(), response.GetVersion())
		}
	}
	// 0 reads no messages: the version and the rest alone.
	if _, err := client.CommitWithRetryOnTail(testContext(t), id, 0, func(state *contextdv1.ConversationState) ([]*contextdv1.Delta, error) {
		if len(state.GetHistory()) != 0 || state.GetVersion() == 0 {
			t.Fatalf("historyTail 0 gave %d messages at version %d", len(state.GetHistory()), state.GetVersion())
		}
		return []*contextdv1.Delta{contextd.AppendUser(contextd.UserText("no tail"))}, nil
	}); err != nil {
		t.Fatal(err)
	}
}
