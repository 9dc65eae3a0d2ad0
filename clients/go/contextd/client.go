package contextd

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"
	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
)

// DefaultAddress is where a sidecar listens unless configured otherwise.
const DefaultAddress = "127.0.0.1:7420"

// DefaultMaxMessageBytes is the largest message a Client sends or receives unless configured
// otherwise: the sidecar's default --max-request-bytes (16 MiB) plus the 5-byte frame header of
// gRPC and Connect. grpc-go's own default receive limit, 4 MiB, is smaller than a sidecar answers
// for a long conversation, and a commit whose answer is refused for its size has still been
// applied.
const DefaultMaxMessageBytes = 16<<20 + 5

// Option configures Dial.
type Option func(*options)

type options struct {
	callTimeout      time.Duration
	retry            RetryPolicy
	conflictAttempts int
	connectClient    *http.Client
	dialOptions      []grpc.DialOption
	maxReceiveBytes  int
	maxSendBytes     int
	token            string
	tls              *tls.Config
	tlsCAFile        string
}

// WithCallTimeout bounds every unary call, retries included, unless the caller's context already
// has an earlier deadline. 0 = no bound. The default is 30s. Streams are never bounded by it.
func WithCallTimeout(timeout time.Duration) Option {
	return func(o *options) { o.callTimeout = timeout }
}

// WithRetryPolicy replaces DefaultRetryPolicy.
func WithRetryPolicy(policy RetryPolicy) Option {
	return func(o *options) { o.retry = policy }
}

// WithConflictAttempts sets how many times CommitWithRetry tries before returning the version
// conflict. The default is 10.
func WithConflictAttempts(attempts int) Option {
	return func(o *options) { o.conflictAttempts = attempts }
}

// WithMaxReceiveBytes sets the largest response message the Client accepts; the default is
// DefaultMaxMessageBytes. A commit whose answer is over it is retried with its idempotency key,
// asking for the version only (see Commit).
func WithMaxReceiveBytes(bytes int) Option {
	return func(o *options) { o.maxReceiveBytes = bytes }
}

// WithMaxSendBytes sets the largest request message the Client sends; the default is
// DefaultMaxMessageBytes (the sidecar refuses larger ones unless started with a larger
// --max-request-bytes).
func WithMaxSendBytes(bytes int) Option {
	return func(o *options) { o.maxSendBytes = bytes }
}

// WithConnectProtocol speaks the Connect protocol over httpClient (nil = a new http.Client)
// instead of gRPC, for networks where only plain HTTP/1.1 gets through. With WithTLS, an
// httpClient without a Transport gets one with that TLS configuration; one with its own Transport
// is used as it is (give it the TLS configuration yourself).
func WithConnectProtocol(httpClient *http.Client) Option {
	return func(o *options) {
		if httpClient == nil {
			httpClient = &http.Client{}
		}
		o.connectClient = httpClient
	}
}

// WithGRPCDialOptions adds grpc-go dial options (interceptors, ...), after the Client's own, so
// they win. The default is plain HTTP/2 cleartext, which is right for a sidecar on loopback; for
// TLS use WithTLS.
func WithGRPCDialOptions(dialOptions ...grpc.DialOption) Option {
	return func(o *options) { o.dialOptions = append(o.dialOptions, dialOptions...) }
}

// WithBearerToken sends "authorization: Bearer <token>" with every call, for a sidecar started with
// --auth-tokens-file or CONTEXTD_AUTH_TOKENS. The token is sent over cleartext too, which is right
// on loopback only: across a network add WithTLS or WithTLSCAFile.
func WithBearerToken(token string) Option {
	return func(o *options) { o.token = token }
}

// WithTLS speaks TLS to a sidecar started with --tls-cert (or to a proxy that terminates TLS).
// config nil verifies the server against the system's root certificates; set RootCAs for a
// private CA and Certificates for a sidecar that requires client certificates (--tls-client-ca).
// gRPC negotiates HTTP/2 by ALPN; the Connect protocol (WithConnectProtocol) uses https.
func WithTLS(config *tls.Config) Option {
	return func(o *options) {
		if config == nil {
			config = &tls.Config{}
		}
		o.tls = config
	}
}

