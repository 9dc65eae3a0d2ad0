package contextd

import (
	"context"
	"errors"

	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
	"google.golang.org/protobuf/proto"
)

// Turn is one step of an agent loop in one RPC: it commits deltas — what the agent produced since
// its last model call (the assistant's answer, tool results, the next user message) — on top of
// expectedVersion and returns the compile of the state they produce, the context for the next
// model call. Deltas and compile are atomic: when the compile fails nothing is committed, and
// when the commit fails (a *VersionConflictError for a stale expectedVersion, INVALID_ARGUMENT
// for an invalid delta) there is no result. The next turn's expectedVersion is the result's
// CommittedVersion (its Version when deltas is empty and nothing was written back).
//
// request holds the compile options (Budget, Render, ...) and the ConversationId; its Commit is
// set by Turn, and the caller's message is not modified. Put the user's message in deltas
// (AppendUser), not in CurrentTurn: Turn refuses a CurrentTurn, which a retry would compile twice.
//
// Like Compile with Commit, a turn gets a random idempotency key and is retried with it while its
// outcome is unknown; a retry whose first attempt committed returns the compile of that version
// (warning "idempotent_replay"). If the conversation moved on meanwhile, Turn compiles it as it is
// now (without committing) so the result always has the prompt — Rendered when request.Render
// names a provider (Payload then only with COMPILE_RESULT_PART_PAYLOAD in Include), else
// Payload; CommittedVersion then still says which version the deltas produced.
func (c *Client) Turn(ctx context.Context, request *contextdv1.CompileRequest, expectedVersion int64, deltas ...*contextdv1.Delta) (*contextdv1.CompileResult, error) {
	if request.GetConversationId() == "" {
		return nil, errors.New("contextd: Turn needs request.ConversationId (a turn commits to a stored conversation)")
	}
	if request.GetCurrentTurn() != nil {
		return nil, errors.New("contextd: Turn takes the user's message as a delta (AppendUser), not as request.CurrentTurn")
	}
	turn := proto.CloneOf(request)
	turn.Commit = &contextdv1.CommitOptions{ExpectedVersion: expectedVersion, Deltas: deltas, IdempotencyKey: request.GetCommit().GetIdempotencyKey()}
	response, err := c.Compile(ctx, turn)
	if err != nil {
		return nil, err
	}
	result := response.GetResult()
	if result.GetPayload() != nil || result.GetRendered() != nil {
		return result, nil
	}
	// A replay after the conversation moved on carries versions only, no prompt.
	turn.Commit = nil
	current, err := c.Compile(ctx, turn)
	if err != nil {
		return nil, err
	}
	current.GetResult().CommittedVersion = result.GetCommittedVersion()
	current.GetResult().Warnings = append(result.GetWarnings(), current.GetResult().GetWarnings()...)
	return current.GetResult(), nil
}
