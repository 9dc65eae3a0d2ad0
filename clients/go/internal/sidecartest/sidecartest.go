// Package sidecartest starts real contextd and redis-server processes for Go tests.
package sidecartest

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Sidecar is a running contextd process.
type Sidecar struct {
	// Address is host:port of the one port serving gRPC, gRPC-Web and Connect.
	Address string
	cmd     *exec.Cmd
	exited  chan error
}

// RepoRoot is the contextd repository root, found from this file's location.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", "..", ".."))
}

// Start runs `node dist/src/main.js --port 0 args...` and waits until it listens. The process is
// stopped with SIGTERM when the test ends.
func Start(t testing.TB, args ...string) *Sidecar {
	t.Helper()
	main := filepath.Join(RepoRoot(), "dist", "src", "main.js")
	if _, err := os.Stat(main); err != nil {
		t.Fatalf("contextd is not built (%v): run `npm run build` first", err)
	}
	cmd := exec.Command("node", append([]string{main, "--port", "0"}, args...)...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start contextd: %v", err)
	}
	s := &Sidecar{cmd: cmd, exited: make(chan error, 1)}
	listening := make(chan string, 1)
	go func() {
		scanner := bufio.NewScanner(stdout)
		scanner.Buffer(make([]byte, 1<<20), 1<<20)
		for scanner.Scan() {
			var entry struct {
				Msg     string `json:"msg"`
				Address string `json:"address"`
			}
			if json.Unmarshal(scanner.Bytes(), &entry) == nil && entry.Msg == "contextd listening" {
				listening <- entry.Address
			}
		}
	}()
	go func() { s.exited <- cmd.Wait() }()
	select {
	case s.Address = <-listening:
	case err := <-s.exited:
		t.Fatalf("contextd exited before listening: %v", err)
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("contextd did not start within 15s")
	}
	t.Cleanup(func() { s.Stop(t) })
	return s
}

// URL is the base URL for Connect clients.
func (s *Sidecar) URL() string {
	return "http://" + s.Address
}

// Stop sends SIGTERM and waits for the exit; a second call is a no-op.
func (s *Sidecar) Stop(t testing.TB) {
	if s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.exited:
		if err != nil && !strings.Contains(err.Error(), "signal") {
			t.Errorf("contextd exit: %v", err)
		}
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		t.Error("contextd did not exit within 10s of SIGTERM")
	}
}

// StartWithRedis starts a redis-server and a contextd that stores conversations in it; both stop
// when the test ends.
func StartWithRedis(t testing.TB, args ...string) *Sidecar {
	t.Helper()
	redis := StartRedis(t)
	return Start(t, append([]string{"--redis-url", redis.URL}, args...)...)
}

// RunWithSidecar runs the tests and examples of m against one sidecar started for them, whose
// address it puts in CONTEXTD_ADDRESS (examples read it as an agent would), and returns the exit
// code for os.Exit. For a TestMain, where there is no testing.T yet.
func RunWithSidecar(m *testing.M) int {
	main := filepath.Join(RepoRoot(), "dist", "src", "main.js")
	cmd := exec.Command("node", main, "--port", "0")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		panic(err)
	}
	if err := cmd.Start(); err != nil {
		panic("start contextd (run `npm run build` first): " + err.Error())
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	scanner := bufio.NewScanner(stdout)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	address := ""
	for address == "" && scanner.Scan() {
		var entry struct{ Msg, Address string }
		if json.Unmarshal(scanner.Bytes(), &entry) == nil && entry.Msg == "contextd listening" {
			address = entry.Address
		}
	}
	if address == "" {
		panic("contextd exited before listening")
	}
	os.Setenv("CONTEXTD_ADDRESS", address)
	go func() {
		for scanner.Scan() {
		}
	}()
	return m.Run()
}
