package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/contextd-dev/contextd/clients/go/contextd"
	"github.com/contextd-dev/contextd/clients/go/internal/sidecartest"
)

// dial connects a client to the sidecar and closes it when the test ends.
func dial(t *testing.T, address string, opts ...contextd.Option) *contextd.Client {
	t.Helper()
	client, err := contextd.Dial(address, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestWaitReadyOverGRPCAndConnect(t *testing.T) {
	sidecar := sidecartest.StartWithRedis(t)
	for name, opts := range map[string][]contextd.Option{
		"grpc":    nil,
		"connect": {contextd.WithConnectProtocol(&http.Client{})},
	} {
		t.Run(name, func(t *testing.T) {
			if err := dial(t, sidecar.Address, opts...).WaitReady(testContext(t)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestWaitReadyRidesOutALateSidecar(t *testing.T) {
	port := sidecartest.FreePort(t)
	client := dial(t, fmt.Sprintf("127.0.0.1:%d", port))
	ready := make(chan error, 1)
	go func() { ready <- client.WaitReady(testContext(t)) }()
	sidecartest.Start(t, "--port", fmt.Sprint(port))
	if err := <-ready; err != nil {
		t.Fatalf("WaitReady did not see the sidecar that started late: %v", err)
	}
}

func TestWaitReadyEndsWithItsContext(t *testing.T) {
	client := dial(t, fmt.Sprintf("127.0.0.1:%d", sidecartest.FreePort(t)))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := client.WaitReady(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitReady with nothing listening = %v, want the context's deadline error", err)
	}
}

func TestWaitReadyNamesWhyTheSidecarIsNotServing(t *testing.T) {
	// The sidecar's Redis does not listen: health says why, and WaitReady's error quotes it.
	sidecar := sidecartest.Start(t, "--redis-url", fmt.Sprintf("redis://127.0.0.1:%d", sidecartest.FreePort(t)), "--health-interval-ms", "100")
	for name, opts := range map[string][]contextd.Option{
		"grpc":    nil,
		"connect": {contextd.WithConnectProtocol(&http.Client{})},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			err := dial(t, sidecar.Address, opts...).WaitReady(ctx)
			if err == nil || !regexp.MustCompile(`health is NOT_SERVING: .*(ECONNREFUSED|connect|unavailable)`).MatchString(err.Error()) {
				t.Fatalf("WaitReady = %v, want NOT_SERVING with the store's connection error", err)
			}
		})
	}
}
