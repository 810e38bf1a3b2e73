package idgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The shared behaviour scenarios (clients/vectors/scenarios.json, SCENARIOS.md): for each,
// the test kit's idgen-fake-nodes serves the scenario's nodes, a Client with those nodes and
// the scenario's timeouts runs its steps, and the fake nodes check what each node saw.

// scenarioTimeout bounds one scenario, from starting the fake nodes to their check.
const scenarioTimeout = 20 * time.Second

type scenarioFile struct {
	Doc       string     `json:"_doc"`
	Scenarios []scenario `json:"scenarios"`
}

type scenario struct {
	Name   string            `json:"name"`
	Doc    string            `json:"doc"`
	Nodes  []json.RawMessage `json:"nodes"`
	Client struct {
		ConnectTimeoutMs int64 `json:"connect_timeout_ms"`
		TimeoutMs        int64 `json:"timeout_ms"`
	} `json:"client"`
	Steps      []scenarioStep    `json:"steps"`
	NodesAfter []json.RawMessage `json:"nodes_after"`
}

// scenarioStep is one step: a call (Call, Count, Expect, Status), Kill, Revive or SleepMs.
type scenarioStep struct {
	Call    string  `json:"call"`
	Count   *int    `json:"count"`
	Expect  string  `json:"expect"`
	Status  *uint16 `json:"status"`
	Kill    *int    `json:"kill"`
	Revive  *int    `json:"revive"`
	SleepMs *int64  `json:"sleep_ms"`
}

// fakeNodesBin is $IDGEN_FAKE_NODES_BIN, else <repo>/target/debug/idgen-fake-nodes; the
// test fails (never skips) when it is missing.
func fakeNodesBin(t testing.TB) string {
	t.Helper()
	path := os.Getenv("IDGEN_FAKE_NODES_BIN")
	if path == "" {
		path = filepath.Join(repoRoot(t), "target", "debug", "idgen-fake-nodes")
	}
	if st, err := os.Stat(path); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		t.Fatalf("idgen-fake-nodes not found at %s: build it with `cargo build -p idgen-testkit --bin idgen-fake-nodes` or set IDGEN_FAKE_NODES_BIN", path)
	}
	return path
}

func loadScenarios(t testing.TB) (string, []scenario) {
	t.Helper()
	path := filepath.Join(repoRoot(t), "clients", "vectors", "scenarios.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields() // a step or setting this runner does not know is a failure
	var file scenarioFile
	if err := dec.Decode(&file); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return path, file.Scenarios
}

func TestBehaviourScenarios(t *testing.T) {
	bin := fakeNodesBin(t)
	path, all := loadScenarios(t)
	if len(all) < 15 {
		t.Fatalf("only %d scenarios in %s", len(all), path)
	}
	seen := map[string]bool{}
	for _, s := range all {
		s := s
		if s.Name == "" || seen[s.Name] {
			t.Errorf("scenario name %q is empty or repeated", s.Name)
			continue
		}
		seen[s.Name] = true
		t.Run(s.Name, func(t *testing.T) {
			done := make(chan error, 1)
			ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
			defer cancel()
			go func() { done <- runScenario(ctx, bin, path, s) }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(scenarioTimeout + 5*time.Second):
				t.Fatalf("took over %s", scenarioTimeout)
			}
		})
	}
}

// fakeNodes is a running idgen-fake-nodes: commands on its stdin, answers on its stdout.
type fakeNodes struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *lockedBuffer
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.TrimSpace(b.buf.String())
}

func startFakeNodes(ctx context.Context, bin, path, name string) (*fakeNodes, []string, error) {
	cmd := exec.CommandContext(ctx, bin, path, name) // killed at the scenario's deadline
	f := &fakeNodes{cmd: cmd, lines: make(chan string, 16), stderr: &lockedBuffer{}}
	cmd.Stderr = f.stderr
	var err error
	if f.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("starting %s: %v", bin, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f.lines <- sc.Text()
		}
		close(f.lines)
	}()
	first, err := f.read(ctx)
	if err != nil {
		f.stop()
		return nil, nil, err
	}
	words := strings.Fields(first)
	if len(words) < 2 || words[0] != "nodes" {
		f.stop()
		return nil, nil, fmt.Errorf("idgen-fake-nodes printed %q, not `nodes ADDR ...`", first)
	}
	return f, words[1:], nil
}

func (f *fakeNodes) read(ctx context.Context) (string, error) {
	select {
	case line, ok := <-f.lines:
		if !ok {
			return "", fmt.Errorf("idgen-fake-nodes ended; its stderr: %q", f.stderr.String())
		}
		return line, nil
	case <-ctx.Done():
		return "", fmt.Errorf("no answer from idgen-fake-nodes: %v", ctx.Err())
	}
}