// WithTLSCAFile is WithTLS verifying the server against the PEM certificates in path instead of
// the system roots. Dial fails when the file cannot be read or holds no certificate.
func WithTLSCAFile(path string) Option {
	return func(o *options) {
		o.tlsCAFile = path
		if o.tls == nil {
			o.tls = &tls.Config{}
		}
	}
}

// tlsConfig is the TLS configuration the options ask for, nil for cleartext.
func (o *options) tlsConfig() (*tls.Config, error) {
	if o.tls == nil {
		return nil, nil
	}
	config := o.tls.Clone()
	if config.MinVersion == 0 {
		config.MinVersion = tls.VersionTLS12
	}
	if o.tlsCAFile != "" {
		pem, err := os.ReadFile(o.tlsCAFile)
		if err != nil {
			return nil, fmt.Errorf("contextd: TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("contextd: TLS CA file %s holds no PEM certificate", o.tlsCAFile)
		}
		config.RootCAs = pool
	}
	return config, nil
}

// bearerToken is grpc-go per-call credentials carrying one bearer token. It does not require
// transport security, so a sidecar on loopback can check tokens without TLS.
type bearerToken string

func (t bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

func (bearerToken) RequireTransportSecurity() bool { return false }

// bearerTokenInterceptor adds the token to every connect-go call, unary and streaming.
type bearerTokenInterceptor string

func (t bearerTokenInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, request connect.AnyRequest) (connect.AnyResponse, error) {
		request.Header().Set("Authorization", "Bearer "+string(t))
		return next(ctx, request)
	}
}

func (t bearerTokenInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+string(t))
		return conn
	}
}

