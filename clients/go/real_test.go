package idgen

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Against real `idgen serve` nodes (IDGEN_BIN).

func TestRealNodeManyGoroutinesGetUniqueIDsIncreasingPerGoroutine(t *testing.T) {
	n := startNode(t)
	for _, version := range []uint16{3, 2, 1} {
		c := newClient(t, Options{Nodes: []string{n.addr}, MaxVersion: version})
		results := runGoroutines(t, 8, 60*time.Second, func(int) ([]uint64, error) {
			var all []uint64
			for k := 0; k < 250; k++ {
				ids, err := c.NextIDs(bg(t, 10*time.Second), 10)
				if err != nil {
					return nil, err
				}
				all = append(all, ids...)
			}
			return all, nil
		})
		for g, r := range results {
			if !increasing(r) {
				t.Fatalf("v%d: goroutine %d's IDs do not increase", version, g)
			}
		}
		if got := checkUnique(t, results...); got != 20000 {
			t.Fatalf("%d IDs", got)
		}
		st := nodeState(c, n.addr)
		if st.Hello.Version != version || c.Stats().Connects != 1 {
			t.Fatalf("v%d: %+v %+v", version, st.Hello, c.Stats())
		}
	}
}

func TestRealNodeSplitsBatchesAboveMaxBatch(t *testing.T) {
	n := startNode(t, "--max-batch", "1000")
	for _, version := range []uint16{2, 1} {
		c := newClient(t, Options{Nodes: []string{n.addr}, MaxVersion: version})
		ids, err := c.NextIDs(bg(t, 10*time.Second), 2500)
		if err != nil || len(ids) != 2500 || !increasing(ids) {
			t.Fatalf("v%d: %v %d", version, err, len(ids))
		}
		if s := c.Stats(); s.Requests != 3 || s.IDs != 2500 {
			t.Fatalf("v%d: %+v", version, s)
		}
	}
	// The whole default max_batch and more, in one call.
	big := startNode(t)
	c := newClient(t, Options{Nodes: []string{big.addr}})
	ids, err := c.NextIDs(bg(t, 20*time.Second), 150000)
	if err != nil || len(ids) != 150000 || !increasing(ids) {
		t.Fatalf("%v %d", err, len(ids))
	}
}

