package idgen

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// Named sequences against a real `idgen serve` (IDGEN_BIN), as clients/vectors/SEQUENCES.md
// says: the sequences are created with `idgen seq create ... --data-dir DIR` before the node
// on DIR (its embedded store) starts.

// startSequenceNode creates orders (dense), ledger (strict) and tiny (dense, max 5) in a
// new data directory, then starts a node on it.
func startSequenceNode(t *testing.T, args ...string) *realNode {
	t.Helper()
	dir := t.TempDir()
	createSequence(t, dir, "orders")
	createSequence(t, dir, "ledger", "--mode", "strict")
	createSequence(t, dir, "tiny", "--max", "5")
	return startNodeIn(t, dir, args...)
}

func checkValueRange(t *testing.T, name string, batches ...[]uint64) {
	t.Helper()
	for _, b := range batches {
		for _, v := range b {
			if v == 0 || v >= 1<<63 {
				t.Fatalf("%s: value %d outside 1 ..= 2^63 - 1", name, v)
			}
		}
	}
}

func TestRealNodeDenseAndStrictSequencesGiveUniqueIncreasingValues(t *testing.T) {
	n := startSequenceNode(t)
	c := newClient(t, Options{Nodes: []string{n.addr}})
	first, err := c.NextValue(bg(t, 10*time.Second), "orders")
	if err != nil {
		t.Fatalf("%v; node log:\n%s", err, n.logTail())
	}
	if st := nodeState(c, n.addr); st.Hello == nil || st.Hello.Version != MaxProtocolVersion { // 4: sequences since 3
		t.Fatalf("negotiated %+v", st.Hello)
	}
	names := []string{"orders", "ledger"}
	results := runGoroutines(t, 8, 120*time.Second, func(g int) ([]uint64, error) {
		var all []uint64
		for k := 0; k < 60; k++ {
			vs, err := c.NextValues(bg(t, 20*time.Second), names[g%2], 1+k%5)
			if err != nil {
				return nil, err
			}
			if len(vs) != 1+k%5 {
				return nil, fmt.Errorf("%d values for %d", len(vs), 1+k%5)
			}
			all = append(all, vs...)
		}
		return all, nil
	})
	byName := map[string][][]uint64{}
	for g, r := range results {
		if !increasing(r) {
			t.Fatalf("goroutine %d (%s): values do not increase: %v", g, names[g%2], r)
		}
		byName[names[g%2]] = append(byName[names[g%2]], r)
	}
	byName["orders"] = append(byName["orders"], []uint64{first})
	for name, batches := range byName {
		checkValueRange(t, name, batches...)
		if got := checkUnique(t, batches...); got != 4*180+map[string]int{"orders": 1}[name] {
			t.Fatalf("%s: %d values", name, got)
		}
	}
	// Strict: a call answered before another began gets the smaller values, across
	// connections (two clients, one connection each).
	other := newClient(t, Options{Nodes: []string{n.addr}})
	var last uint64
	for k := 0; k < 40; k++ {
		cl := []*Client{c, other}[k%2]
		v, err := cl.NextValue(bg(t, 20*time.Second), "ledger")
		if err != nil {
			t.Fatal(err)
		}
		if v <= last {
			t.Fatalf("strict: %d after %d", v, last)
		}
		last = v
	}
	// A whole max_batch in one VALUES (one byte longer than an IDS of max_batch IDs).
	big, err := c.NextValues(bg(t, 30*time.Second), "orders", DefaultMaxBatch)
	if err != nil || len(big) != DefaultMaxBatch || !increasing(big) {
		t.Fatalf("%d values: %v", len(big), err)
	}
	checkValueRange(t, "orders", big)
	checkUnique(t, append(byName["orders"], big)...)
	if s := c.Stats(); s.Connects != 1 || s.NodeFailures != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestRealNodeSequenceErrors(t *testing.T) {
	n := startSequenceNode(t)
	c := newClient(t, Options{Nodes: []string{n.addr}})
	// An unknown name: 203, the node not marked down.
	_, err := c.NextValue(bg(t, 10*time.Second), "nope")
	var se *ServerError
	if !errors.As(err, &se) || se.Status != StatusUnknownSequence || se.Name() != "UNKNOWN_SEQUENCE" || se.RetryElsewhere() {
		t.Fatalf("unknown: %v; node log:\n%s", err, n.logTail())
	}
	if st := nodeState(c, n.addr); st.Down || !st.Connected {
		t.Fatalf("state %+v", st)
	}
	// A bad name or count fails before anything is sent (not even a connection).
	fresh := newClient(t, Options{Nodes: []string{n.addr}})
	for _, name := range []string{"Orders", "", "a/b", "-orders"} {
		if _, err := fresh.NextValue(bg(t, 5*time.Second), name); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("name %q: %v", name, err)
		}
	}
	if _, err := fresh.NextValues(bg(t, 5*time.Second), "orders", 0); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("n = 0: %v", err)
	}
	if s := fresh.Stats(); s.Connects != 0 || s.ValueRequests != 0 {
		t.Fatalf("something was sent: %+v", s)
	}
	// Above the node's max_batch: refused on the open connection, nothing sent.
	before := c.Stats().ValueRequests
	if _, err := c.NextValues(bg(t, 5*time.Second), "orders", DefaultMaxBatch+1); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("n above max_batch: %v", err)
	}
	if c.Stats().ValueRequests != before {
		t.Fatal("a GET_VALUES above max_batch was sent")
	}
	// tiny (--max 5): 1 to 5, then 307 SEQUENCE_USED_UP, and again.
	var got []uint64
	for k := 0; k < 5; k++ {
		v, err := c.NextValue(bg(t, 10*time.Second), "tiny")
		if err != nil {
			t.Fatalf("tiny call %d: %v", k, err)
		}
		got = append(got, v)
	}
	if fmt.Sprint(got) != "[1 2 3 4 5]" {
		t.Fatalf("tiny: %v", got)
	}
	for k := 0; k < 2; k++ {
		_, err := c.NextValue(bg(t, 10*time.Second), "tiny")
		if !errors.As(err, &se) || se.Status != StatusSequenceUsedUp || !errors.Is(err, StatusSequenceUsedUp) || se.RetryElsewhere() {
			t.Fatalf("tiny used up: %v", err)
		}
	}
	if s := c.Stats(); s.NodeFailures != 0 || s.Connects != 1 {
		t.Fatalf("stats %+v", s)
	}
	// A client that offers versions up to 2 says sequences need version 3.
	old := newClient(t, Options{Nodes: []string{n.addr}, MaxVersion: 2})
	if _, err := old.NextValue(bg(t, 5*time.Second), "orders"); !errors.Is(err, ErrSequencesUnsupported) {
		t.Fatalf("MaxVersion 2: %v", err)
	}
	if _, err := old.NextIDs(bg(t, 5*time.Second), 5); err != nil {
		t.Fatal(err)
	}
	if st := nodeState(old, n.addr); st.Hello.Version != 2 {
		t.Fatalf("negotiated %+v", st.Hello)
	}
}

