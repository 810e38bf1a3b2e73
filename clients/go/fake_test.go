package idgen

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// Failover, statuses, deadlines and bad servers, against fake nodes: what the shared
// behaviour scenarios (scenarios_test.go) cannot say: versions, pipelining, concurrency,
// timing, error shapes and codes outside the status table.

func TestServesFromAFakeNodeWithRangesAndFallsBackToVersion1(t *testing.T) {
	for _, version := range []uint16{3, 2, 1} {
		h := defaultHello()
		h.Version = version
		f := newFake(t, h, "serve")
		c := newClient(t, Options{Nodes: []string{f.addr}})
		ids, err := c.NextIDs(bg(t, 5*time.Second), 100)
		if err != nil || len(ids) != 100 || !increasing(ids) {
			t.Fatalf("v%d: %v %d", version, err, len(ids))
		}
		if st := nodeState(c, f.addr); st.Hello == nil || st.Hello.Version != version {
			t.Fatalf("v%d: negotiated %+v", version, st.Hello)
		}
		if _, err := c.Ping(bg(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	// A client limited to version 1 sends GET_IDS to a version 2 node.
	f := newFake(t, defaultHello(), "serve")
	c := newClient(t, Options{Nodes: []string{f.addr}, MaxVersion: 1})
	if _, err := c.NextIDs(bg(t, 5*time.Second), 10); err != nil {
		t.Fatal(err)
	}
	if f.versions[0] != 1 {
		t.Fatalf("offered up to %d", f.versions[0])
	}
}

// 300 leaves the connection open: after the backoff the same connection is used again
// (that 300 fails over is a shared scenario's).
func TestStatus300KeepsTheConnection(t *testing.T) {
	bad := newFake(t, defaultHello(), "unavailable")
	only := newClient(t, Options{Nodes: []string{bad.addr}, BackoffMin: 150 * time.Millisecond, BackoffMax: 150 * time.Millisecond})
	for i := 0; i < 3; i++ {
		_, err := only.NextID(bg(t, 5*time.Second))
		var se *ServerError
		if !errors.Is(err, StatusUnavailableLease) || !errors.As(err, &se) || !se.RetryElsewhere() {
			t.Fatalf("got %v", err)
		}
		if st := nodeState(only, bad.addr); !st.Down || !st.Connected {
			t.Fatalf("state %+v", st)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if conns, _ := bad.counts(); conns != 1 {
		t.Fatalf("%d connections, want 1", conns)
	}
}

func TestStatus305InASplitBatchNeverHandsOutTheAnsweredPart(t *testing.T) {
	h := defaultHello()
	h.MaxBatch = 10
	f := startFake(t, &fakeNode{hello: h, mode: "range_changed", serveBefore: 1})
	c := newClient(t, Options{Nodes: []string{f.addr}, BackoffMin: 5 * time.Second, BackoffMax: 5 * time.Second})
	ids, err := c.NextIDs(bg(t, 5*time.Second), 25) // 10 + 10 + 5: the first part answered, then 305
	if err != nil || len(ids) != 25 || !increasing(ids) {
		t.Fatalf("%v %v", err, ids)
	}
	f.mu.Lock()
	partial, second := f.idsByConn[0], f.idsByConn[1]
	f.mu.Unlock()
	if len(partial) != 10 {
		t.Fatalf("the fake answered %d first", len(partial))
	}
	for _, id := range ids {
		for _, p := range partial {
			if id == p {
				t.Fatalf("ID %d of the partly answered batch handed out", id)
			}
		}
	}
	if len(second) != 25 || second[0] != ids[0] {
		t.Fatalf("second connection %v", second)
	}
}

func TestStatus305WithRequestsInFlightFromManyGoroutines(t *testing.T) {
	f := startFake(t, &fakeNode{hello: defaultHello(), mode: "range_changed", serveBefore: 10})
	c := newClient(t, Options{Nodes: []string{f.addr}, BackoffMin: 5 * time.Second, BackoffMax: 5 * time.Second})
	results := runGoroutines(t, 8, 30*time.Second, func(g int) ([]uint64, error) {
		var all []uint64
		for k := 0; k < 25; k++ {
			ids, err := c.NextIDs(bg(t, 5*time.Second), 2)
			if err != nil {
				return nil, err
			}
			all = append(all, ids...)
		}
		return all, nil
	})
	if n := checkUnique(t, results...); n != 400 {
		t.Fatalf("%d IDs", n)
	}
	if conns, _ := f.counts(); conns != 2 || c.Stats().NodeFailures != 0 {
		t.Fatalf("connections %d, stats %+v", conns, c.Stats())
	}
}

func TestShuttingDownFailsOverEveryRequestInFlight(t *testing.T) {
	bad := newFake(t, defaultHello(), "unavailable")
	bad.status = StatusShuttingDown
	good := newFake(t, defaultHello(), "serve")
	c := newClient(t, Options{Nodes: []string{bad.addr, good.addr}, BackoffMin: 5 * time.Second, BackoffMax: 5 * time.Second})
	results := runGoroutines(t, 8, 30*time.Second, func(int) ([]uint64, error) {
		return c.NextIDs(bg(t, 5*time.Second), 3)
	})
	checkUnique(t, results...)
	if s := c.Stats(); s.NodeFailures != 1 {
		t.Fatalf("one failure of one node counts once: %+v", s)
	}
}

// Codes outside the status table follow their class (the scenarios use known codes only):
// an unknown 2xx fails the call at once and leaves the node up, an unknown 3xx or a code
// that closes the connection (1xx, 5xx, above 5xx) is a node failure and fails over.
func TestStatusesOutsideTheTableFollowTheirClass(t *testing.T) {
	for _, tc := range []struct {
		status   Status
		failover bool
	}{{250, false}, {399, true}, {150, true}, {599, true}, {StatusBadFrame, true}} {
		bad := newFake(t, defaultHello(), "unavailable")
		bad.status = tc.status
		other := newFake(t, defaultHello(), "serve")
		c := newClient(t, Options{Nodes: []string{bad.addr, other.addr}, BackoffMin: 5 * time.Second, BackoffMax: 5 * time.Second})
		ids, err := c.NextIDs(bg(t, 5*time.Second), 3)
		st := nodeState(c, bad.addr)
		if tc.failover {
			if err != nil || len(ids) != 3 || !st.Down || !errors.Is(st.LastError, tc.status) || c.Stats().Failovers != 1 {
				t.Fatalf("%s: %v %v, state %+v", tc.status, ids, err, st)
			}
			continue
		}
		var se *ServerError
		if !errors.As(err, &se) || se.Status != tc.status || se.RetryElsewhere() || !errors.Is(err, tc.status) {
			t.Fatalf("%s: got %v", tc.status, err)
		}
		if conns, _ := other.counts(); conns != 0 || c.Stats().Failovers != 0 || st.Down {
			t.Fatalf("%s must not fail over nor mark the node down: %+v", tc.status, st)
		}
	}
}

func TestGarbageIsAProtocolErrorAndMarksTheNodeDown(t *testing.T) {
	g := newFake(t, defaultHello(), "garbage")
	c := newClient(t, Options{Nodes: []string{g.addr}, BackoffMin: 5 * time.Second, BackoffMax: 5 * time.Second})
	_, err := c.NextID(bg(t, 5*time.Second))
	var pe *ProtocolError
	if !errors.As(err, &pe) || pe.Status != StatusBadFrame || !errors.Is(err, ErrProtocol) {
		t.Fatalf("got %v", err)
	}
	st := nodeState(c, g.addr)
	if !st.Down || st.Connected {
		t.Fatalf("state %+v", st)
	}
	_, err = c.NextID(bg(t, 5*time.Second))
	var none *NoNodeError
	if !errors.As(err, &none) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("while backing off: %v", err)
	}
}

func TestTheContextBoundsACallWithoutMarkingTheNodeDown(t *testing.T) {
	silent := newFake(t, defaultHello(), "silent")
	c := newClient(t, Options{Nodes: []string{silent.addr}, RequestTimeout: 10 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.NextID(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("%v after %s", err, time.Since(start))
	}
	if st := nodeState(c, silent.addr); st.Down || !st.Connected {
		t.Fatalf("a caller's deadline is not a node failure: %+v", st)
	}
	cctx, ccancel := context.WithCancel(context.Background())
	go func() { time.Sleep(100 * time.Millisecond); ccancel() }()
	if _, err := c.Ping(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancel: %v", err)
	}
	// A context already done fails at once, even before any connection exists.
	c2 := newClient(t, Options{Nodes: []string{silent.addr}})
	done, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if _, err := c2.NextID(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("done context: %v", err)
	}
}

// dial bounds the handshake with a watcher goroutine that puts a deadline in the past on
// the socket when the dial's context ends, and the context is cancelled as soon as the dial
// returns. A watcher that starts late (a loaded machine; the hook makes it late every time)
// then sees both its stop signal and the context done: whatever it picks, the open
// connection must keep no deadline, or its first write or read fails with an i/o timeout
// and a healthy node is marked down.
func TestALateDialWatcherLeavesNoDeadlineOnTheConnection(t *testing.T) {
	testHookDialWatcher = func() { time.Sleep(50 * time.Millisecond) }
	t.Cleanup(func() { testHookDialWatcher = nil })
	f := newFake(t, defaultHello(), "serve")
	const clients = 12 // a watcher picks the context half the time: 2^-12 to miss it
	cs := make([]*Client, clients)
	for i := range cs {
		cs[i] = newClient(t, Options{Nodes: []string{f.addr}, BackoffMin: 5 * time.Second, BackoffMax: 5 * time.Second})
	}
	runGoroutines(t, clients, 30*time.Second, func(g int) ([]uint64, error) {
		_, err := cs[g].Layout(bg(t, 5*time.Second))
		return nil, err
	})
	time.Sleep(150 * time.Millisecond) // every watcher has made its choice
	results := runGoroutines(t, clients, 30*time.Second, func(g int) ([]uint64, error) {
		if _, err := cs[g].Ping(bg(t, 5*time.Second)); err != nil {
			return nil, err
		}
		return cs[g].NextIDs(bg(t, 5*time.Second), 3)
	})
	checkUnique(t, results...)
	for g, c := range cs {
		st := nodeState(c, f.addr)
		if s := c.Stats(); s.Connects != 1 || s.NodeFailures != 0 || st.Down || st.LastError != nil {
			t.Fatalf("client %d: the connection failed: stats %+v, state %+v", g, s, st)
		}
	}
}

// Writes have no deadline of their own: a node that reads slowly (its socket buffer full
// of pipelined requests, the client's write waiting on it far longer than RequestTimeout)
// but keeps answering is not down.
func TestANodeThatReadsSlowlyButAnswersIsNotDown(t *testing.T) {
	h := defaultHello()
	h.MaxBatch = 1 // one frame per ID: 6 000 frames written at once
	slow := newFake(t, h, "slow_reader")
	other := newFake(t, h, "serve")
	const n = 6000
	timeout := 300 * time.Millisecond
	c := newClient(t, Options{Nodes: []string{slow.addr, other.addr}, RequestTimeout: timeout,
		BackoffMin: 5 * time.Second, BackoffMax: 5 * time.Second})
	shrinkSendBuffer(t, c, slow.addr)
	start := time.Now()
	ids, err := c.NextIDs(bg(t, 60*time.Second), n)
	took := time.Since(start)
	if err != nil || len(ids) != n || !increasing(ids) {
		t.Fatalf("%v, %d IDs (%s, node %+v)", err, len(ids), took, nodeState(c, slow.addr))
	}
	if min := time.Duration(n/slowReadEvery) * slowReadPause; took < min || took < 2*timeout {
		t.Fatalf("the node read %d requests in %s: not slowly", n, took)
	}
	s := c.Stats()
	if conns, _ := other.counts(); conns != 0 || s.Connects != 1 || s.NodeFailures != 0 || s.Failovers != 0 || nodeState(c, slow.addr).Down {
		t.Fatalf("the connection to a node that reads slowly was given up: %+v, %+v", s, nodeState(c, slow.addr))
	}
}

// shrinkSendBuffer connects c to addr and gives the connection a small socket send buffer
// (loopback's is large enough to take megabytes of requests at once), so that a long
// pipeline of requests makes the client's write wait on the node.
func shrinkSendBuffer(t *testing.T, c *Client, addr string) {
	t.Helper()
	if _, err := c.Layout(bg(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.nodes {
		if n.addr != addr {
			continue
		}
		n.mu.Lock()
		cc := n.conn
		n.mu.Unlock()
		if cc == nil {
			t.Fatalf("%s: not connected", addr)
		}
		if err := cc.nc.(*net.TCPConn).SetWriteBuffer(4096); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("no node %s", addr)
}

// A node that stops reading altogether (the client's write blocked on it) and so owes
// answers it never sends is down after RequestTimeout, and the call fails over.
func TestANodeThatStopsReadingIsDownAfterRequestTimeout(t *testing.T) {
	h := defaultHello()
	h.MaxBatch = 1
	deaf := newFake(t, h, "deaf")
	good := newFake(t, h, "serve")
	timeout := 300 * time.Millisecond
	c := newClient(t, Options{Nodes: []string{deaf.addr, good.addr}, RequestTimeout: timeout,
		BackoffMin: 5 * time.Second, BackoffMax: 5 * time.Second})
	shrinkSendBuffer(t, c, deaf.addr)
	start := time.Now()
	ids, err := c.NextIDs(bg(t, 30*time.Second), 20000)
	took := time.Since(start)
	if err != nil || len(ids) != 20000 || took > timeout+5*time.Second {
		t.Fatalf("%v after %s", err, took)
	}
	st := nodeState(c, deaf.addr)
	if !st.Down || st.Connected || st.LastError == nil || !strings.Contains(st.LastError.Error(), "no answer within") {
		t.Fatalf("state %+v", st)
	}
	if c.Stats().Failovers != 1 {
		t.Fatalf("stats %+v", c.Stats())
	}
}

func TestAllNodesDownIsANoNodeErrorListingEachNode(t *testing.T) {
	a, b := unusedAddr(t), unusedAddr(t)
	c := newClient(t, Options{Nodes: []string{a, b}, BackoffMin: 5 * time.Second, BackoffMax: 5 * time.Second})
	_, err := c.NextID(bg(t, 5*time.Second))
	var none *NoNodeError
	if !errors.As(err, &none) || len(none.Errors) != 2 || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v", err)
	}
	for addr, e := range none.Errors {
		var ue *UnavailableError
		if !errors.As(e, &ue) || ue.Node != addr {
			t.Fatalf("%s: %v", addr, e)
		}
	}
	start := time.Now()
	_, err = c.NextID(bg(t, 5*time.Second))
	if !errors.As(err, &none) || len(none.RetryIn) != 2 || time.Since(start) > 500*time.Millisecond ||
		!strings.Contains(err.Error(), "retried in") {
		t.Fatalf("backing off: %v", err)
	}
}

func TestBackoffDoublesAndIsCapped(t *testing.T) {
	dead := unusedAddr(t)
	c := newClient(t, Options{Nodes: []string{dead}, BackoffMin: 200 * time.Millisecond, BackoffMax: 600 * time.Millisecond})
	for k, delay := range []time.Duration{200, 400, 600, 600} {
		delay *= time.Millisecond
		if _, err := c.NextID(bg(t, 5*time.Second)); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("got %v", err)
		}
		st := nodeState(c, dead)
		if st.Failures != k+1 || st.RetryIn > delay || st.RetryIn < delay-150*time.Millisecond {
			t.Fatalf("attempt %d: %+v", k, st)
		}
		var none *NoNodeError
		if _, err := c.NextID(bg(t, 5*time.Second)); !errors.As(err, &none) {
			t.Fatalf("skipped while backing off: %v", err)
		}
		time.Sleep(delay + 50*time.Millisecond)
	}
}

func TestANodeWithAnotherLayoutIsRefused(t *testing.T) {
	good := newFake(t, defaultHello(), "serve")
	odd := defaultHello()
	odd.EpochMs = 12345
	other := newFake(t, odd, "serve")
	c := newClient(t, Options{Nodes: []string{good.addr, other.addr}})
	if _, err := c.NextID(bg(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	good.kill()
	_, err := c.NextID(bg(t, 5*time.Second))
	var none *NoNodeError
	if !errors.As(err, &none) || !strings.Contains(none.Errors[other.addr].Error(), "layout") {
		t.Fatalf("got %v", err)
	}
}

func TestAKilledNodeFailsOverEveryCallInFlight(t *testing.T) {
	doomed := newFake(t, defaultHello(), "serve")
	survivor := newFake(t, defaultHello(), "serve")
	survivor.nextID = 1 << 55
	c := newClient(t, Options{Nodes: []string{doomed.addr, survivor.addr}, BackoffMin: 5 * time.Second, BackoffMax: 5 * time.Second})
	var once sync.Once
	results := runGoroutines(t, 8, 60*time.Second, func(g int) ([]uint64, error) {
		var all []uint64
		for k := 0; k < 200; k++ {
			ids, err := c.NextIDs(bg(t, 5*time.Second), 7)
			if err != nil {
				return nil, err
			}
			all = append(all, ids...)
			if k == 50 {
				once.Do(doomed.kill)
			}
		}
		return all, nil
	})
	checkUnique(t, results...)
	if !nodeState(c, doomed.addr).Down || c.Stats().Failovers < 1 {
		t.Fatalf("%+v %+v", c.Nodes(), c.Stats())
	}
}

func TestClosedClientAndBadOptions(t *testing.T) {
	f := newFake(t, defaultHello(), "serve")
	c, err := NewClient(Options{Nodes: []string{f.addr}, Prefetch: 100})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.NextID(bg(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	c.Close()
	for _, call := range []func() error{
		func() error { _, err := c.NextID(bg(t, time.Second)); return err },
		func() error { _, err := c.NextIDs(bg(t, time.Second), 3); return err },
		func() error { _, err := c.Ping(bg(t, time.Second)); return err },
	} {
		if err := call(); !errors.Is(err, ErrClosed) {
			t.Fatalf("after Close: %v", err)
		}
	}
	for _, o := range []Options{
		{},
		{Nodes: []string{"nohost"}},
		{Nodes: []string{"h:0"}},
		{Nodes: []string{"a:1", "a:1"}},
		{Nodes: []string{"a:1"}, RequestTimeout: -1},
		{Nodes: []string{"a:1"}, BackoffMin: 2 * time.Second, BackoffMax: time.Second},
		{Nodes: []string{"a:1"}, Prefetch: -1},
		{Nodes: []string{"a:1"}, Prefetch: 10, LowWater: 10},
		{Nodes: []string{"a:1"}, MaxVersion: 6},
		{Nodes: []string{"a:1"}, SequencePrefetch: -1},
		{Nodes: []string{"a:1"}, SequencePrefetch: MaxValuesPerCall + 1},
		{Nodes: []string{"a:1"}, SequencePrefetch: 10, MaxVersion: 2},
	} {
		if _, err := NewClient(o); err == nil {
			t.Errorf("accepted %+v", o)
		}
	}
}

// A count of 0 is refused as in every idgen client, like a negative one or one above the
// per-call bound: ErrInvalidArgument, nothing sent (not even a connection opened).
func TestACountOutside1ToTheBoundIsRefusedBeforeSending(t *testing.T) {
	f := newFake(t, seqHello(), "serve")
	f.addSeq("orders", SequenceDense, 1)
	for _, prefetch := range []int{0, 10} {
		c := newClient(t, Options{Nodes: []string{f.addr}, Prefetch: prefetch, SequencePrefetch: prefetch})
		for _, n := range []int{0, -1, maxIDsPerCall + 1} {
			ids, err := c.NextIDs(bg(t, time.Second), n)
			if !errors.Is(err, ErrInvalidArgument) || ids != nil || !strings.Contains(err.Error(), "must be in 1..=") {
				t.Errorf("NextIDs(%d), prefetch %d: %v %v", n, prefetch, ids, err)
			}
		}
		for _, n := range []int{0, -1, MaxValuesPerCall + 1} {
			vs, err := c.NextValues(bg(t, time.Second), "orders", n)
			if !errors.Is(err, ErrInvalidArgument) || vs != nil || !strings.Contains(err.Error(), "must be in 1..=") {
				t.Errorf("NextValues(%d), prefetch %d: %v %v", n, prefetch, vs, err)
			}
		}
	}
	if conns, reqs := f.counts(); conns != 0 || reqs != 0 {
		t.Fatalf("something was sent: %d connections, %d requests", conns, reqs)
	}
}

func TestPrefetchPoolNeverHandsOutAnIDTwice(t *testing.T) {
	f := newFake(t, defaultHello(), "serve")
	c := newClient(t, Options{Nodes: []string{f.addr}, Prefetch: 500, LowWater: 100})
	results := runGoroutines(t, 16, 30*time.Second, func(int) ([]uint64, error) {
		var all []uint64
		for k := 0; k < 1000; k++ {
			id, err := c.NextID(bg(t, 5*time.Second))
			if err != nil {
				return nil, err
			}
			all = append(all, id)
		}
		return all, nil
	})
	if n := checkUnique(t, results...); n != 16000 {
		t.Fatalf("%d", n)
	}
	s := c.Stats()
	if s.PrefetchServed != 16000 || s.PrefetchRefills < 16000/500 {
		t.Fatalf("stats %+v", s)
	}
	// A pool whose node is gone returns the refill's error, bounded by the context.
	dead := newClient(t, Options{Nodes: []string{unusedAddr(t)}, Prefetch: 10})
	if _, err := dead.NextID(bg(t, 5*time.Second)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("dead pool: %v", err)
	}
}

// runGoroutines runs body(g) for g in 0..n, bounded by timeout; it fails on any error.
func runGoroutines(t testing.TB, n int, timeout time.Duration, body func(g int) ([]uint64, error)) [][]uint64 {
	t.Helper()
	results := make([][]uint64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			results[g], errs[g] = body(g)
		}(g)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		t.Fatalf("goroutines still running after %s", timeout)
	}
	for g, err := range errs {
		if err != nil {
			t.Fatalf("goroutine %d: %v", g, err)
		}
	}
	return results
}
