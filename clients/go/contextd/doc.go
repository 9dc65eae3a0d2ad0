// Package contextd is the Go client of the contextd sidecar, a context engine for LLM agents: the
// generated contextd.v1 API (module github.com/contextd-dev/contextd/gen/go) plus what every
// agent needs around it — dial defaults matched to the sidecar's limits, per-call deadlines,
// retries with backoff, an idempotency key on every write and retries of writes whose outcome is
// unknown, compare-and-retry commits, typed errors, message builders, stream iterators, a one-call
// agent turn (Client.Turn) and summaries over CompileSession (Client.CompileWithSummaries, and
// Client.CompileWithEvidence for a summarizer that wants the request's template and facts).
//
// Dial connects lazily over gRPC (HTTP/2) or, with WithConnectProtocol, the Connect protocol;
// WithBearerToken and WithTLS / WithTLSCAFile talk to a sidecar started with
// --auth-tokens-file and --tls-cert. WaitReady waits until the sidecar and its store serve.
//
// An agent step is one Turn: it commits what the agent produced since its last model call (the
// assistant's answer, tool results, the next user message) and returns the compiled prompt for the
// next call, rendered for the provider the request names:
//
//	result, err := client.Turn(ctx, request, version, contextd.AppendUser(contextd.UserText("Hi")))
//	if err != nil { ... }
//	body := result.GetRendered().GetJson() // the provider's request body
//	version = result.GetCommittedVersion()
//
// The unary methods of Client mirror the generated RPCs (same request and response messages), so
// the proto documentation (proto/contextd/v1) applies unchanged. Errors match sentinels with
// errors.Is (ErrVersionConflict, ErrInvalidArgument, ...); a stale expected version is a
// *VersionConflictError with the current version, a write whose retries ran out an
// *OutcomeUnknownError naming its idempotency key.
package contextd