func TestRealNodeSequencePrefetch(t *testing.T) {
	n := startSequenceNode(t)
	const k = 100
	c := newClient(t, Options{Nodes: []string{n.addr}, SequencePrefetch: k})
	// Dense: 1000 calls cost 1 (the first, exactly 1, learning the mode) + 1000/K requests;
	// the values of one caller increase.
	var seq []uint64
	for i := 0; i < 1000; i++ {
		v, err := c.NextValue(bg(t, 10*time.Second), "orders")
		if err != nil {
			t.Fatalf("call %d: %v; node log:\n%s", i, err, n.logTail())
		}
		seq = append(seq, v)
	}
	if !increasing(seq) {
		t.Fatalf("values do not increase: %v", seq)
	}
	if s := c.Stats(); s.ValueRequests != 1+1000/k || s.ValuesBuffered != 1000-s.ValueRequests {
		t.Fatalf("1000 calls: %+v", s)
	}
	// From many goroutines: unique, increasing per goroutine, about calls/K requests.
	before := c.Stats().ValueRequests
	results := runGoroutines(t, 8, 120*time.Second, func(int) ([]uint64, error) {
		var all []uint64
		for i := 0; i < 200; i++ {
			v, err := c.NextValue(bg(t, 20*time.Second), "orders")
			if err != nil {
				return nil, err
			}
			all = append(all, v)
		}
		return all, nil
	})
	for g, r := range results {
		if !increasing(r) {
			t.Fatalf("goroutine %d: values do not increase", g)
		}
	}
	checkValueRange(t, "orders", results...)
	if got := checkUnique(t, append(results, seq)...); got != 2600 {
		t.Fatalf("%d values", got)
	}
	if sent := c.Stats().ValueRequests - before; sent < 1600/k-1 || sent > 1600/k+1 {
		t.Fatalf("1600 calls sent %d requests, want about %d", sent, 1600/k)
	}
	// Strict: every call sends its own request.
	before = c.Stats().ValueRequests
	buffered := c.Stats().ValuesBuffered
	var last uint64
	for i := 0; i < 50; i++ {
		v, err := c.NextValue(bg(t, 20*time.Second), "ledger")
		if err != nil {
			t.Fatal(err)
		}
		if v <= last {
			t.Fatalf("strict: %d after %d", v, last)
		}
		last = v
	}
	if s := c.Stats(); s.ValueRequests-before != 50 || s.ValuesBuffered != buffered {
		t.Fatalf("50 strict calls: %d requests, %+v", s.ValueRequests-before, s)
	}
	// Near the maximum: K = 100 is more than tiny has left. The refill that asks for 100
	// meets 307 and asks again for exactly what the call needs; a node that dropped the
	// rest of its block on the first 307 (this server does: a gap) answers that with 307
	// too. Either way no value above 5 nor twice, and 307 from then on.
	var tiny []uint64
	var usedUp error
	for i := 0; i < 6 && usedUp == nil; i++ {
		v, err := c.NextValue(bg(t, 10*time.Second), "tiny")
		switch {
		case err == nil:
			tiny = append(tiny, v)
		case errors.Is(err, StatusSequenceUsedUp):
			usedUp = err
		default:
			t.Fatalf("tiny call %d: %v", i, err)
		}
	}
	if usedUp == nil || len(tiny) == 0 || tiny[0] != 1 || !increasing(tiny) || tiny[len(tiny)-1] > 5 {
		t.Fatalf("tiny: %v, then %v", tiny, usedUp)
	}
	for i := 0; i < 2; i++ {
		if _, err := c.NextValue(bg(t, 10*time.Second), "tiny"); !errors.Is(err, StatusSequenceUsedUp) {
			t.Fatalf("tiny used up: %v", err)
		}
	}
	t.Logf("tiny with prefetch %d: %v, then %v", k, tiny, usedUp)
	// An unknown name with prefetch on: 203.
	if _, err := c.NextValue(bg(t, 10*time.Second), "nope"); !errors.Is(err, StatusUnknownSequence) {
		t.Fatalf("unknown: %v", err)
	}
}