// command sends one command and returns its one-line answer.
func (f *fakeNodes) command(ctx context.Context, cmd string) (string, error) {
	if _, err := io.WriteString(f.stdin, cmd+"\n"); err != nil {
		return "", fmt.Errorf("%s: %v", cmd, err)
	}
	return f.read(ctx)
}

// stop closes stdin (the fake nodes exit) and waits for the process, killing it after 5 s.
func (f *fakeNodes) stop() {
	f.stdin.Close()
	exited := make(chan struct{})
	go func() {
		for range f.lines { // drain, so that the reader goroutine ends
		}
		f.cmd.Wait()
		close(exited)
	}()
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		f.cmd.Process.Kill()
		<-exited
	}
}

// scenarioOutcome is the scenario vocabulary's name for what a call returned, with the
// status of a server_error; "other: ..." for an error the vocabulary has no name for.
func scenarioOutcome(err error) (string, Status) {
	var se *ServerError
	switch {
	case err == nil:
		return "ok", 0
	case errors.Is(err, ErrInvalidArgument):
		return "invalid_argument", 0
	case errors.Is(err, ErrUnavailable), errors.Is(err, ErrProtocol):
		return "unavailable", 0 // every node failed (a NoNodeError), or the only one tried
	case errors.As(err, &se):
		if se.RetryElsewhere() || se.Closes() {
			return "unavailable", 0 // a node failure, from the only node that could be tried
		}
		return "server_error", se.Status
	default:
		return fmt.Sprintf("other: %T", err), 0
	}
}

func runScenario(ctx context.Context, bin, path string, s scenario) error {
	fake, addrs, err := startFakeNodes(ctx, bin, path, s.Name)
	if err != nil {
		return err
	}
	defer fake.stop()
	if len(addrs) != len(s.Nodes) {
		return fmt.Errorf("%d nodes started, the scenario has %d", len(addrs), len(s.Nodes))
	}
	c, err := NewClient(Options{
		Nodes:          addrs,
		ConnectTimeout: time.Duration(s.Client.ConnectTimeoutMs) * time.Millisecond,
		RequestTimeout: time.Duration(s.Client.TimeoutMs) * time.Millisecond,
	})
	if err != nil {
		return err
	}
	defer c.Close()
	report := func() string {
		r, err := fake.command(ctx, "report")
		if err != nil {
			return err.Error()
		}
		return r
	}
	for i, step := range s.Steps {
		switch {
		case step.Kill != nil || step.Revive != nil:
			cmd := fmt.Sprintf("revive %d", deref(step.Revive))
			if step.Kill != nil {
				cmd = fmt.Sprintf("kill %d", *step.Kill)
			}
			answer, err := fake.command(ctx, cmd)
			if err != nil {
				return fmt.Errorf("step %d: %v", i, err)
			}
			if answer != "ok" {
				return fmt.Errorf("step %d: %s: idgen-fake-nodes answered %q", i, cmd, answer)
			}
		case step.SleepMs != nil:
			select {
			case <-time.After(time.Duration(*step.SleepMs) * time.Millisecond):
			case <-ctx.Done():
				return fmt.Errorf("step %d: %v", i, ctx.Err())
			}
		case step.Call == "next_ids" && step.Count != nil:
			want := step.Expect
			var wantStatus Status
			if want == "server_error" {
				if step.Status == nil {
					return fmt.Errorf("step %d: server_error without a status", i)
				}
				wantStatus = Status(*step.Status)
			}
			ids, err := c.NextIDs(ctx, *step.Count)
			if err == nil && len(ids) != *step.Count {
				return fmt.Errorf("step %d: %d IDs for a count of %d", i, len(ids), *step.Count)
			}
			got, status := scenarioOutcome(err)
			if got != want || status != wantStatus {
				return fmt.Errorf("step %d: next_ids(%d): expected %s, got %s (error: %v); the nodes saw %s",
					i, *step.Count, outcomeText(want, wantStatus), outcomeText(got, status), err, report())
			}
		default:
			return fmt.Errorf("step %d: unknown step %+v", i, step)
		}
	}
	answer, err := fake.command(ctx, "check")
	if err != nil {
		return err
	}
	if answer != "ok" {
		return fmt.Errorf("check: %s; the nodes saw %s", answer, report())
	}
	return nil
}

func outcomeText(outcome string, status Status) string {
	if status != 0 {
		return fmt.Sprintf("%s %d", outcome, uint16(status))
	}
	return outcome
}

func deref(p *int) int {
	if p == nil {
		return -1
	}
	return *p
}
