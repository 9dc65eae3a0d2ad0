package e2e

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/contextd-dev/contextd/clients/go/contextd"
	"github.com/contextd-dev/contextd/clients/go/internal/sidecartest"
	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
	"google.golang.org/protobuf/proto"
)

// protocols are the two ways a Go agent can reach the sidecar.
var protocols = map[string][]contextd.Option{
	"grpc":    nil,
	"connect": {contextd.WithConnectProtocol(&http.Client{})},
}

// TestAgentTurnsAreStored drives the conversation side of an agent loop: user turns, an
// assistant turn with two parallel tool calls answered one by one, and a complete round stored
// as a unit.
func TestAgentTurnsAreStored(t *testing.T) {
	sidecar := sidecartest.StartWithRedis(t)
	for name, opts := range protocols {
		t.Run(name, func(t *testing.T) {
			client := dial(t, sidecar.Address, opts...)
			ctx := testContext(t)
			id := "agent-turns-" + name
			commit := func(expected int64, deltas ...*contextdv1.Delta) *contextdv1.CommitResponse {
				t.Helper()
				response, err := client.Commit(ctx, &contextdv1.CommitRequest{
					ConversationId: id, ExpectedVersion: proto.Int64(expected), Deltas: deltas, IncludeState: true,
				})
				if err != nil {
					t.Fatal(err)
				}
				return response
			}
			commit(0, contextd.AppendMessages(contextdv1.Segment_SEGMENT_SYSTEM, contextd.SystemText("You are a travel assistant.")),
				contextd.AppendUser(contextd.UserText("What's the weather in Oslo and the time in Tokyo?")))
			commit(1, contextd.AppendAssistant("Checking both.",
				contextd.ToolCall("call_weather", "weather", `{"city":"Oslo"}`),
				contextd.ToolCall("call_time", "clock", `{"zone":"Asia/Tokyo"}`)))
			// The results arrive in the order the tools finish, not the order of the calls.
			commit(2, contextd.AppendToolResult("call_time", "clock", contextd.TextPayload("09:30"), false))
			commit(3, contextd.AppendToolResult("call_weather", "weather", contextd.JSONPayload(`{"celsius":4}`), false))
			round, err := contextd.NewToolRound("",
				contextd.ToolCall("call_forecast", "forecast", `{"city":"Oslo","days":2}`)).
				Answer("call_forecast", contextd.ErrorPayload("upstream", "forecast service down"), true).
				Delta()
			if err != nil {
				t.Fatal(err)
			}
			last := commit(4, contextd.AppendUser(contextd.UserText("And tomorrow?")), round)
			if last.GetVersion() != 5 {
				t.Fatalf("version after five commits = %d", last.GetVersion())
			}

			loaded, err := client.GetState(ctx, &contextdv1.GetStateRequest{ConversationId: id})
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(loaded.GetState(), last.GetState()) {
				t.Fatal("GetState differs from the state the last commit returned")
			}
			var shape []string
			for _, message := range loaded.GetState().GetHistory() {
				if message.GetId() == "" {
					t.Errorf("stored %v message without an id", message.GetRole())
				}
				shape = append(shape, roleAndParts(message))
			}
			want := []string{
				"USER:text",
				"ASSISTANT:text,tool_call,tool_call",
				"TOOL:tool_result", "TOOL:tool_result",
				"USER:text",
				"ASSISTANT:tool_call", "TOOL:tool_result",
			}
			if !slices.Equal(shape, want) {
				t.Fatalf("history shape\n got %v\nwant %v", shape, want)
			}
			if got := loaded.GetState().GetHistory()[2].GetParts()[0].GetToolResult().GetToolCallId(); got != "call_time" {
				t.Errorf("first stored result answers %q, want call_time (arrival order)", got)
			}
		})
	}
}

