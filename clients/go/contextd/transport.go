package contextd

import (
	"context"
	"io"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
	"github.com/contextd-dev/contextd/gen/go/contextd/v1/contextdv1connect"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// receiver is one server stream, whichever protocol carries it. Recv returns io.EOF when the
// stream ends normally and a converted error otherwise.
type receiver[T any] interface {
	Recv() (*T, error)
}

// transport is the set of RPCs the Client uses, implemented once over grpc-go and once over
// connect-go. Errors are already converted with newError.
type transport interface {
	getState(context.Context, *contextdv1.GetStateRequest) (*contextdv1.GetStateResponse, error)
	commit(context.Context, *contextdv1.CommitRequest) (*contextdv1.CommitResponse, error)
	clear(context.Context, *contextdv1.ClearRequest) (*contextdv1.ClearResponse, error)
	fork(context.Context, *contextdv1.ForkRequest) (*contextdv1.ForkResponse, error)
	rewind(context.Context, *contextdv1.RewindRequest) (*contextdv1.RewindResponse, error)
	listConversations(context.Context, *contextdv1.ListConversationsRequest) (*contextdv1.ListConversationsResponse, error)
	deleteConversation(context.Context, *contextdv1.DeleteConversationRequest) (*contextdv1.DeleteConversationResponse, error)
	deleteConversations(context.Context, *contextdv1.DeleteConversationsRequest) (*contextdv1.DeleteConversationsResponse, error)
	exportConversations(context.Context, *contextdv1.ExportConversationsRequest) (receiver[contextdv1.ExportConversationsResponse], error)
	readToolResult(context.Context, *contextdv1.ReadToolResultRequest) (*contextdv1.ReadToolResultResponse, error)
	recall(context.Context, *contextdv1.RecallRequest) (*contextdv1.RecallResponse, error)
	readMessages(context.Context, *contextdv1.ReadMessagesRequest) (*contextdv1.ReadMessagesResponse, error)
	watch(context.Context, *contextdv1.WatchRequest) (receiver[contextdv1.WatchResponse], error)
	compile(context.Context, *contextdv1.CompileRequest) (*contextdv1.CompileResponse, error)
	compileStream(context.Context, *contextdv1.CompileStreamRequest) (receiver[contextdv1.CompileStreamResponse], error)
	compileSession(context.Context) (sessionStream, error)
	countTokens(context.Context, *contextdv1.CountTokensRequest) (*contextdv1.CountTokensResponse, error)
	reportUsage(context.Context, *contextdv1.ReportUsageRequest) (*contextdv1.ReportUsageResponse, error)
	getUsage(context.Context, *contextdv1.GetUsageRequest) (*contextdv1.GetUsageResponse, error)
	listTenantUsage(context.Context, *contextdv1.ListTenantUsageRequest) (*contextdv1.ListTenantUsageResponse, error)
	render(context.Context, *contextdv1.RenderRequest) (*contextdv1.RenderResponse, error)
	watchEvents(context.Context, *contextdv1.WatchEventsRequest) (receiver[contextdv1.WatchEventsResponse], error)
	// checkHealth also returns the contextd-health-reason header: why the sidecar is not SERVING.
	checkHealth(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, string, error)
	close() error
}

// grpcTransport speaks gRPC over HTTP/2 cleartext with grpc-go.
type grpcTransport struct {
	conn          *grpc.ClientConn
	conversations contextdv1.ConversationServiceClient
	contexts      contextdv1.ContextServiceClient
	telemetry     contextdv1.TelemetryServiceClient
	health        healthpb.HealthClient
}

func newGRPCTransport(conn *grpc.ClientConn) *grpcTransport {
	return &grpcTransport{
		conn:          conn,
		conversations: contextdv1.NewConversationServiceClient(conn),
		contexts:      contextdv1.NewContextServiceClient(conn),
		telemetry:     contextdv1.NewTelemetryServiceClient(conn),
		health:        healthpb.NewHealthClient(conn),
	}
}

// grpcUnary calls one unary stub and converts its error with the call's trailer, which carries
// the current version of a conflict.
func grpcUnary[Req, Res any](ctx context.Context, stub func(context.Context, *Req, ...grpc.CallOption) (*Res, error), request *Req) (*Res, error) {
	var trailer metadata.MD
	response, err := stub(ctx, request, grpc.Trailer(&trailer))
	return response, newError(err, trailer)
}

// grpcReceiver converts the errors of a grpc-go server stream.
type grpcReceiver[T any] struct{ stream grpc.ServerStreamingClient[T] }

func (r grpcReceiver[T]) Recv() (*T, error) {
	message, err := r.stream.Recv()
	if err == io.EOF {
		return nil, err
	}
	if err != nil {
		return nil, newError(err, r.stream.Trailer())
	}
	return message, nil
}

func grpcStream[Req, Res any](ctx context.Context, stub func(context.Context, *Req, ...grpc.CallOption) (grpc.ServerStreamingClient[Res], error), request *Req) (receiver[Res], error) {
	stream, err := stub(ctx, request)
	if err != nil {
		return nil, newError(err, nil)
	}
	return grpcReceiver[Res]{stream}, nil
}

func (t *grpcTransport) getState(ctx context.Context, r *contextdv1.GetStateRequest) (*contextdv1.GetStateResponse, error) {
	return grpcUnary(ctx, t.conversations.GetState, r)
}

func (t *grpcTransport) commit(ctx context.Context, r *contextdv1.CommitRequest) (*contextdv1.CommitResponse, error) {
	return grpcUnary(ctx, t.conversations.Commit, r)
}

func (t *grpcTransport) clear(ctx context.Context, r *contextdv1.ClearRequest) (*contextdv1.ClearResponse, error) {
	return grpcUnary(ctx, t.conversations.Clear, r)
}

func (t *grpcTransport) fork(ctx context.Context, r *contextdv1.ForkRequest) (*contextdv1.ForkResponse, error) {
	return grpcUnary(ctx, t.conversations.Fork, r)
}

func (t *grpcTransport) rewind(ctx context.Context, r *contextdv1.RewindRequest) (*contextdv1.RewindResponse, error) {
	return grpcUnary(ctx, t.conversations.Rewind, r)
}

func (t *grpcTransport) listConversations(ctx context.Context, r *contextdv1.ListConversationsRequest) (*contextdv1.ListConversationsResponse, error) {
	return grpcUnary(ctx, t.conversations.ListConversations, r)
}

func (t *grpcTransport) deleteConversation(ctx context.Context, r *contextdv1.DeleteConversationRequest) (*contextdv1.DeleteConversationResponse, error) {
	return grpcUnary(ctx, t.conversations.DeleteConversation, r)
}

func (t *grpcTransport) deleteConversations(ctx context.Context, r *contextdv1.DeleteConversationsRequest) (*contextdv1.DeleteConversationsResponse, error) {
	return grpcUnary(ctx, t.conversations.DeleteConversations, r)
}

func (t *grpcTransport) exportConversations(ctx context.Context, r *contextdv1.ExportConversationsRequest) (receiver[contextdv1.ExportConversationsResponse], error) {
	return grpcStream(ctx, t.conversations.ExportConversations, r)
}

func (t *grpcTransport) readToolResult(ctx context.Context, r *contextdv1.ReadToolResultRequest) (*contextdv1.ReadToolResultResponse, error) {
	return grpcUnary(ctx, t.conversations.ReadToolResult, r)
}

func (t *grpcTransport) recall(ctx context.Context, r *contextdv1.RecallRequest) (*contextdv1.RecallResponse, error) {
	return grpcUnary(ctx, t.conversations.Recall, r)
}

func (t *grpcTransport) readMessages(ctx context.Context, r *contextdv1.ReadMessagesRequest) (*contextdv1.ReadMessagesResponse, error) {
	return grpcUnary(ctx, t.conversations.ReadMessages, r)
}

func (t *grpcTransport) watch(ctx context.Context, r *contextdv1.WatchRequest) (receiver[contextdv1.WatchResponse], error) {
	return grpcStream(ctx, t.conversations.Watch, r)
}

func (t *grpcTransport) compile(ctx context.Context, r *contextdv1.CompileRequest) (*contextdv1.CompileResponse, error) {
	return grpcUnary(ctx, t.contexts.Compile, r)
}

func (t *grpcTransport) compileStream(ctx context.Context, r *contextdv1.CompileStreamRequest) (receiver[contextdv1.CompileStreamResponse], error) {
	return grpcStream(ctx, t.contexts.CompileStream, r)
}

func (t *grpcTransport) countTokens(ctx context.Context, r *contextdv1.CountTokensRequest) (*contextdv1.CountTokensResponse, error) {
	return grpcUnary(ctx, t.contexts.CountTokens, r)
}

func (t *grpcTransport) reportUsage(ctx context.Context, r *contextdv1.ReportUsageRequest) (*contextdv1.ReportUsageResponse, error) {
	return grpcUnary(ctx, t.contexts.ReportUsage, r)
}

func (t *grpcTransport) getUsage(ctx context.Context, r *contextdv1.GetUsageRequest) (*contextdv1.GetUsageResponse, error) {
	return grpcUnary(ctx, t.conversations.GetUsage, r)
}

func (t *grpcTransport) listTenantUsage(ctx context.Context, r *contextdv1.ListTenantUsageRequest) (*contextdv1.ListTenantUsageResponse, error) {
	return grpcUnary(ctx, t.conversations.ListTenantUsage, r)
}

func (t *grpcTransport) render(ctx context.Context, r *contextdv1.RenderRequest) (*contextdv1.RenderResponse, error) {
	return grpcUnary(ctx, t.contexts.Render, r)
}

func (t *grpcTransport) watchEvents(ctx context.Context, r *contextdv1.WatchEventsRequest) (receiver[contextdv1.WatchEventsResponse], error) {
	return grpcStream(ctx, t.telemetry.WatchEvents, r)
}

func (t *grpcTransport) checkHealth(ctx context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, string, error) {
	var header, trailer metadata.MD
	response, err := t.health.Check(ctx, r, grpc.Header(&header), grpc.Trailer(&trailer))
	if err != nil {
		return nil, "", newError(err, trailer)
	}
	return response, strings.Join(header.Get(healthReasonHeader), "; "), nil
}

func (t *grpcTransport) close() error { return t.conn.Close() }

// connectTransport speaks the Connect protocol (binary protobuf over HTTP/1.1 or HTTP/2)
// with connect-go, for networks where only plain HTTP/1.1 gets through (proxies, gateways).
type connectTransport struct {
	httpClient    *http.Client
	conversations contextdv1connect.ConversationServiceClient
	contexts      contextdv1connect.ContextServiceClient
	telemetry     contextdv1connect.TelemetryServiceClient
	health        *connect.Client[healthpb.HealthCheckRequest, healthpb.HealthCheckResponse]
}

func newConnectTransport(httpClient *http.Client, baseURL string, options ...connect.ClientOption) *connectTransport {
	return &connectTransport{
		httpClient:    httpClient,
		conversations: contextdv1connect.NewConversationServiceClient(httpClient, baseURL, options...),
		contexts:      contextdv1connect.NewContextServiceClient(httpClient, baseURL, options...),
		telemetry:     contextdv1connect.NewTelemetryServiceClient(httpClient, baseURL, options...),
		// grpc-go ships no connect-go health client; the generic client speaks to the same route.
		health: connect.NewClient[healthpb.HealthCheckRequest, healthpb.HealthCheckResponse](
			httpClient, baseURL+"/grpc.health.v1.Health/Check", options...),
	}
}

func connectUnary[Req, Res any](ctx context.Context, stub func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error), request *Req) (*Res, error) {
	response, err := stub(ctx, connect.NewRequest(request))
	if err != nil {
		return nil, newError(err, nil)
	}
	return response.Msg, nil
}

