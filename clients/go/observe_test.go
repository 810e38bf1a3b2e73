package idgen

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// recordLogger is a Logger keeping every record.
type recordLogger struct {
	mu      sync.Mutex
	records []string // "LEVEL msg k=v k=v"
}

func (l *recordLogger) log(level, msg string, args []any) {
	var b strings.Builder
	b.WriteString(level + " " + msg)
	for i := 0; i+1 < len(args); i += 2 {
		fmt.Fprintf(&b, " %v=%v", args[i], args[i+1])
	}
	l.mu.Lock()
	l.records = append(l.records, b.String())
	l.mu.Unlock()
}
func (l *recordLogger) Debug(msg string, args ...any) { l.log("DEBUG", msg, args) }
func (l *recordLogger) Info(msg string, args ...any)  { l.log("INFO", msg, args) }
func (l *recordLogger) Warn(msg string, args ...any)  { l.log("WARN", msg, args) }
func (l *recordLogger) Error(msg string, args ...any) { l.log("ERROR", msg, args) }

// find returns the records that start with prefix and hold every part.
func (l *recordLogger) find(prefix string, parts ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
next:
	for _, r := range l.records {
		if !strings.HasPrefix(r, prefix) {
			continue
		}
		for _, p := range parts {
			if !strings.Contains(r, p) {
				continue next
			}
		}
		out = append(out, r)
	}
	return out
}

func (l *recordLogger) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.records, "\n")
}

// recordHooks keeps every event.
type recordHooks struct {
	mu     sync.Mutex
	events []Event
}

func (h *recordHooks) OnEvent(e Event) {
	h.mu.Lock()
	h.events = append(h.events, e)
	h.mu.Unlock()
}

