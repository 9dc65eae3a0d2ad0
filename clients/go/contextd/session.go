package contextd

import (
	"context"
	"errors"
	"fmt"
	"io"

	"connectrpc.com/connect"
	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Summarize writes a summary of messages in about targetTokens tokens, for CompileWithSummaries.
// messages are whole units of the oldest history (a tool round is never split, the open round,
// pending messages and the current turn are never among them); when history already starts with a
// summary, it is messages[0] and the new summary should carry its content forward. It returns the
// summary message (its role defaults to ASSISTANT, its id is assigned, its provenance is filled in
// by contextd; it may not carry tool calls or results) and optional facts to remember.
type Summarize func(ctx context.Context, messages []*contextdv1.Message, targetTokens int64) (summary *contextdv1.Message, remember []string, err error)

// CompileWithSummaries compiles over ContextService.CompileSession: whenever the budget asks for a
// summary (strategy SUMMARIZE, or budget.auto_compact when the conversation exceeds the window) it
// calls summarize and sends its answer back, then returns the result. With request.Commit the
// summary is stored as a compact delta, and the facts as experiences, in the same atomic commit as
// the writeback; a commit without an idempotency key gets a random one, as in Compile.
//
// The session is not retried, and the client's call timeout does not bound it (summaries take as
// long as the model takes); bound it with ctx. The sidecar stops waiting for an answer after its
// --summarize-timeout-ms (DEADLINE_EXCEEDED, nothing committed). An error from summarize cancels
// the session and is returned wrapped. Over WithConnectProtocol the session needs an HTTP/2
// (h2c) http.Client, since it is a bidirectional stream.
func (c *Client) CompileWithSummaries(ctx context.Context, request *contextdv1.CompileRequest, summarize Summarize) (*contextdv1.CompileResult, error) {
	if summarize == nil {
		return nil, errors.New("contextd: CompileWithSummaries needs a summarize function")
	}
	return c.compileSession(ctx, request, func(ctx context.Context, asked *contextdv1.SummarizeRequest) (*contextdv1.Message, []string, error) {
		return summarize(ctx, asked.GetMessages(), asked.GetTargetTokens())
	})
}

// SummarizeWithEvidence is Summarize given the whole request: asked.GetMessages() and
// asked.GetTargetTokens() as Summarize gets them, and the evidence a summary should keep:
// asked.GetTemplate() (the sections a summary should have — goal, decisions, open questions,
// files, commands, errors — and the same as prompt text in GetText()), asked.GetFacts() (the file
// paths, URLs, commands, error messages, tool names and ids found in the messages, each once with
// the id of the message it first appears in, to be kept word for word) and
// asked.GetFactsTruncated() (a bound left some facts out), with GetPreviousSummary() and
// GetReason().
type SummarizeWithEvidence func(ctx context.Context, asked *contextdv1.SummarizeRequest) (summary *contextdv1.Message, remember []string, err error)

// CompileWithEvidence is CompileWithSummaries for a summarize function that wants the template
// and the facts of each summary request (SummarizeWithEvidence); everything else is the same.
func (c *Client) CompileWithEvidence(ctx context.Context, request *contextdv1.CompileRequest, summarize SummarizeWithEvidence) (*contextdv1.CompileResult, error) {
	if summarize == nil {
		return nil, errors.New("contextd: CompileWithEvidence needs a summarize function")
	}
	return c.compileSession(ctx, request, summarize)
}

// compileSession runs one CompileSession, answering each summary request with summarize.
func (c *Client) compileSession(ctx context.Context, request *contextdv1.CompileRequest, summarize SummarizeWithEvidence) (*contextdv1.CompileResult, error) {
	if request.GetCommit() != nil && request.GetCommit().GetIdempotencyKey() == "" {
		request = proto.CloneOf(request)
		request.Commit.IdempotencyKey = newIdempotencyKey()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.transport.compileSession(ctx)
	if err != nil {
		return nil, fmt.Errorf("contextd: open CompileSession: %w", err)
	}
	// A failed send means the stream is over; Recv then reports why.
	_ = stream.Send(&contextdv1.CompileSessionRequest{Kind: &contextdv1.CompileSessionRequest_Compile{Compile: request}})
	for {
		response, err := stream.Recv()
		if err == io.EOF {
			return nil, errors.New("contextd: CompileSession ended without a result")
		}
		if err != nil {
			return nil, fmt.Errorf("contextd: CompileSession: %w", err)
		}
		switch kind := response.GetKind().(type) {
		case *contextdv1.CompileSessionResponse_SummarizeRequest:
			asked := kind.SummarizeRequest
			summary, remember, err := summarize(ctx, asked)
			if err != nil {
				return nil, fmt.Errorf("contextd: summarize %d messages (%s): %w", len(asked.GetMessages()), asked.GetReason(), err)
			}
			_ = stream.Send(&contextdv1.CompileSessionRequest{Kind: &contextdv1.CompileSessionRequest_SummarizeResponse{
				SummarizeResponse: &contextdv1.SummarizeResponse{RequestId: asked.GetRequestId(), Summary: summary, Remember: remember},
			}})
		case *contextdv1.CompileSessionResponse_Result:
			_ = stream.CloseSend()
			return kind.Result, nil
		}
	}
}

// sessionStream is one CompileSession, whichever protocol carries it. Recv returns io.EOF when the
// stream ends normally and a converted error otherwise.
type sessionStream interface {
	Send(*contextdv1.CompileSessionRequest) error
	Recv() (*contextdv1.CompileSessionResponse, error)
	CloseSend() error
}

type grpcSession struct {
	grpc.BidiStreamingClient[contextdv1.CompileSessionRequest, contextdv1.CompileSessionResponse]
}

func (s grpcSession) Recv() (*contextdv1.CompileSessionResponse, error) {
	message, err := s.BidiStreamingClient.Recv()
	if err == io.EOF {
		return nil, err
	}
	if err != nil {
		return nil, newError(err, s.Trailer())
	}
	return message, nil
}

func (t *grpcTransport) compileSession(ctx context.Context) (sessionStream, error) {
	stream, err := t.contexts.CompileSession(ctx)
	if err != nil {
		return nil, newError(err, nil)
	}
	return grpcSession{stream}, nil
}

type connectSession struct {
	stream *connect.BidiStreamForClient[contextdv1.CompileSessionRequest, contextdv1.CompileSessionResponse]
}

func (s connectSession) Send(request *contextdv1.CompileSessionRequest) error {
	return s.stream.Send(request)
}

func (s connectSession) Recv() (*contextdv1.CompileSessionResponse, error) {
	message, err := s.stream.Receive()
	if errors.Is(err, io.EOF) {
		return nil, io.EOF
	}
	if err != nil {
		return nil, newError(err, nil)
	}
	return message, nil
}

func (s connectSession) CloseSend() error {
	return s.stream.CloseRequest()
}

func (t *connectTransport) compileSession(ctx context.Context) (sessionStream, error) {
	return connectSession{t.contexts.CompileSession(ctx)}, nil
}