// connectReceiver adapts connect-go's Receive/Msg/Err stream to Recv, ending with io.EOF like
// grpc-go.
type connectReceiver[T any] struct {
	stream *connect.ServerStreamForClient[T]
}

func (r connectReceiver[T]) Recv() (*T, error) {
	if r.stream.Receive() {
		return r.stream.Msg(), nil
	}
	err := r.stream.Err()
	closeErr := r.stream.Close()
	if err == nil {
		err = closeErr
	}
	if err == nil {
		return nil, io.EOF
	}
	return nil, newError(err, nil)
}

func connectStream[Req, Res any](ctx context.Context, stub func(context.Context, *connect.Request[Req]) (*connect.ServerStreamForClient[Res], error), request *Req) (receiver[Res], error) {
	stream, err := stub(ctx, connect.NewRequest(request))
	if err != nil {
		return nil, newError(err, nil)
	}
	return connectReceiver[Res]{stream}, nil
}

func (t *connectTransport) getState(ctx context.Context, r *contextdv1.GetStateRequest) (*contextdv1.GetStateResponse, error) {
	return connectUnary(ctx, t.conversations.GetState, r)
}

func (t *connectTransport) commit(ctx context.Context, r *contextdv1.CommitRequest) (*contextdv1.CommitResponse, error) {
	return connectUnary(ctx, t.conversations.Commit, r)
}