func (bearerTokenInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// Client talks to one contextd sidecar. It is safe for concurrent use; close it when done.
type Client struct {
	transport        transport
	callTimeout      time.Duration
	retry            RetryPolicy
	conflictAttempts int
}

// Dial creates a Client for the sidecar at address ("host:port"; "" = DefaultAddress). Like
// grpc.NewClient it does not wait for the sidecar; use WaitReady for that.
func Dial(address string, opts ...Option) (*Client, error) {
	o := options{
		callTimeout: 30 * time.Second, retry: DefaultRetryPolicy, conflictAttempts: 10,
		maxReceiveBytes: DefaultMaxMessageBytes, maxSendBytes: DefaultMaxMessageBytes,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if address == "" {
		address = DefaultAddress
	}
	client := &Client{callTimeout: o.callTimeout, retry: o.retry, conflictAttempts: max(o.conflictAttempts, 1)}
	tlsConfig, err := o.tlsConfig()
	if err != nil {
		return nil, err
	}
	if o.connectClient != nil {
		scheme := "http://"
		httpClient := o.connectClient
		if tlsConfig != nil {
			scheme = "https://"
			if httpClient.Transport == nil {
				copied := *httpClient
				copied.Transport = &http.Transport{TLSClientConfig: tlsConfig, ForceAttemptHTTP2: true}
				httpClient = &copied
			}
		}
		connectOptions := []connect.ClientOption{connect.WithReadMaxBytes(o.maxReceiveBytes), connect.WithSendMaxBytes(o.maxSendBytes)}
		if o.token != "" {
			connectOptions = append(connectOptions, connect.WithInterceptors(bearerTokenInterceptor(o.token)))
		}
		client.transport = newConnectTransport(httpClient, scheme+address, connectOptions...)
		return client, nil
	}
	transportCredentials := insecure.NewCredentials()
	if tlsConfig != nil {
		transportCredentials = credentials.NewTLS(tlsConfig)
	}
	dialOptions := []grpc.DialOption{
		grpc.WithTransportCredentials(transportCredentials),
		// Reconnect quickly: the sidecar is on loopback, and an agent often starts before it (or
		// outlives a restart). grpc-go's default backoff grows from 1s to 120s.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(o.maxReceiveBytes), grpc.MaxCallSendMsgSize(o.maxSendBytes)),
	}
	if o.token != "" {
		dialOptions = append(dialOptions, grpc.WithPerRPCCredentials(bearerToken(o.token)))
	}
	dialOptions = append(dialOptions, o.dialOptions...)
	conn, err := grpc.NewClient(address, dialOptions...)
	if err != nil {
		return nil, fmt.Errorf("contextd: dial %s: %w", address, err)
	}
	client.transport = newGRPCTransport(conn)
	return client, nil
}

// Close releases the connection.
func (c *Client) Close() error {
	return c.transport.close()
}

// WaitReady blocks until the sidecar reports SERVING (its store is usable) or ctx ends, polling
// with the retry policy's backoff. Agents call it once at start, since the sidecar may start
// after them.
func (c *Client) WaitReady(ctx context.Context) error {
	var last error
	for retry := 1; ; retry++ {
		response, reason, err := c.transport.checkHealth(ctx, &healthpb.HealthCheckRequest{})
		switch {
		case err == nil && response.GetStatus() == healthpb.HealthCheckResponse_SERVING:
			return nil
		case err == nil && reason != "":
			last = fmt.Errorf("health is %s: %s", response.GetStatus(), reason)
		case err == nil:
			last = fmt.Errorf("health is %s", response.GetStatus())
		case last == nil || ctx.Err() == nil:
			// An attempt that ctx's end cut short says nothing new: keep what the sidecar last answered.
			last = err
		}
		if sleepErr := c.retry.sleep(ctx, retry); sleepErr != nil {
			return fmt.Errorf("contextd: sidecar not ready: %w (last: %v)", sleepErr, last)
		}
	}
}

// withCallTimeout bounds ctx by the client's call timeout, if any.
func (c *Client) withCallTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.callTimeout > 0 {
		return context.WithTimeout(ctx, c.callTimeout)
	}
	return context.WithCancel(ctx)
}

// unary runs one call under the client's deadline, retrying UNAVAILABLE when retryable.
func unary[Res any](c *Client, ctx context.Context, retryable bool, call func(context.Context) (*Res, error)) (*Res, error) {
	ctx, cancel := c.withCallTimeout(ctx)
	defer cancel()
	policy := c.retry
	if !retryable {
		policy.MaxAttempts = 1
	}
	var response *Res
	err := policy.do(ctx, func() (err error) {
		response, err = call(ctx)
		return err
	})
	return response, err
}

// GetState reads a conversation; an unknown one is an empty state at version 0.
func (c *Client) GetState(ctx context.Context, request *contextdv1.GetStateRequest) (*contextdv1.GetStateResponse, error) {
	return unary(c, ctx, true, func(ctx context.Context) (*contextdv1.GetStateResponse, error) {
		return c.transport.getState(ctx, request)
	})
}

// ReadMessages reads one page of a window of a segment's messages: the last request.Last, or the
// positions request.Start to request.End (the whole segment when neither is set), at most
// request.MaxBytes of messages a page (0 = 4 MiB; a larger message comes alone). Every page of a
// window is read at the first page's version; a version the sidecar no longer keeps is a
// *VersionConflictError. Retried on UNAVAILABLE like every read. MessagePages reads every page.
func (c *Client) ReadMessages(ctx context.Context, request *contextdv1.ReadMessagesRequest) (*contextdv1.ReadMessagesResponse, error) {
	return unary(c, ctx, true, func(ctx context.Context) (*contextdv1.ReadMessagesResponse, error) {
		return c.transport.readMessages(ctx, request)
	})
}

// MessagePages yields every page of the window request names, in order, each read at the version
// of the first (request.PageToken, when set, starts from that page). An error is yielded once,
// last. A conversation larger than GetState can answer (over the message limit) reads this way:
//
//	for page, err := range client.MessagePages(ctx, &contextdv1.ReadMessagesRequest{ConversationId: id}) {
//		if err != nil { return err }
//		messages = append(messages, page.GetMessages()...)
//	}
func (c *Client) MessagePages(ctx context.Context, request *contextdv1.ReadMessagesRequest) iter.Seq2[*contextdv1.ReadMessagesResponse, error] {
	return func(yield func(*contextdv1.ReadMessagesResponse, error) bool) {
		next := request
		for {
			page, err := c.ReadMessages(ctx, next)
			if err != nil {
				yield(nil, fmt.Errorf("contextd: read messages of %q: %w", request.GetConversationId(), err))
				return
			}
			if !yield(page, nil) || page.GetNextPageToken() == "" {
				return
			}
			next = &contextdv1.ReadMessagesRequest{ConversationId: request.GetConversationId(), MaxBytes: request.GetMaxBytes(), PageToken: page.GetNextPageToken()}
		}
	}
}

// Commit applies a batch of deltas atomically. The response carries the new version; the state
// too only when request.IncludeState is set. A stale expected version is a *VersionConflictError.
//
// A commit is never reported as failed when it may have applied. A request without an idempotency
// key is sent with a random one (the caller's message is not modified), and a commit whose outcome
// is unknown — UNAVAILABLE, DEADLINE_EXCEEDED, or an answer over the receive limit — is sent again
// with the same key, so it applies at most once; the sidecar answers a repeat from the key's record
// (Replayed). A retry after an answer over the receive limit asks for the version only. When the
// retries run out, the error is an *OutcomeUnknownError naming the key to retry with.
func (c *Client) Commit(ctx context.Context, request *contextdv1.CommitRequest) (*contextdv1.CommitResponse, error) {
	if request.GetIdempotencyKey() == "" {
		request = proto.CloneOf(request)
		request.IdempotencyKey = newIdempotencyKey()
	}
	return keyedWrite(c, ctx, request.GetIdempotencyKey(), func(ctx context.Context, lean bool) (*contextdv1.CommitResponse, error) {
		if lean && request.GetIncludeState() {
			request = proto.CloneOf(request)
			request.IncludeState = false
		}
		return c.transport.commit(ctx, request)
	})
}

// CommitWithRetry reads the conversation, asks apply for the deltas to commit on top of that
// state, and commits them with the state's version as the expected version. When another writer
// got there first (a version conflict) it reloads and calls apply again, up to the client's
// conflict attempts. apply must be safe to call more than once and return at least one delta; an
// error from apply stops the loop and is returned wrapped. A conversation over the message limit
// (GetState refuses it) is written with CommitWithRetryOnTail.
func (c *Client) CommitWithRetry(ctx context.Context, conversationID string, apply func(*contextdv1.ConversationState) ([]*contextdv1.Delta, error)) (*contextdv1.CommitResponse, error) {
	return c.commitWithRetry(ctx, conversationID, func(ctx context.Context) (*contextdv1.ConversationState, error) {
		loaded, err := c.GetState(ctx, &contextdv1.GetStateRequest{ConversationId: conversationID})
		return loaded.GetState(), err
	}, apply)
}

// CommitWithRetryOnTail is CommitWithRetry reading only what a writer of the history's tail
// needs, at any size of the conversation: apply gets the version, artifacts, experiences and tool
// definitions (GetState with WithoutMessages) and, as its History, the last historyTail history
// messages read at that version (ReadMessages); the other segments are left empty. 0 reads no
// messages. A commit landing between the two reads is a version conflict, retried as a stale
// commit is.
func (c *Client) CommitWithRetryOnTail(ctx context.Context, conversationID string, historyTail uint32, apply func(*contextdv1.ConversationState) ([]*contextdv1.Delta, error)) (*contextdv1.CommitResponse, error) {
	return c.commitWithRetry(ctx, conversationID, func(ctx context.Context) (*contextdv1.ConversationState, error) {
		loaded, err := c.GetState(ctx, &contextdv1.GetStateRequest{ConversationId: conversationID, WithoutMessages: true})
		if err != nil || historyTail == 0 {
			return loaded.GetState(), err
		}
		state := loaded.GetState()
		request := &contextdv1.ReadMessagesRequest{ConversationId: conversationID, Segment: contextdv1.Segment_SEGMENT_HISTORY, Last: historyTail, Version: proto.Int64(state.GetVersion())}
		for page, err := range c.MessagePages(ctx, request) {
			if err != nil {
				return nil, err
			}
			state.History = append(state.History, page.GetMessages()...)
		}
		return state, nil
	}, apply)
}

func (c *Client) commitWithRetry(ctx context.Context, conversationID string, read func(context.Context) (*contextdv1.ConversationState, error), apply func(*contextdv1.ConversationState) ([]*contextdv1.Delta, error)) (*contextdv1.CommitResponse, error) {
	var conflict error
	for attempt := 1; attempt <= c.conflictAttempts; attempt++ {
		if attempt > 1 {
			if err := c.retry.sleep(ctx, attempt-1); err != nil {
				return nil, fmt.Errorf("contextd: commit to %q: %w (after %v)", conversationID, err, conflict)
			}
		}
		state, err := read(ctx)
		if errors.Is(err, ErrVersionConflict) {
			conflict = err
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("contextd: load %q for commit: %w", conversationID, err)
		}
		deltas, err := apply(state)
		if err != nil {
			return nil, fmt.Errorf("contextd: prepare commit to %q at version %d: %w", conversationID, state.GetVersion(), err)
		}
		response, err := c.Commit(ctx, &contextdv1.CommitRequest{
			ConversationId:  conversationID,
			ExpectedVersion: proto.Int64(state.GetVersion()),
			Deltas:          deltas,
		})
		if err == nil {
			return response, nil
		}
		if !errors.Is(err, ErrVersionConflict) {
			return nil, fmt.Errorf("contextd: commit to %q: %w", conversationID, err)
		}
		conflict = err
	}
	return nil, fmt.Errorf("contextd: commit to %q: still conflicting after %d attempts: %w", conversationID, c.conflictAttempts, conflict)
}

// Clear empties a conversation. It is not retried: it has no idempotency key, and clearing twice
// would advance the version twice.
func (c *Client) Clear(ctx context.Context, request *contextdv1.ClearRequest) (*contextdv1.ClearResponse, error) {
	return unary(c, ctx, false, func(ctx context.Context) (*contextdv1.ClearResponse, error) {
		return c.transport.clear(ctx, request)
	})
}

// Fork copies request.ConversationId at request.AtVersion (nil = its latest version) into the new
// conversation request.NewConversationId, as its version 1 with ForkedFrom set; the source is not
// written. It is not retried: a retry of a fork that applied would find the new conversation and
// fail with codes.AlreadyExists (read it with GetState instead).
func (c *Client) Fork(ctx context.Context, request *contextdv1.ForkRequest) (*contextdv1.ForkResponse, error) {
	return unary(c, ctx, false, func(ctx context.Context) (*contextdv1.ForkResponse, error) {
		return c.transport.fork(ctx, request)
	})
}

// Rewind commits a new version whose state is the state at request.ToVersion (GetState with
// AtVersion reads it first), with request.ExpectedVersion checked as a commit's. Like Commit it adds
// a random idempotency key when the request has none and retries an unknown outcome with it.
func (c *Client) Rewind(ctx context.Context, request *contextdv1.RewindRequest) (*contextdv1.RewindResponse, error) {
	if request.GetIdempotencyKey() == "" {
		request = proto.CloneOf(request)
		request.IdempotencyKey = newIdempotencyKey()
	}
	return keyedWrite(c, ctx, request.GetIdempotencyKey(), func(ctx context.Context, _ bool) (*contextdv1.RewindResponse, error) {
		return c.transport.rewind(ctx, request)
	})
}

// ListConversations lists conversations, paged, by id or newest update first (Order), optionally
// only those with Labels or updated since UpdatedSinceUnixMs; a page may be short with a token.
func (c *Client) ListConversations(ctx context.Context, request *contextdv1.ListConversationsRequest) (*contextdv1.ListConversationsResponse, error) {
	return unary(c, ctx, true, func(ctx context.Context) (*contextdv1.ListConversationsResponse, error) {
		return c.transport.listConversations(ctx, request)
	})
}

// DeleteConversation deletes a conversation whole (with ExpectedVersion, only at that version:
// ErrVersionConflict otherwise); it then reads as never written. Not retried: a retry after an
// outcome-unknown failure may find it deleted (DeletedVersion 0).
func (c *Client) DeleteConversation(ctx context.Context, request *contextdv1.DeleteConversationRequest) (*contextdv1.DeleteConversationResponse, error) {
	return unary(c, ctx, false, func(ctx context.Context) (*contextdv1.DeleteConversationResponse, error) {
		return c.transport.deleteConversation(ctx, request)
	})
}

// DeleteConversations deletes one bounded page of the conversations under a prefix (a tenant's:
// "<tenant>/"); call again with NextPageToken until it is empty. Retried on UNAVAILABLE: deleting
// a page again deletes nothing more.
func (c *Client) DeleteConversations(ctx context.Context, request *contextdv1.DeleteConversationsRequest) (*contextdv1.DeleteConversationsResponse, error) {
	return unary(c, ctx, true, func(ctx context.Context) (*contextdv1.DeleteConversationsResponse, error) {
		return c.transport.deleteConversations(ctx, request)
	})
}

// ReadToolResult reads a slice of a stored tool result: what a model's read_tool_result call asks
// for after a compile sent the result as a preview (CompileRequest.LargeToolResults). Retried on
// UNAVAILABLE like every read.
func (c *Client) ReadToolResult(ctx context.Context, request *contextdv1.ReadToolResultRequest) (*contextdv1.ReadToolResultResponse, error) {
	return unary(c, ctx, true, func(ctx context.Context) (*contextdv1.ReadToolResultResponse, error) {
		return c.transport.readToolResult(ctx, request)
	})
}

// ReadWholeToolResult reads a stored tool result from its start to its end, slice by slice (each
// at most 1 MiB; no slice splits a character), and returns its text.
func (c *Client) ReadWholeToolResult(ctx context.Context, conversationID, toolCallID string) (string, error) {
	var text strings.Builder
	offset := uint64(0)
	for {
		slice, err := c.ReadToolResult(ctx, &contextdv1.ReadToolResultRequest{ConversationId: conversationID, ToolCallId: toolCallID, Offset: offset, MaxBytes: 1 << 20})
		if err != nil {
			return "", err
		}
		text.WriteString(slice.GetText())
		if slice.GetNextOffset() >= slice.GetTotalBytes() {
			return text.String(), nil
		}
		offset = slice.GetNextOffset()
	}
}

// RecallToolNames are the tools a compile with CompileRequest.RecallTools adds; AnswerRecallToolCall
// answers their calls.
var RecallToolNames = []string{"contextd_recall_message", "contextd_search_history"}

// IsRecallTool reports whether a model's tool call is one of contextd's recall tools.
func IsRecallTool(name string) bool {
	for _, known := range RecallToolNames {
		if name == known {
			return true
		}
	}
	return false
}

// Recall finds stored history messages by id or by a ranked text search, answered as a tool result
// text (RecallResponse.Text) with the hits beside it. Retried on UNAVAILABLE like every read.
func (c *Client) Recall(ctx context.Context, request *contextdv1.RecallRequest) (*contextdv1.RecallResponse, error) {
	return unary(c, ctx, true, func(ctx context.Context) (*contextdv1.RecallResponse, error) {
		return c.transport.recall(ctx, request)
	})
}

// AnswerRecallToolCall answers a model's call of one of contextd's recall tools (IsRecallTool): the
// text to send back as that call's tool result, from one Recall call. Give the call's name and its
// arguments as the JSON text the provider returned; arguments the tool does not take are an
// INVALID_ARGUMENT error naming them.
func (c *Client) AnswerRecallToolCall(ctx context.Context, conversationID, name, argumentsJSON string) (string, error) {
	response, err := c.Recall(ctx, &contextdv1.RecallRequest{ConversationId: conversationID, ToolCall: &contextdv1.RecallToolCall{Name: name, Arguments: argumentsJSON}})
	if err != nil {
		return "", err
	}
	return response.GetText(), nil
}

// Compile compiles a prompt. A compile that commits (request.Commit) is a write and is treated as
// Commit is: it gets a random idempotency key when it has none, and an unknown outcome is retried
// with the same key (after an answer over the receive limit, without request.Include). A compile
// that commits nothing is a read and is retried on UNAVAILABLE.
func (c *Client) Compile(ctx context.Context, request *contextdv1.CompileRequest) (*contextdv1.CompileResponse, error) {
	if request.GetCommit() == nil {
		return unary(c, ctx, true, func(ctx context.Context) (*contextdv1.CompileResponse, error) {
			return c.transport.compile(ctx, request)
		})
	}
	if request.GetCommit().GetIdempotencyKey() == "" {
		request = proto.CloneOf(request)
		request.Commit.IdempotencyKey = newIdempotencyKey()
	}
	return keyedWrite(c, ctx, request.GetCommit().GetIdempotencyKey(), func(ctx context.Context, lean bool) (*contextdv1.CompileResponse, error) {
		if lean && len(request.GetInclude()) > 0 {
			request = proto.CloneOf(request)
			request.Include = nil
		}
		return c.transport.compile(ctx, request)
	})
}

// CountTokens counts the tokens of messages with an estimator.
func (c *Client) CountTokens(ctx context.Context, request *contextdv1.CountTokensRequest) (*contextdv1.CountTokensResponse, error) {
	return unary(c, ctx, true, func(ctx context.Context) (*contextdv1.CountTokensResponse, error) {
		return c.transport.countTokens(ctx, request)
	})
}

// ReportUsage reports the provider's input token count for a compile, so later compiles with the
// same provider, model and estimator are budgeted with a corrected estimate: copy Provider, Model,
// Estimator and EstimatedTokens from the result's Calibration and set ActualInputTokens from the
// provider's usage (every input token, cached or not). With ConversationId the report is also
// recorded in the conversation's usage ledger (GetUsage), which requires ReportId (say, the
// provider's response id): such a report is retried, since the sidecar counts a report id once.
// Without them it is not retried: a repeated report would count twice.
func (c *Client) ReportUsage(ctx context.Context, request *contextdv1.ReportUsageRequest) (*contextdv1.ReportUsageResponse, error) {
	identified := request.GetConversationId() != "" && request.GetReportId() != ""
	return unary(c, ctx, identified, func(ctx context.Context) (*contextdv1.ReportUsageResponse, error) {
		return c.transport.reportUsage(ctx, request)
	})
}

// GetUsage reads a conversation's usage ledger: the totals of every report recorded for it and
// its newest reports (the rest counted in the totals only, EntriesRolledUp).
func (c *Client) GetUsage(ctx context.Context, request *contextdv1.GetUsageRequest) (*contextdv1.GetUsageResponse, error) {
	return unary(c, ctx, true, func(ctx context.Context) (*contextdv1.GetUsageResponse, error) {
		return c.transport.getUsage(ctx, request)
	})
}

// ListTenantUsage reads a tenant's usage totals and a page of its conversations' totals, by id
// (NextPageToken for the next page).
func (c *Client) ListTenantUsage(ctx context.Context, request *contextdv1.ListTenantUsageRequest) (*contextdv1.ListTenantUsageResponse, error) {
	return unary(c, ctx, true, func(ctx context.Context) (*contextdv1.ListTenantUsageResponse, error) {
		return c.transport.listTenantUsage(ctx, request)
	})
}

// Render renders a view of a stored or inline snapshot.
func (c *Client) Render(ctx context.Context, request *contextdv1.RenderRequest) (*contextdv1.RenderResponse, error) {
	return unary(c, ctx, true, func(ctx context.Context) (*contextdv1.RenderResponse, error) {
		return c.transport.render(ctx, request)
	})
}

func newIdempotencyKey() string {
	return "contextd-go-" + rand.Text()
}
