// Package installed runs the Go examples as a user would: from a module outside the repository
// that requires the client and the generated API by their import paths (scripts/install-clients.sh
// makes that module, with `go mod edit -replace` onto the checkout). An example that only works
// inside the repository, or a file the modules do not hold, fails here. The README's and docs' Go
// snippets run in test/docs-snippets.test.ts, in a module their own install lines make.
package installed

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// repoRoot is the checkout whose dist/ the sidecar runs from and whose README and examples run.
func repoRoot(t *testing.T) string {
	root := os.Getenv("CONTEXTD_REPO_ROOT")
	if root == "" {
		t.Fatal("CONTEXTD_REPO_ROOT is not set (scripts/test-installed.sh sets it)")
	}
	return root
}

// startSidecar runs the built sidecar on a free port, in memory, and returns its address.
func startSidecar(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("node", filepath.Join(repoRoot(t), "dist", "src", "main.js"), "--port", "0")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	listening := make(chan string, 1)
	go func() {
		scanner := bufio.NewScanner(stdout)
		scanner.Buffer(make([]byte, 1<<20), 1<<20)
		for scanner.Scan() {
			var entry struct{ Msg, Address string }
			if json.Unmarshal(scanner.Bytes(), &entry) == nil && entry.Msg == "contextd listening" {
				listening <- entry.Address
			}
		}
	}()
	select {
	case address := <-listening:
		return address
	case <-time.After(20 * time.Second):
		t.Fatal("contextd did not start within 20s")
		return ""
	}
}

// program is one Go main package to build in this module and run.
type program struct{ name, source string }

func programs(t *testing.T) []program {
	root := repoRoot(t)
	var all []program
	mains, err := filepath.Glob(filepath.Join(root, "examples", "go", "*", "main.go"))
	if err != nil || len(mains) == 0 {
		t.Fatalf("no examples/go/*/main.go (%v)", err)
	}
	for _, main := range mains {
		source, err := os.ReadFile(main)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, program{name: "example_" + filepath.Base(filepath.Dir(main)), source: string(source)})
	}
	return all
}

// Every example builds here and runs twice against a real sidecar: a second run finds the first
// one's conversations in the store, so each must use fresh ids.
func TestExamplesRunTwice(t *testing.T) {
	address := startSidecar(t)
	module, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range programs(t) {
		t.Run(p.name, func(t *testing.T) {
			if !strings.Contains(p.source, "package main") {
				t.Fatalf("%s is not a whole program (no `package main`): a reader cannot run it", p.name)
			}
			dir := filepath.Join(module, "programs", p.name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(p.source), 0o644); err != nil {
				t.Fatal(err)
			}
			binary := filepath.Join(t.TempDir(), p.name)
			build := exec.Command("go", "build", "-o", binary, "./programs/"+p.name)
			build.Dir = module
			// The module lists only the two contextd modules; let go add what they need.
			build.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
			if output, err := build.CombinedOutput(); err != nil {
				t.Fatalf("go build: %v\n%s", err, output)
			}
			for run := 1; run <= 2; run++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				cmd := exec.CommandContext(ctx, binary)
				cmd.Env = append(os.Environ(), "CONTEXTD_ADDRESS="+address)
				output, err := cmd.CombinedOutput()
				cancel()
				if err != nil {
					t.Fatalf("run %d: %v\n%s", run, err, output)
				}
				if len(strings.TrimSpace(string(output))) == 0 {
					t.Fatalf("run %d printed nothing", run)
				}
			}
		})
	}
}