func (t *connectTransport) clear(ctx context.Context, r *contextdv1.ClearRequest) (*contextdv1.ClearResponse, error) {
	return connectUnary(ctx, t.conversations.Clear, r)
}

func (t *connectTransport) fork(ctx context.Context, r *contextdv1.ForkRequest) (*contextdv1.ForkResponse, error) {
	return connectUnary(ctx, t.conversations.Fork, r)
}

func (t *connectTransport) rewind(ctx context.Context, r *contextdv1.RewindRequest) (*contextdv1.RewindResponse, error) {
	return connectUnary(ctx, t.conversations.Rewind, r)
}

func (t *connectTransport) listConversations(ctx context.Context, r *contextdv1.ListConversationsRequest) (*contextdv1.ListConversationsResponse, error) {
	return connectUnary(ctx, t.conversations.ListConversations, r)
}

func (t *connectTransport) deleteConversation(ctx context.Context, r *contextdv1.DeleteConversationRequest) (*contextdv1.DeleteConversationResponse, error) {
	return connectUnary(ctx, t.conversations.DeleteConversation, r)
}

func (t *connectTransport) deleteConversations(ctx context.Context, r *contextdv1.DeleteConversationsRequest) (*contextdv1.DeleteConversationsResponse, error) {
	return connectUnary(ctx, t.conversations.DeleteConversations, r)
}