func (h *recordHooks) named(name string) []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Event
	for _, e := range h.events {
		if e.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// A failover shows in the logger (at warning) and in the hook, with the events around it:
// the refusal, the node marked down, the connect to the next node and the call's request.
func TestAFailoverIsLoggedAndReachesTheHook(t *testing.T) {
	bad := newFake(t, defaultHello(), "unavailable") // answers 300 to everything
	good := newFake(t, defaultHello(), "serve")
	log, hooks := &recordLogger{}, &recordHooks{}
	c := newClient(t, Options{Nodes: []string{bad.addr, good.addr}, Logger: log, Hooks: hooks})
	ids, err := c.NextIDs(bg(t, 5*time.Second), 3)
	if err != nil || len(ids) != 3 {
		t.Fatalf("NextIDs: %v %v", ids, err)
	}
	for _, want := range []struct {
		prefix string
		parts  []string
	}{
		{"DEBUG connect", []string{"node=" + bad.addr, "version=2"}},
		{"INFO refused", []string{"node=" + bad.addr, "op=ids", "status=300", "status_name="}},
		{"WARN node_down", []string{"node=" + bad.addr}},
		{"WARN failover", []string{"from=" + bad.addr, "to=" + good.addr, "reason="}},
		{"DEBUG connect", []string{"node=" + good.addr, "address=" + good.addr}},
		{"DEBUG request", []string{"op=ids", "count=3", "node=" + good.addr, "outcome=ok"}},
	} {
		if len(log.find(want.prefix, want.parts...)) != 1 {
			t.Errorf("no one %q record with %v in:\n%s", want.prefix, want.parts, log.all())
		}
	}
	fo := hooks.named(EventFailover)
	if len(fo) != 1 || fo[0].From != bad.addr || fo[0].To != good.addr || fo[0].Reason == "" {
		t.Fatalf("failover events: %+v", fo)
	}
	rq := hooks.named(EventRequest)
	if len(rq) != 1 || rq[0].Node != good.addr || rq[0].Outcome != "ok" || rq[0].Count != 3 || rq[0].Op != "ids" || rq[0].Duration <= 0 {
		t.Fatalf("request events: %+v", rq)
	}
	rf := hooks.named(EventRefused)
	if len(rf) != 1 || rf[0].Status != StatusUnavailableLease || rf[0].Message == "" {
		t.Fatalf("refused events: %+v", rf)
	}
	if nd := hooks.named(EventNodeDown); len(nd) != 1 || nd[0].Node != bad.addr {
		t.Fatalf("node_down events: %+v", nd)
	}
}

// connect_failed, then node_up when the node serves again; a failed call's request event
// names its outcome.
func TestConnectFailedAndNodeUpEvents(t *testing.T) {
	addr := unusedAddr(t)
	hooks := &recordHooks{}
	c := newClient(t, Options{Nodes: []string{addr}, Hooks: HookFunc(hooks.OnEvent), BackoffMin: 20 * time.Millisecond})
	if _, err := c.NextIDs(bg(t, 5*time.Second), 1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("nothing listens: %v", err)
	}
	if cf := hooks.named(EventConnectFailed); len(cf) != 1 || cf[0].Node != addr || cf[0].Err == nil {
		t.Fatalf("connect_failed events: %+v", cf)
	}
	if rq := hooks.named(EventRequest); len(rq) != 1 || rq[0].Outcome != "unavailable" || rq[0].Err == nil || rq[0].Node != "" {
		t.Fatalf("request events: %+v", rq)
	}
	startFake(t, &fakeNode{addr: addr, hello: defaultHello(), mode: "serve", status: StatusUnavailableLease})
	time.Sleep(50 * time.Millisecond) // past the back-off
	if _, err := c.NextIDs(bg(t, 5*time.Second), 1); err != nil {
		t.Fatal(err)
	}
	if up := hooks.named(EventNodeUp); len(up) != 1 || up[0].Node != addr {
		t.Fatalf("node_up events: %+v", up)
	}
	if cn := hooks.named(EventConnect); len(cn) != 1 || cn[0].Version != 2 || cn[0].Address != addr {
		t.Fatalf("connect events: %+v", cn)
	}
}

// A hook that panics on every event changes no call; its first panic is logged once.
func TestAPanickingHookIsIgnoredAndLoggedOnce(t *testing.T) {
	bad := newFake(t, defaultHello(), "unavailable")
	good := newFake(t, defaultHello(), "serve")
	log := &recordLogger{}
	calls := 0
	var mu sync.Mutex
	c := newClient(t, Options{Nodes: []string{bad.addr, good.addr}, Logger: log, Prefetch: 16,
		Hooks: HookFunc(func(e Event) {
			mu.Lock()
			calls++
			mu.Unlock()
			panic("hook bug: " + e.Name)
		})})
	ctx := bg(t, 5*time.Second)
	for i := 0; i < 20; i++ {
		if _, err := c.NextIDs(ctx, 2); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if _, err := c.NextID(ctx); err != nil {
			t.Fatalf("NextID %d: %v", i, err)
		}
	}
	if _, err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	n := calls
	mu.Unlock()
	if n < 20 {
		t.Fatalf("the hook ran %d times", n)
	}
	if got := log.find("WARN hook_panicked", "panic=hook bug: "); len(got) != 1 {
		t.Fatalf("hook_panicked records: %q\n%s", got, log.all())
	}
	if c.obs.hookPanics.Load() != int64(n) {
		t.Fatalf("%d panics counted, %d hook calls", c.obs.hookPanics.Load(), n)
	}
}

// Without a logger and hooks nothing is built; a nil *T logger counts as none.
func TestNilLoggerAndHooksAreNone(t *testing.T) {
	var l *recordLogger
	var h *recordHooks
	good := newFake(t, defaultHello(), "serve")
	c := newClient(t, Options{Nodes: []string{good.addr}, Logger: l, Hooks: h})
	if c.obs.on() {
		t.Fatal("a nil *recordLogger and nil *recordHooks must count as none")
	}
	if _, err := c.NextIDs(bg(t, 5*time.Second), 1); err != nil {
		t.Fatal(err)
	}
}