func TestCommitWithRetryResolvesAConflict(t *testing.T) {
	sidecar := sidecartest.StartWithRedis(t)
	agent, other := dial(t, sidecar.Address), dial(t, sidecar.Address)
	ctx := testContext(t)
	const id = "conflict"
	if _, err := agent.Commit(ctx, &contextdv1.CommitRequest{ConversationId: id, Deltas: []*contextdv1.Delta{
		contextd.AppendUser(contextd.UserText("Book a table for two.")),
	}}); err != nil {
		t.Fatal(err)
	}
	var seenVersions []int64
	response, err := agent.CommitWithRetry(ctx, id, func(state *contextdv1.ConversationState) ([]*contextdv1.Delta, error) {
		seenVersions = append(seenVersions, state.GetVersion())
		if len(seenVersions) == 1 {
			// Another writer commits between this writer's read and its commit.
			if _, err := other.Commit(ctx, &contextdv1.CommitRequest{ConversationId: id, Deltas: []*contextdv1.Delta{
				contextd.Remember("The user prefers window seats."),
			}}); err != nil {
				return nil, err
			}
		}
		return []*contextdv1.Delta{contextd.AppendAssistant("Booked for 19:00.")}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(seenVersions, []int64{1, 2}) {
		t.Fatalf("apply saw versions %v, want [1 2]: one conflict, then a reload", seenVersions)
	}
	if response.GetState() != nil {
		t.Fatal("a commit sends the state only when asked (include_state)")
	}
	loaded, err := agent.GetState(ctx, &contextdv1.GetStateRequest{ConversationId: id})
	if err != nil {
		t.Fatal(err)
	}
	state := loaded.GetState()
	if response.GetVersion() != 3 || len(state.GetExperiences()) != 1 || len(state.GetHistory()) != 2 {
		t.Fatalf("after the retry: version %d, %d experiences, %d history messages; want 3, 1, 2",
			response.GetVersion(), len(state.GetExperiences()), len(state.GetHistory()))
	}

	// A plain stale commit is a typed conflict that carries the current version.
	for name, opts := range protocols {
		_, err := dial(t, sidecar.Address, opts...).Commit(ctx, &contextdv1.CommitRequest{
			ConversationId: id, ExpectedVersion: proto.Int64(1),
			Deltas: []*contextdv1.Delta{contextd.Remember("stale")},
		})
		var conflict *contextd.VersionConflictError
		if !errors.Is(err, contextd.ErrVersionConflict) || !errors.As(err, &conflict) || conflict.CurrentVersion != 3 {
			t.Errorf("%s: stale commit = %v, want a version conflict at current version 3", name, err)
		}
	}
}

func TestCommitErrorCodesForBadInput(t *testing.T) {
	sidecar := sidecartest.StartWithRedis(t)
	client := dial(t, sidecar.Address)
	ctx := testContext(t)
	const id = "bad-input"
	if _, err := client.Commit(ctx, &contextdv1.CommitRequest{ConversationId: id, Deltas: []*contextdv1.Delta{
		contextd.AppendUser(contextd.UserText("Look this up.")),
		contextd.AppendAssistant("", contextd.ToolCall("call_1", "search", `{"q":"x"}`)),
	}}); err != nil {
		t.Fatal(err)
	}
	cases := map[string]*contextdv1.CommitRequest{
		"empty batch": {ConversationId: id},
		// A user turn while a round is open and a result for an unknown call are stored (the
		// approval flow, a detached run); a call id twice in one round and a result naming no call are not.
		"a call id twice in one round": {ConversationId: id, Deltas: []*contextdv1.Delta{
			contextd.AppendAssistant("", contextd.ToolCall("call_1", "search", "{}"), contextd.ToolCall("call_1", "search", "{}")),
		}},
		"result naming no call": {ConversationId: id, Deltas: []*contextdv1.Delta{
			contextd.AppendToolResult("", "search", contextd.TextPayload("?"), false),
		}},
		"delta without an operation": {ConversationId: id, Deltas: []*contextdv1.Delta{{}}},
	}
	for name, request := range cases {
		_, err := client.Commit(ctx, request)
		var typed *contextd.Error
		if !errors.Is(err, contextd.ErrInvalidArgument) || !errors.As(err, &typed) || typed.Message == "" {
			t.Errorf("%s: err = %v, want INVALID_ARGUMENT with a message", name, err)
		}
	}
	if _, err := client.Commit(ctx, cases["a call id twice in one round"]); err == nil || !containsAll(err.Error(), "duplicate_tool_call_id", `"call_1"`) {
		t.Errorf("the duplicate-call error should name the rule and the call id: %v", err)
	}
	state, err := client.GetState(ctx, &contextdv1.GetStateRequest{ConversationId: id})
	if err != nil || state.GetState().GetVersion() != 1 {
		t.Fatalf("rejected batches must change nothing: version %d, err %v", state.GetState().GetVersion(), err)
	}
}

func TestWatchSeesEachCommit(t *testing.T) {
	sidecar := sidecartest.StartWithRedis(t)
	for name, opts := range protocols {
		t.Run(name, func(t *testing.T) {
			client := dial(t, sidecar.Address, opts...)
			ctx := testContext(t)
			id := "watched-" + name
			texts := []string{"first", "second", "third"}
			changes := make(chan *contextdv1.Change)
			failed := make(chan error, 1)
			go func() {
				for change, err := range client.Watch(ctx, &contextdv1.WatchRequest{ConversationId: id}) {
					if err != nil {
						failed <- err
						return
					}
					changes <- change
				}
			}()
			for i, text := range texts {
				if _, err := client.Commit(ctx, &contextdv1.CommitRequest{ConversationId: id, Deltas: []*contextdv1.Delta{
					contextd.AppendUser(contextd.UserText(text)),
				}}); err != nil {
					t.Fatal(err)
				}
				select {
				case change := <-changes:
					got := change.GetDeltas()[0].GetAppendUser().GetMessage().GetParts()[0].GetText().GetText()
					if change.GetVersion() != int64(i+1) || got != text {
						t.Fatalf("change %d: version %d text %q, want version %d text %q", i, change.GetVersion(), got, i+1, text)
					}
				case err := <-failed:
					t.Fatalf("watch failed: %v", err)
				case <-ctx.Done():
					t.Fatalf("no change for commit %d", i+1)
				}
			}
			// Resuming from a version replays only what came after it.
			var resumed []int64
			for change, err := range client.Watch(ctx, &contextdv1.WatchRequest{ConversationId: id, FromVersion: 1}) {
				if err != nil {
					t.Fatal(err)
				}
				if resumed = append(resumed, change.GetVersion()); len(resumed) == 2 {
					break
				}
			}
			if !slices.Equal(resumed, []int64{2, 3}) {
				t.Fatalf("resumed from version 1: %v, want [2 3]", resumed)
			}
		})
	}
}

// TestListConversationsByUpdate labels conversations with SetTitle and SetLabels and lists them
// newest update first, filtered by a label, with their titles and update times.
func TestListConversationsByUpdate(t *testing.T) {
	sidecar := sidecartest.StartWithRedis(t)
	client := dial(t, sidecar.Address)
	ctx := testContext(t)
	prefix := "go-listed/"
	since := time.Now().UnixMilli()
	commit := func(id string, deltas ...*contextdv1.Delta) {
		t.Helper()
		if _, err := client.Commit(ctx, &contextdv1.CommitRequest{ConversationId: prefix + id, Deltas: deltas}); err != nil {
			t.Fatal(err)
		}
	}
	commit("first", contextd.AppendUser(contextd.UserText("one")), contextd.SetTitle("First"), contextd.SetLabels(map[string]string{"app": "demo"}))
	commit("skipped", contextd.SetLabels(map[string]string{"app": "other"}))
	commit("second", contextd.SetTitle("Second"), contextd.SetLabels(map[string]string{"app": "demo", "draft": "yes"}))
	commit("second", contextd.SetLabels(nil, "draft"))
	page, err := client.ListConversations(ctx, &contextdv1.ListConversationsRequest{
		Prefix: prefix, Labels: map[string]string{"app": "demo"}, Order: contextdv1.ConversationOrder_CONVERSATION_ORDER_UPDATED_DESC, UpdatedSinceUnixMs: since,
	})
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, summary := range page.GetConversations() {
		listed = append(listed, summary.GetConversationId()+" "+summary.GetTitle()+" "+summary.GetLabels()["app"]+" "+strconv.Itoa(len(summary.GetLabels())))
	}
	if want := []string{prefix + "second Second demo 1", prefix + "first First demo 1"}; !slices.Equal(listed, want) {
		t.Fatalf("listed %q, want %q", listed, want)
	}
	newest, older := page.GetConversations()[0], page.GetConversations()[1]
	if newest.GetUpdatedAtUnixMs() < older.GetUpdatedAtUnixMs() || older.GetCreatedAtUnixMs() < since {
		t.Fatalf("times: newest updated %d, older updated %d created %d, since %d", newest.GetUpdatedAtUnixMs(), older.GetUpdatedAtUnixMs(), older.GetCreatedAtUnixMs(), since)
	}
	if page.GetNextPageToken() != "" {
		t.Fatalf("next page token %q, want none", page.GetNextPageToken())
	}
}

func TestDeleteAndExportConversations(t *testing.T) {
	sidecar := sidecartest.StartWithRedis(t)
	client := dial(t, sidecar.Address)
	ctx := testContext(t)
	prefix := "go-retention/"
	for _, id := range []string{"a", "b", "c"} {
		if _, err := client.Commit(ctx, &contextdv1.CommitRequest{ConversationId: prefix + id, Deltas: []*contextdv1.Delta{contextd.AppendUser(contextd.UserText("hi " + id))}}); err != nil {
			t.Fatal(err)
		}
	}
	pruned, err := client.Commit(ctx, &contextdv1.CommitRequest{ConversationId: prefix + "c", IncludeState: true, Deltas: []*contextdv1.Delta{
		contextd.AppendUser(contextd.UserText("again")), contextd.PruneHistory(1, 0), contextd.SetIdleTTL(-1),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if history := pruned.GetState().GetHistory(); len(history) != 2 || history[0].GetProvenance().GetSummary() == nil || pruned.GetState().GetIdleTtlMs() != -1 {
		t.Fatalf("pruned history %v, idle TTL %d", history, pruned.GetState().GetIdleTtlMs())
	}
	var exported []string
	for item, err := range client.ExportConversations(ctx, &contextdv1.ExportConversationsRequest{Prefix: prefix}) {
		if err != nil {
			t.Fatal(err)
		}
		exported = append(exported, item.GetState().GetConversationId()+" "+strconv.FormatInt(item.GetState().GetVersion(), 10))
	}
	if want := []string{prefix + "a 1", prefix + "b 1", prefix + "c 2"}; !slices.Equal(exported, want) {
		t.Fatalf("exported %q, want %q", exported, want)
	}
	stale := int64(5)
	if _, err := client.DeleteConversation(ctx, &contextdv1.DeleteConversationRequest{ConversationId: prefix + "a", ExpectedVersion: &stale}); !errors.Is(err, contextd.ErrVersionConflict) {
		t.Fatalf("delete at a stale version: %v, want ErrVersionConflict", err)
	}
	current := int64(1)
	deleted, err := client.DeleteConversation(ctx, &contextdv1.DeleteConversationRequest{ConversationId: prefix + "a", ExpectedVersion: &current})
	if err != nil || deleted.GetDeletedVersion() != 1 {
		t.Fatalf("delete: %v, deleted version %d", err, deleted.GetDeletedVersion())
	}
	page, err := client.DeleteConversations(ctx, &contextdv1.DeleteConversationsRequest{Prefix: prefix})
	if err != nil || page.GetDeleted() != 2 || page.GetNextPageToken() != "" {
		t.Fatalf("delete the prefix: %v, %d deleted, next %q", err, page.GetDeleted(), page.GetNextPageToken())
	}
	state, err := client.GetState(ctx, &contextdv1.GetStateRequest{ConversationId: prefix + "b"})
	if err != nil || state.GetState().GetVersion() != 0 {
		t.Fatalf("a deleted conversation reads as never written: %v, version %d", err, state.GetState().GetVersion())
	}
}