func TestRealNodePingLayoutAndDecode(t *testing.T) {
	n := startNode(t)
	c, err := Dial(bg(t, 10*time.Second), Options{Nodes: []string{n.addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rtt, err := c.Ping(bg(t, 5*time.Second))
	if err != nil || rtt <= 0 {
		t.Fatalf("%v %v", rtt, err)
	}
	l, err := c.Layout(bg(t, 5*time.Second))
	if err != nil || int(l.TimestampBits)+int(l.WorkerBits)+int(l.SequenceBits) != 63 {
		t.Fatalf("%+v %v", l, err)
	}
	id, err := c.NextID(bg(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := l.Decode(id)
	now := uint64(time.Now().UnixMilli())
	if p.UnixMs > now+1000 || p.UnixMs+60000 < now {
		t.Fatalf("ID time %d, now %d", p.UnixMs, now)
	}
	h := nodeState(c, n.addr).Hello
	if p.Worker < h.WorkerFirst || p.Worker >= h.WorkerFirst+h.WorkerCount {
		t.Fatalf("worker %d outside %d+%d", p.Worker, h.WorkerFirst, h.WorkerCount)
	}
	// Pipelined pings with IDs in between.
	results := runGoroutines(t, 4, 30*time.Second, func(g int) ([]uint64, error) {
		var all []uint64
		for k := 0; k < 50; k++ {
			if g%2 == 0 {
				if _, err := c.Ping(bg(t, 5*time.Second)); err != nil {
					return nil, err
				}
				continue
			}
			ids, err := c.NextIDs(bg(t, 5*time.Second), 3)
			if err != nil {
				return nil, err
			}
			all = append(all, ids...)
		}
		return all, nil
	})
	checkUnique(t, results...)
}

func TestRealNodePrefetchPoolUnderManyGoroutines(t *testing.T) {
	n := startNode(t)
	c := newClient(t, Options{Nodes: []string{n.addr}, Prefetch: 1000})
	results := runGoroutines(t, 16, 60*time.Second, func(int) ([]uint64, error) {
		var all []uint64
		for k := 0; k < 500; k++ {
			id, err := c.NextID(bg(t, 10*time.Second))
			if err != nil {
				return nil, err
			}
			all = append(all, id)
		}
		return all, nil
	})
	if got := checkUnique(t, results...); got != 8000 {
		t.Fatalf("%d", got)
	}
	if s := c.Stats(); s.PrefetchServed != 8000 || s.PrefetchRefills < 8 {
		t.Fatalf("%+v", s)
	}
}

// clusterArgs are the arguments of a node sharing etcd's worker space.
func clusterArgs(e *etcd, prefix, name string) []string {
	return []string{"--store", e.store(prefix), "--lease-ttl", "2s", "--node-id", name}
}

func TestRealNodesFailOverWhenOneIsKilled(t *testing.T) {
	e := startEtcd(t)
	a := startNode(t, clusterArgs(e, "failover", "a")...)
	b := startNode(t, clusterArgs(e, "failover", "b")...)
	c := newClient(t, Options{Nodes: []string{a.addr, b.addr}, BackoffMin: 5 * time.Second, BackoffMax: 5 * time.Second})
	ha := mustHello(t, a.addr)
	hb := mustHello(t, b.addr)
	l, err := c.Layout(bg(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var killed atomic.Bool
	var before atomic.Int64
	var once sync.Once
	type batch struct {
		afterKill bool
		ids       []uint64
	}
	var mu sync.Mutex
	var batches []batch
	runGoroutines(t, 8, 120*time.Second, func(g int) ([]uint64, error) {
		after := 0
		for k := 0; k < 5000 && after < 50; k++ { // bounded
			wasKilled := killed.Load()
			ids, err := c.NextIDs(bg(t, 10*time.Second), 20)
			if err != nil {
				return nil, err
			}
			mu.Lock()
			batches = append(batches, batch{wasKilled, ids})
			mu.Unlock()
			if wasKilled {
				after++
			} else if before.Add(1) >= 200 {
				once.Do(func() { a.kill(); killed.Store(true) })
			}
		}
		if after < 50 {
			return nil, fmt.Errorf("only %d calls after the kill", after)
		}
		return nil, nil
	})
	all := make([][]uint64, len(batches))
	fromA := 0
	for i, bt := range batches {
		all[i] = bt.ids
		for _, id := range bt.ids {
			p, _ := l.Decode(id)
			inA := p.Worker >= ha.WorkerFirst && p.Worker < ha.WorkerFirst+ha.WorkerCount*2
			inB := p.Worker >= hb.WorkerFirst && p.Worker < hb.WorkerFirst+hb.WorkerCount*2
			if bt.afterKill && !inB {
				t.Fatalf("ID %d (worker %d) after the kill did not come from the survivor (%d+)", id, p.Worker, hb.WorkerFirst)
			}
			if inA && !inB {
				fromA++
			}
		}
	}
	checkUnique(t, all...)
	if fromA == 0 || !nodeState(c, a.addr).Down || c.Stats().Failovers < 1 {
		t.Fatalf("from a: %d, %+v, %+v", fromA, c.Nodes(), c.Stats())
	}
}

// mustHello is a node's HELLO_OK, from a client of its own.
func mustHello(t *testing.T, addr string) ServerHello {
	t.Helper()
	c := newClient(t, Options{Nodes: []string{addr}})
	if _, err := c.Ping(bg(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	h := *nodeState(c, addr).Hello
	c.Close()
	return h
}

// stealWorkers rewrites the lease record of the worker range starting at first in etcd,
// as a rival with a newer generation holding it 4 s ahead would: the node loses that
// lease, takes another range, and closes its connections with RANGE_CHANGED.
func stealWorkers(t *testing.T, e *etcd, prefix string, first uint32, epochMs uint64) {
	t.Helper()
	key := fmt.Sprintf("%s/idgen/default/workers/%05d", prefix, first)
	kvURL := "http://" + e.url + "/v3/kv/"
	post := func(op string, body map[string]string) map[string]any {
		data, _ := json.Marshal(body)
		resp, err := http.Post(kvURL+op, "application/json", bytes.NewReader(data))
		if err != nil {
			t.Fatalf("etcd %s: %v", op, err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
			t.Fatalf("etcd %s: %d %v", op, resp.StatusCode, err)
		}
		return out
	}
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	got := post("range", map[string]string{"key": b64(key)})
	kvs, _ := got["kvs"].([]any)
	if len(kvs) != 1 {
		t.Fatalf("no lease record at %s: %v", key, got)
	}
	raw, _ := base64.StdEncoding.DecodeString(kvs[0].(map[string]any)["value"].(string))
	var rec map[string]any
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatalf("lease record %s: %v", raw, err)
	}
	now := time.Now().UnixMilli()
	rec["state"] = "held"
	rec["owner"] = map[string]any{"node_id": "rival", "host": "rival", "pid": 1, "started_unix_ms": now, "instance": "rival/test"}
	rec["generation"] = rec["generation"].(float64) + 1000000
	rec["lease_end"] = uint64(now) - epochMs + 4000
	rec["written_unix_ms"] = now
	value, _ := json.Marshal(rec)
	post("put", map[string]string{"key": b64(key), "value": b64(string(value))})
}

func TestRealNodeLeaseChangeIsFollowedByTheClient(t *testing.T) {
	e := startEtcd(t)
	n := startNode(t, clusterArgs(e, "lease", "n")...)
	c := newClient(t, Options{Nodes: []string{n.addr}, BackoffMin: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond})
	l, err := c.Layout(bg(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	first := *nodeState(c, n.addr).Hello
	// Callers keep asking while the lease changes under them.
	stop := make(chan struct{})
	var mu sync.Mutex
	var got [][]uint64
	var failures []error
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 100000; k++ { // bounded
				select {
				case <-stop:
					return
				default:
				}
				ids, err := c.NextIDs(bg(t, 10*time.Second), 50)
				mu.Lock()
				if err != nil {
					failures = append(failures, err)
				} else {
					got = append(got, ids)
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	// Both shards' ranges are one lease record, starting at the first shard's range.
	base := first.WorkerFirst - uint32(first.Shard)*first.WorkerCount
	span := 2 * first.WorkerCount
	stealWorkers(t, e, "lease", base, l.EpochMs)
	deadline := time.Now().Add(20 * time.Second)
	changed := time.Time{}
	for time.Now().Before(deadline) {
		if st := nodeState(c, n.addr); st.Hello != nil && st.Hello.WorkerCount > 0 &&
			(st.Hello.WorkerFirst < base || st.Hello.WorkerFirst >= base+span) {
			changed = time.Now()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if changed.IsZero() {
		close(stop)
		wg.Wait()
		t.Fatalf("the client never saw a new worker range; node log:\n%s", n.logTail())
	}
	// Served from the new range within a bound.
	mu.Lock()
	count := len(got)
	mu.Unlock()
	for time.Now().Before(changed.Add(5 * time.Second)) {
		mu.Lock()
		more := len(got) > count+20
		mu.Unlock()
		if more {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if len(got) <= count+20 {
		t.Fatalf("not served after the lease change: %v", failures)
	}
	checkUnique(t, got...)
	s := c.Stats()
	if s.Connects < 2 {
		t.Fatalf("no reconnect: %+v", s)
	}
	for _, err := range failures {
		// While the node re-acquires it may answer UNAVAILABLE_LEASE; nothing else.
		if !errors.Is(err, StatusUnavailableLease) && !errors.Is(err, ErrUnavailable) {
			t.Fatalf("unexpected error during the lease change: %v", err)
		}
	}
	distinct := map[string]int{}
	for _, err := range failures {
		distinct[err.Error()]++
	}
	t.Logf("lease change: %d batches, transient errors %v, stats %+v", len(got), distinct, s)
}

func TestRealNodeRestartedOnTheSamePortIsReconnected(t *testing.T) {
	e := startEtcd(t)
	n := startNode(t, clusterArgs(e, "restart", "n")...)
	c := newClient(t, Options{Nodes: []string{n.addr}, BackoffMin: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond})
	before, err := c.NextIDs(bg(t, 10*time.Second), 1000)
	if err != nil {
		t.Fatal(err)
	}
	n.restart(false)
	var after []uint64
	deadline := time.Now().Add(20 * time.Second)
	for after == nil && time.Now().Before(deadline) {
		ids, err := c.NextIDs(bg(t, 10*time.Second), 1000)
		if err == nil {
			after = ids
		} else if !errors.Is(err, ErrUnavailable) && !errors.Is(err, StatusUnavailableLease) {
			t.Fatalf("unexpected error: %v", err)
		} else {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if after == nil {
		t.Fatalf("not served after the restart; log:\n%s", n.logTail())
	}
	checkUnique(t, before, after)
	if c.Stats().Connects < 2 {
		t.Fatalf("%+v", c.Stats())
	}
}

func TestRealNodeRefusesNothingButBadCounts(t *testing.T) {
	n := startNode(t, "--max-batch", "100")
	c := newClient(t, Options{Nodes: []string{n.addr}})
	// A batch above max_batch is split, so the server never says BATCH_TOO_LARGE; a huge
	// count, or 0, is refused locally.
	for _, n := range []int{1 << 25, 0} {
		if _, err := c.NextIDs(bg(t, time.Second), n); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("n = %d: got %v", n, err)
		}
	}
	if ids, err := c.NextIDs(bg(t, 10*time.Second), 250); err != nil || len(ids) != 250 {
		t.Fatal(err)
	}
}

func TestRealNodeUUIDsAreVersion7IncreasingAndMadeFromTheConnectionsIDs(t *testing.T) {
	n := startNode(t, "--max-batch", "1000")
	c := newClient(t, Options{Nodes: []string{n.addr}})
	ctx := bg(t, 10*time.Second)
	before, err := c.NextID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	one, err := c.NextUUID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	many, err := c.NextUUIDs(ctx, 2500) // three GET_UUIDS, joined
	if err != nil || len(many) != 2500 {
		t.Fatalf("%v %d", err, len(many))
	}
	after, err := c.NextID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.Layout(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := nodeState(c, n.addr).Hello
	if h.Version != MaxProtocolVersion {
		t.Fatalf("negotiated %d", h.Version)
	}
	last := before
	now := uint64(time.Now().UnixMilli())
	for i, u := range append([]UUID{one}, many...) {
		p, err := l.DecodeUUID(u)
		if err != nil || u.Version() != 7 {
			t.Fatalf("%d: %s: %v", i, u, err)
		}
		if p.ID <= last {
			t.Fatalf("%d: %s was made from ID %d, not above %d", i, u, p.ID, last)
		}
		last = p.ID
		if p.Worker < h.WorkerFirst || p.Worker >= h.WorkerFirst+h.WorkerCount || p.UnixMs > now+1000 || p.UnixMs+60000 < now {
			t.Fatalf("%d: %s: %+v", i, u, p)
		}
	}
	if after <= last {
		t.Fatalf("the next ID %d is not above the UUIDs' %d", after, last)
	}
	if s := c.Stats(); s.UUIDRequests != 4 || s.UUIDs != 2501 {
		t.Fatalf("%+v", s)
	}
	// A client limited to version 3 on the same node: ErrUUIDsUnsupported, IDs still served.
	old := newClient(t, Options{Nodes: []string{n.addr}, MaxVersion: 3})
	if _, err := old.NextUUID(ctx); !errors.Is(err, ErrUUIDsUnsupported) {
		t.Fatalf("MaxVersion 3: %v", err)
	}
	if _, err := old.NextID(ctx); err != nil {
		t.Fatal(err)
	}
}
