package e2e

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/contextd-dev/contextd/clients/go/contextd"
	"github.com/contextd-dev/contextd/clients/go/internal/sidecartest"
	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
)

// startSecuredSidecar runs a sidecar with TLS on and one bearer token; it returns the sidecar,
// its certificates and the token.
func startSecuredSidecar(t *testing.T) (*sidecartest.Sidecar, sidecartest.Certificates, string) {
	t.Helper()
	certificates := sidecartest.MakeCertificates(t)
	token := "token-" + rand.Text()
	tokensFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokensFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sidecar := sidecartest.Start(t, append(certificates.TLSArgs(), "--auth-tokens-file", tokensFile)...)
	return sidecar, certificates, token
}

var clientProtocols = map[string][]contextd.Option{
	"grpc":    nil,
	"connect": {contextd.WithConnectProtocol(nil)},
}

// A token and TLS are one option each, over both clientProtocols, for unary calls and streams alike.
func TestBearerTokenOverTLS(t *testing.T) {
	sidecar, certificates, token := startSecuredSidecar(t)
	for name, protocol := range clientProtocols {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			client, err := contextd.Dial(sidecar.Address, append([]contextd.Option{
				contextd.WithTLSCAFile(certificates.CAFile), contextd.WithBearerToken(token),
			}, protocol...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			if err := client.WaitReady(ctx); err != nil {
				t.Fatal(err)
			}
			id := "tls-" + name + "-" + rand.Text()
			committed, err := client.Commit(ctx, &contextdv1.CommitRequest{ConversationId: id,
				Deltas: []*contextdv1.Delta{contextd.AppendUser(contextd.UserText("over TLS"))}})
			if err != nil {
				t.Fatal(err)
			}
			if committed.GetVersion() != 1 {
				t.Fatalf("version %d, want 1", committed.GetVersion())
			}
			for change, err := range client.Watch(ctx, &contextdv1.WatchRequest{ConversationId: id}) {
				if err != nil {
					t.Fatal(err)
				}
				if change.GetVersion() != 1 {
					t.Fatalf("watched version %d, want 1", change.GetVersion())
				}
				break
			}
		})
	}
}

func TestWithoutTheTokenIsUnauthenticated(t *testing.T) {
	sidecar, certificates, _ := startSecuredSidecar(t)
	for name, protocol := range clientProtocols {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for _, token := range []string{"", "not-the-token-0123456789"} {
				options := append([]contextd.Option{contextd.WithTLSCAFile(certificates.CAFile)}, protocol...)
				if token != "" {
					options = append(options, contextd.WithBearerToken(token))
				}
				client, err := contextd.Dial(sidecar.Address, options...)
				if err != nil {
					t.Fatal(err)
				}
				_, err = client.GetState(ctx, &contextdv1.GetStateRequest{ConversationId: "tls-denied"})
				client.Close()
				if !errors.Is(err, contextd.ErrUnauthenticated) {
					t.Fatalf("token %q: err = %v, want ErrUnauthenticated", token, err)
				}
			}
		})
	}
}

// A client in cleartext, or one that trusts only the system roots, cannot talk to a sidecar whose
// certificate a private CA signed.
func TestTLSIsVerified(t *testing.T) {
	sidecar, _, token := startSecuredSidecar(t)
	for name, protocol := range clientProtocols {
		for label, option := range map[string][]contextd.Option{
			"cleartext":    nil,
			"system roots": {contextd.WithTLS(nil)},
		} {
			t.Run(name+"/"+label, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				options := append(append([]contextd.Option{contextd.WithBearerToken(token), contextd.WithRetryPolicy(contextd.RetryPolicy{MaxAttempts: 1})}, option...), protocol...)
				client, err := contextd.Dial(sidecar.Address, options...)
				if err != nil {
					t.Fatal(err)
				}
				defer client.Close()
				_, err = client.GetState(ctx, &contextdv1.GetStateRequest{ConversationId: "tls-refused"})
				if err == nil {
					t.Fatal("the call succeeded")
				}
				if label == "system roots" && !strings.Contains(err.Error(), "certificate") {
					t.Fatalf("err = %v, want a certificate verification error", err)
				}
			})
		}
	}
}

func TestTLSCAFileErrors(t *testing.T) {
	if _, err := contextd.Dial("", contextd.WithTLSCAFile(filepath.Join(t.TempDir(), "missing.pem"))); err == nil || !strings.Contains(err.Error(), "TLS CA file") {
		t.Fatalf("missing file: err = %v", err)
	}
	empty := filepath.Join(t.TempDir(), "empty.pem")
	if err := os.WriteFile(empty, []byte("no certificate here"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := contextd.Dial("", contextd.WithTLSCAFile(empty)); err == nil || !strings.Contains(err.Error(), "holds no PEM certificate") {
		t.Fatalf("empty file: err = %v", err)
	}
}

// A sidecar on loopback may check tokens without TLS: the token goes in cleartext there.
func TestBearerTokenInCleartext(t *testing.T) {
	token := "token-" + rand.Text()
	tokensFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokensFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	sidecar := sidecartest.Start(t, "--auth-tokens-file", tokensFile)
	for name, protocol := range clientProtocols {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			client, err := contextd.Dial(sidecar.Address, append([]contextd.Option{contextd.WithBearerToken(token)}, protocol...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			if _, err := client.GetState(ctx, &contextdv1.GetStateRequest{ConversationId: "cleartext-token"}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
