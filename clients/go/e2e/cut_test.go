package e2e

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/contextd-dev/contextd/clients/go/contextd"
	"github.com/contextd-dev/contextd/clients/go/internal/sidecartest"
	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
	"google.golang.org/protobuf/proto"
)

// answerCutter is a TCP proxy in front of the sidecar that, on the first connection, cuts both
// sides at the moment the sidecar starts answering the first RPC: for HTTP/2 (gRPC) when the
// first HEADERS frame of a stream leaves the sidecar, for HTTP/1.1 (Connect) at its first byte.
// By then the sidecar has applied the call, so the client sees a broken connection for a commit
// that happened. Later connections pass through untouched.
type answerCutter struct {
	listener net.Listener
	target   string
	http2    bool
	cut      atomic.Bool
	wg       sync.WaitGroup
}

func startAnswerCutter(t *testing.T, target string, http2 bool) *answerCutter {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &answerCutter{listener: listener, target: target, http2: http2}
	t.Cleanup(func() { listener.Close(); p.wg.Wait() })
	go p.serve()
	return p
}

func (p *answerCutter) address() string { return p.listener.Addr().String() }

func (p *answerCutter) serve() {
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		cutThis := p.cut.CompareAndSwap(false, true)
		p.wg.Add(2)
		go func() { defer p.wg.Done(); io.Copy(server, client); server.Close() }()
		go func() {
			defer p.wg.Done()
			defer client.Close()
			defer server.Close()
			if !cutThis {
				io.Copy(client, server)
				return
			}
			p.forwardUntilAnswer(client, server)
		}()
	}
}

// forwardUntilAnswer copies sidecar → client until the sidecar starts an answer, then returns
// without forwarding it.
func (p *answerCutter) forwardUntilAnswer(client, server net.Conn) {
	if !p.http2 {
		var first [1]byte
		io.ReadFull(server, first[:])
		return
	}
	header := make([]byte, 9)
	for {
		if _, err := io.ReadFull(server, header); err != nil {
			return
		}
		length := int(header[0])<<16 | int(header[1])<<8 | int(header[2])
		frameType, stream := header[3], binary.BigEndian.Uint32(header[5:9])&0x7fffffff
		if frameType == 0x1 && stream != 0 { // HEADERS of a response
			return
		}
		payload := make([]byte, length)
		if _, err := io.ReadFull(server, payload); err != nil {
			return
		}
		if _, err := client.Write(append(header, payload...)); err != nil {
			return
		}
	}
}

// TestACommitWhoseConnectionIsCutAfterItAppliedIsAppliedOnce: the client sees the connection break
// (UNAVAILABLE) after the sidecar applied the commit, sends it again with the same key over a new
// connection, and is answered from the key's record.
func TestACommitWhoseConnectionIsCutAfterItAppliedIsAppliedOnce(t *testing.T) {
	sidecar := sidecartest.StartWithRedis(t)
	for name, opts := range protocols {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			cutter := startAnswerCutter(t, sidecar.Address, name == "grpc")
			client := dial(t, cutter.address(), opts...)
			id := "cut-" + name
			response, err := client.Commit(ctx, &contextdv1.CommitRequest{
				ConversationId: id, ExpectedVersion: proto.Int64(0),
				Deltas: []*contextdv1.Delta{contextd.AppendUser(contextd.UserText("asked once"))},
			})
			if err != nil {
				t.Fatalf("commit whose first connection was cut after it applied: %v", err)
			}
			if !cutter.cut.Load() || !response.GetReplayed() || response.GetVersion() != 1 {
				t.Fatalf("cut %v, replayed %v, version %d; want the first answer cut and the retry answered from the record at version 1",
					cutter.cut.Load(), response.GetReplayed(), response.GetVersion())
			}

			// Without retries the same cut is reported as an unknown outcome naming the key, never as
			// a failure; sending the commit again with that key applies nothing twice.
			noRetries := dial(t, startAnswerCutter(t, sidecar.Address, name == "grpc").address(),
				append([]contextd.Option{contextd.WithRetryPolicy(contextd.RetryPolicy{MaxAttempts: 1})}, opts...)...)
			request := &contextdv1.CommitRequest{ConversationId: id, Deltas: []*contextdv1.Delta{contextd.AppendAssistant("answered once")}}
			_, err = noRetries.Commit(ctx, request)
			var unknown *contextd.OutcomeUnknownError
			if !errors.As(err, &unknown) || !errors.Is(err, contextd.ErrUnavailable) {
				t.Fatalf("cut commit without retries = %v, want an *OutcomeUnknownError after UNAVAILABLE", err)
			}
			request.IdempotencyKey = unknown.IdempotencyKey
			if again, err := noRetries.Commit(ctx, request); err != nil || !again.GetReplayed() || again.GetVersion() != 2 {
				t.Fatalf("the same commit with its key: %v, want replayed at version 2", err)
			}

			state, err := dial(t, sidecar.Address, opts...).GetState(ctx, &contextdv1.GetStateRequest{ConversationId: id})
			if err != nil || state.GetState().GetVersion() != 2 || len(state.GetState().GetHistory()) != 2 {
				t.Fatalf("stored: %v, version %d, %d messages; want version 2 with each message once", err, state.GetState().GetVersion(), len(state.GetState().GetHistory()))
			}
		})
	}
}
