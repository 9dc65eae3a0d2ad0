package contextd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"

	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
)

// Watch yields the committed changes of a conversation with a version above
// request.FromVersion, in version order, then live changes until ctx ends or the loop stops.
// Heartbeats are consumed, not yielded.
//
// When the stream breaks with UNAVAILABLE (a sidecar restart, a store failover) Watch reopens it
// after the last change it yielded, so no change is lost or repeated; the retry policy bounds the
// consecutive failures, and a received change starts the count over. Any other error, including
// the end of ctx, is yielded once, last.
func (c *Client) Watch(ctx context.Context, request *contextdv1.WatchRequest) iter.Seq2[*contextdv1.Change, error] {
	return func(yield func(*contextdv1.Change, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		conversationID := request.GetConversationId()
		from := request.GetFromVersion()
		for failures := 1; ; failures++ {
			stream, err := c.transport.watch(ctx, &contextdv1.WatchRequest{ConversationId: conversationID, FromVersion: from})
			for err == nil {
				var response *contextdv1.WatchResponse
				if response, err = stream.Recv(); err != nil {
					break
				}
				change := response.GetChange()
				if change == nil {
					continue
				}
				failures = 1
				from = change.GetVersion()
				if !yield(change, nil) {
					return
				}
			}
			if err == io.EOF {
				return
			}
			if !errors.Is(err, ErrUnavailable) || failures >= c.retry.MaxAttempts || c.retry.sleep(ctx, failures) != nil {
				yield(nil, fmt.Errorf("contextd: watch %q after version %d: %w", conversationID, from, err))
				return
			}
		}
	}
}

// WatchEvents yields the observer events of every compile (of one conversation when
// request.ConversationId is set) until ctx ends or the loop stops. Each response's Dropped says
// how many events this subscriber lost before it because it fell behind. Telemetry is not
// durable, so a broken stream is not resumed: its error is yielded once, last.
func (c *Client) WatchEvents(ctx context.Context, request *contextdv1.WatchEventsRequest) iter.Seq2[*contextdv1.WatchEventsResponse, error] {
	return func(yield func(*contextdv1.WatchEventsResponse, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := c.transport.watchEvents(ctx, request)
		for err == nil {
			var response *contextdv1.WatchEventsResponse
			if response, err = stream.Recv(); err == nil && !yield(response, nil) {
				return
			}
		}
		if err != io.EOF {
			yield(nil, fmt.Errorf("contextd: watch events: %w", err))
		}
	}
}

// ExportConversations yields the states of the conversations under a prefix in id order; after an
// error, a new call with the last ResumeToken received goes on from there.
func (c *Client) ExportConversations(ctx context.Context, request *contextdv1.ExportConversationsRequest) iter.Seq2[*contextdv1.ExportConversationsResponse, error] {
	return func(yield func(*contextdv1.ExportConversationsResponse, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := c.transport.exportConversations(ctx, request)
		for err == nil {
			var response *contextdv1.ExportConversationsResponse
			if response, err = stream.Recv(); err == nil && !yield(response, nil) {
				return
			}
		}
		if err != io.EOF {
			yield(nil, fmt.Errorf("contextd: export %q: %w", request.GetPrefix(), err))
		}
	}
}

// CompileStream compiles like Compile, calling onEvent with each observer event as the engine
// emits it, and returns the result, which the server sends last. It runs under the client's call
// timeout and is not retried, since onEvent may already have seen events.
func (c *Client) CompileStream(ctx context.Context, request *contextdv1.CompileStreamRequest, onEvent func(*contextdv1.ObserverEvent)) (*contextdv1.CompileResult, error) {
	ctx, cancel := c.withCallTimeout(ctx)
	defer cancel()
	stream, err := c.transport.compileStream(ctx, request)
	for err == nil {
		var response *contextdv1.CompileStreamResponse
		if response, err = stream.Recv(); err != nil {
			break
		}
		if result := response.GetResult(); result != nil {
			return result, nil
		}
		if event := response.GetEvent(); event != nil && onEvent != nil {
			onEvent(event)
		}
	}
	if err == io.EOF {
		return nil, errors.New("contextd: compile stream ended without a result")
	}
	return nil, fmt.Errorf("contextd: compile stream: %w", err)
}