func (t *connectTransport) exportConversations(ctx context.Context, r *contextdv1.ExportConversationsRequest) (receiver[contextdv1.ExportConversationsResponse], error) {
	return connectStream(ctx, t.conversations.ExportConversations, r)
}

func (t *connectTransport) readToolResult(ctx context.Context, r *contextdv1.ReadToolResultRequest) (*contextdv1.ReadToolResultResponse, error) {
	return connectUnary(ctx, t.conversations.ReadToolResult, r)
}

func (t *connectTransport) recall(ctx context.Context, r *contextdv1.RecallRequest) (*contextdv1.RecallResponse, error) {
	return connectUnary(ctx, t.conversations.Recall, r)
}

func (t *connectTransport) readMessages(ctx context.Context, r *contextdv1.ReadMessagesRequest) (*contextdv1.ReadMessagesResponse, error) {
	return connectUnary(ctx, t.conversations.ReadMessages, r)
}

func (t *connectTransport) watch(ctx context.Context, r *contextdv1.WatchRequest) (receiver[contextdv1.WatchResponse], error) {
	return connectStream(ctx, t.conversations.Watch, r)
}

func (t *connectTransport) compile(ctx context.Context, r *contextdv1.CompileRequest) (*contextdv1.CompileResponse, error) {
	return connectUnary(ctx, t.contexts.Compile, r)
}

func (t *connectTransport) compileStream(ctx context.Context, r *contextdv1.CompileStreamRequest) (receiver[contextdv1.CompileStreamResponse], error) {
	return connectStream(ctx, t.contexts.CompileStream, r)
}

func (t *connectTransport) countTokens(ctx context.Context, r *contextdv1.CountTokensRequest) (*contextdv1.CountTokensResponse, error) {
	return connectUnary(ctx, t.contexts.CountTokens, r)
}

func (t *connectTransport) reportUsage(ctx context.Context, r *contextdv1.ReportUsageRequest) (*contextdv1.ReportUsageResponse, error) {
	return connectUnary(ctx, t.contexts.ReportUsage, r)
}

func (t *connectTransport) getUsage(ctx context.Context, r *contextdv1.GetUsageRequest) (*contextdv1.GetUsageResponse, error) {
	return connectUnary(ctx, t.conversations.GetUsage, r)
}

func (t *connectTransport) listTenantUsage(ctx context.Context, r *contextdv1.ListTenantUsageRequest) (*contextdv1.ListTenantUsageResponse, error) {
	return connectUnary(ctx, t.conversations.ListTenantUsage, r)
}

func (t *connectTransport) render(ctx context.Context, r *contextdv1.RenderRequest) (*contextdv1.RenderResponse, error) {
	return connectUnary(ctx, t.contexts.Render, r)
}

func (t *connectTransport) watchEvents(ctx context.Context, r *contextdv1.WatchEventsRequest) (receiver[contextdv1.WatchEventsResponse], error) {
	return connectStream(ctx, t.telemetry.WatchEvents, r)
}

func (t *connectTransport) checkHealth(ctx context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, string, error) {
	response, err := t.health.CallUnary(ctx, connect.NewRequest(r))
	if err != nil {
		return nil, "", newError(err, nil)
	}
	return response.Msg, response.Header().Get(healthReasonHeader), nil
}

// healthReasonHeader is the response header in which the sidecar says why it is not SERVING.
const healthReasonHeader = "contextd-health-reason"

func (t *connectTransport) close() error {
	t.httpClient.CloseIdleConnections()
	return nil
}
