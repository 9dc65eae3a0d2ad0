package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/contextd-dev/contextd/clients/go/internal/sidecartest"
)

// The README points users at examples/go; it must keep running against a real sidecar.
func TestExampleAgentLoopRuns(t *testing.T) {
	sidecar := sidecartest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, "go", "run", "./agent_loop")
	run.Dir = filepath.Join(sidecartest.RepoRoot(), "examples", "go")
	run.Env = append(run.Environ(), "CONTEXTD_ADDRESS="+sidecar.Address)
	output, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("go run ./agent_loop: %v\n%s", err, output)
	}
	want := "user: What's the weather in Oslo right now?\nassistant: Here is what I found: 4°C, light rain; 09:30\n"
	if !strings.Contains(string(output), want) {
		t.Fatalf("the example's tool round did not come back through the compiled prompt; output:\n%s", output)
	}
}
