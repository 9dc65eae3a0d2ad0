package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/contextd-dev/contextd/clients/go/internal/sidecartest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestHealthServingOverGRPC(t *testing.T) {
	sidecar := sidecartest.Start(t)
	conn, err := grpc.NewClient(sidecar.Address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, service := range []string{"", "contextd.v1.ContextService", "contextd.v1.ConversationService"} {
		response, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("Check(%q): %v", service, err)
		}
		if response.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Check(%q) = %v, want SERVING", service, response.GetStatus())
		}
	}
}
