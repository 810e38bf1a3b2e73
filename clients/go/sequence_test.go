package idgen

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// Named sequences (clients/vectors/SEQUENCES.md) against fake version 3 nodes.

// seqFake is a version 3 fake node serving a dense "orders" and a strict "ledger".
func seqFake(t *testing.T) *fakeNode {
	f := newFake(t, seqHello(), "serve")
	f.addSeq("orders", SequenceDense, 1)
	f.addSeq("ledger", SequenceStrict, 1)
	return f
}

func counts(reqs []fakeValueReq) []uint32 {
	out := make([]uint32, len(reqs))
	for i, r := range reqs {
		out[i] = r.count
	}
	return out
}

func TestValuesOfDenseAndStrictSequencesWithoutPrefetch(t *testing.T) {
	f := seqFake(t)
	c := newClient(t, Options{Nodes: []string{f.addr}})
	v, err := c.NextValue(bg(t, 5*time.Second), "orders")
	if err != nil || v != 1 {
		t.Fatalf("%d %v", v, err)
	}
	vs, err := c.NextValues(bg(t, 5*time.Second), "orders", 3)
	if err != nil || len(vs) != 3 || vs[0] != 2 || vs[2] != 4 {
		t.Fatalf("%v %v", vs, err)
	}
	for k := 0; k < 5; k++ {
		if v, err := c.NextValue(bg(t, 5*time.Second), "ledger"); err != nil || v != uint64(k+1) {
			t.Fatalf("ledger %d: %d %v", k, v, err)
		}
	}
	// Without prefetch every call asks for exactly what it needs.
	if got := counts(f.valueRequests()); fmt.Sprint(got) != "[1 3 1 1 1 1 1]" {
		t.Fatalf("GET_VALUES counts %v", got)
	}
	if st := nodeState(c, f.addr); st.Hello.Version != 3 {
		t.Fatalf("negotiated %+v", st.Hello)
	}
	if s := c.Stats(); s.ValueRequests != 7 || s.Values != 9 || s.ValuesBuffered != 0 || s.Requests != 0 {
		t.Fatalf("stats %+v", s)
	}
	// Many goroutines on one connection: unique, and increasing per goroutine.
	results := runGoroutines(t, 8, 30*time.Second, func(g int) ([]uint64, error) {
		var all []uint64
		name := []string{"orders", "ledger"}[g%2]
		for k := 0; k < 50; k++ {
			vs, err := c.NextValues(bg(t, 5*time.Second), name, 1+k%3)
			if err != nil {
				return nil, err
			}
			all = append(all, vs...)
		}
		return all, nil
	})
	var orders, ledger [][]uint64
	for g, r := range results {
		if !increasing(r) {
			t.Fatalf("goroutine %d: values do not increase: %v", g, r)
		}
		if g%2 == 0 {
			orders = append(orders, r)
		} else {
			ledger = append(ledger, r)
		}
	}
	checkUnique(t, orders...)
	checkUnique(t, ledger...)
	if s := c.Stats(); s.Connects != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestSequenceNamesAndCountsAreCheckedBeforeSending(t *testing.T) {
	f := seqFake(t)
	c := newClient(t, Options{Nodes: []string{f.addr}})
	bad := []string{"", strings.Repeat("a", 65), "Orders", ".orders", "-x", "_x", "a/b", "café",
		"a b", "orders\n", "\x00", "ORDERS"}
	for _, name := range bad {
		_, err := c.NextValue(bg(t, time.Second), name)
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "sequence name") {
			t.Errorf("name %q: got %v", name, err)
		}
	}
	for _, n := range []int{0, -1, MaxValuesPerCall + 1} {
		if _, err := c.NextValues(bg(t, time.Second), "orders", n); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("n = %d: got %v", n, err)
		}
	}
	if conns, reqs := f.counts(); conns != 0 || reqs != 0 {
		t.Fatalf("something was sent: %d connections, %d requests", conns, reqs)
	}
	good := []string{"0", "a", "orders", "invoice.tenant-42", "a_b", strings.Repeat("z", 64), "9-._"}
	for _, name := range good {
		f.addSeq(name, SequenceDense, 1)
		if _, err := c.NextValue(bg(t, 5*time.Second), name); err != nil {
			t.Errorf("name %q: %v", name, err)
		}
	}
	// n above the node's max_batch, or a name whose frame is above its max_request_frame:
	// refused on the open connection, nothing sent, the node not marked down.
	h := seqHello()
	h.MaxBatch, h.MaxRequestFrame = 10, 64
	small := newFake(t, h, "serve")
	long := strings.Repeat("q", 64)
	small.addSeq("orders", SequenceDense, 1)
	small.addSeq(long, SequenceDense, 1)
	other := seqFake(t)
	c2 := newClient(t, Options{Nodes: []string{small.addr, other.addr}})
	if _, err := c2.NextValues(bg(t, 5*time.Second), "orders", 11); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "max_batch 10") {
		t.Fatalf("n above max_batch: %v", err)
	}
	if _, err := c2.NextValue(bg(t, 5*time.Second), long); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "max_request_frame 64") {
		t.Fatalf("frame above max_request_frame: %v", err)
	}
	if vs, err := c2.NextValues(bg(t, 5*time.Second), "orders", 10); err != nil || len(vs) != 10 {
		t.Fatalf("n = max_batch: %v %v", vs, err)
	}
	if got := counts(small.valueRequests()); fmt.Sprint(got) != "[10]" {
		t.Fatalf("sent %v", got)
	}
	if conns, _ := other.counts(); conns != 0 || nodeState(c2, small.addr).Down || c2.Stats().Failovers != 0 {
		t.Fatalf("a refused call failed over: %d connections to the other node, %+v", conns, c2.Stats())
	}
}

func TestAVersion1Or2NodeIsRefusedWithoutSending(t *testing.T) {
	for _, version := range []uint16{1, 2} {
		h := seqHello()
		h.Version = version
		old := newFake(t, h, "serve")
		newer := seqFake(t)
		c := newClient(t, Options{Nodes: []string{old.addr, newer.addr}})
		_, err := c.NextValue(bg(t, 5*time.Second), "orders")
		var ve *VersionError
		if !errors.As(err, &ve) || ve.Node != old.addr || ve.Version != version || !errors.Is(err, ErrSequencesUnsupported) ||
			!strings.Contains(err.Error(), fmt.Sprintf("speaks protocol version %d; named sequences need version 3", version)) {
			t.Fatalf("v%d: got %v", version, err)
		}
		if _, reqs := old.counts(); reqs != 0 {
			t.Fatalf("v%d: %d requests sent", version, reqs)
		}
		if conns, _ := newer.counts(); conns != 0 || nodeState(c, old.addr).Down || c.Stats().Failovers != 0 {
			t.Fatalf("v%d: another node was tried or the node marked down: %+v", version, c.Stats())
		}
		// The node still serves IDs.
		if _, err := c.NextIDs(bg(t, 5*time.Second), 3); err != nil {
			t.Fatalf("v%d: %v", version, err)
		}
	}
	// A client that offers no more than version 2 says so, before connecting.
	f := seqFake(t)
	c := newClient(t, Options{Nodes: []string{f.addr}, MaxVersion: 2})
	_, err := c.NextValues(bg(t, 5*time.Second), "orders", 2)
	var ve *VersionError
	if !errors.As(err, &ve) || ve.Node != "" || ve.Version != 2 || !strings.Contains(err.Error(), "Options.MaxVersion") {
		t.Fatalf("MaxVersion 2: %v", err)
	}
	if conns, _ := f.counts(); conns != 0 {
		t.Fatalf("connected: %d", conns)
	}
}

func TestSequenceStatusesAreReturnedAtOnceOrFailOverAsSpecified(t *testing.T) {
	// No retry: every node would answer the same.
	for _, status := range []Status{StatusUnknownSequence, StatusInvalidSequenceName, StatusSequenceUsedUp,
		StatusInvalidCount, StatusBatchTooLarge, StatusExhausted} {
		for _, prefetch := range []int{0, 100} {
			bad := seqFake(t)
			bad.setSeq("orders", func(s *fakeSeq) { s.status = status })
			other := seqFake(t)
			c := newClient(t, Options{Nodes: []string{bad.addr, other.addr}, SequencePrefetch: prefetch})
			_, err := c.NextValue(bg(t, 5*time.Second), "orders")
			var se *ServerError
			if !errors.As(err, &se) || se.Status != status || !errors.Is(err, status) || se.Node != bad.addr {
				t.Fatalf("%s (prefetch %d): got %v", status, prefetch, err)
			}
			if conns, _ := other.counts(); conns != 0 || c.Stats().Failovers != 0 || nodeState(c, bad.addr).Down {
				t.Fatalf("%s (prefetch %d) must not fail over nor mark the node down", status, prefetch)
			}
			if got := len(bad.valueRequests()); got != 1 {
				t.Fatalf("%s (prefetch %d): %d requests", status, prefetch, got)
			}
		}
	}
	// A name a node does not have, without any fault injected.
	f := seqFake(t)
	c := newClient(t, Options{Nodes: []string{f.addr}})
	if _, err := c.NextValue(bg(t, 5*time.Second), "nope"); !errors.Is(err, StatusUnknownSequence) {
		t.Fatalf("unknown: %v", err)
	}
	// Retried elsewhere: 308 (the connection stays), 306, 300, and closing 302.
	for _, status := range []Status{StatusSequenceUnavailable, StatusBusy, StatusUnavailableLease, StatusShuttingDown} {
		bad := seqFake(t)
		bad.setSeq("orders", func(s *fakeSeq) { s.status = status })
		good := seqFake(t)
		good.setSeq("orders", func(s *fakeSeq) { s.next = 1000 })
		c := newClient(t, Options{Nodes: []string{bad.addr, good.addr}, BackoffMin: 5 * time.Second, BackoffMax: 5 * time.Second})
		vs, err := c.NextValues(bg(t, 5*time.Second), "orders", 2)
		if err != nil || vs[0] != 1000 || vs[1] != 1001 {
			t.Fatalf("%s: %v %v", status, vs, err)
		}
		st := nodeState(c, bad.addr)
		if !st.Down || !errors.Is(st.LastError, status) || st.Connected == status.Closes() || c.Stats().Failovers != 1 {
			t.Fatalf("%s: state %+v, stats %+v", status, st, c.Stats())
		}
	}
	// Alone, a 308 is returned once the node was tried.
	only := seqFake(t)
	only.setSeq("orders", func(s *fakeSeq) { s.status = StatusSequenceUnavailable })
	c3 := newClient(t, Options{Nodes: []string{only.addr}})
	if _, err := c3.NextValue(bg(t, 5*time.Second), "orders"); !errors.Is(err, StatusSequenceUnavailable) {
		t.Fatalf("308 alone: %v", err)
	}
}

func TestBadValuesAnswersAreProtocolErrorsAndFailOver(t *testing.T) {
	frame := func(mode byte, count uint32, values ...uint64) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(6+8*len(values)))
		b = append(b, opValues, mode)
		b = binary.BigEndian.AppendUint32(b, count)
		for _, v := range values {
			b = binary.BigEndian.AppendUint64(b, v)
		}
		return b
	}
	cases := []struct {
		name, want string
		raw        []byte
	}{
		{"one value for two", "VALUES of 1 in answer to GET_VALUES of 2", frame(0, 1, 5)},
		{"three values for two", "VALUES of 3 in answer to GET_VALUES of 2", frame(0, 3, 5, 6, 7)},
		{"mode 2", "unknown sequence mode 2", frame(2, 2, 5, 6)},
		{"not increasing", "does not increase", frame(1, 2, 6, 5)},
		{"value 0", "outside 1 ..= 2^63 - 1", frame(0, 2, 0, 1)},
		{"top bit", "outside 1 ..= 2^63 - 1", frame(0, 2, 1, 1<<63)},
		{"count disagrees with length", "disagrees with frame length", frame(0, 3, 5, 6)},
		{"IDS for GET_VALUES", "IDS in answer to GET_VALUES", append(binary.BigEndian.AppendUint32([]byte{0, 0, 0, 21, opIDs}, 2), make([]byte, 16)...)},
	}
	for _, tc := range cases {
		bad := seqFake(t)
		bad.setSeq("orders", func(s *fakeSeq) { s.raw = tc.raw })
		good := seqFake(t)
		c := newClient(t, Options{Nodes: []string{bad.addr, good.addr}, BackoffMin: 5 * time.Second, BackoffMax: 5 * time.Second})
		vs, err := c.NextValues(bg(t, 5*time.Second), "orders", 2)
		if err != nil || len(vs) != 2 {
			t.Fatalf("%s: %v %v", tc.name, vs, err)
		}
		st := nodeState(c, bad.addr)
		var pe *ProtocolError
		if !st.Down || st.Connected || !errors.As(st.LastError, &pe) || !strings.Contains(pe.Error(), tc.want) {
			t.Fatalf("%s: state %+v", tc.name, st)
		}
		// Alone: the protocol error is the call's.
		only := seqFake(t)
		only.setSeq("orders", func(s *fakeSeq) { s.raw = tc.raw })
		c1 := newClient(t, Options{Nodes: []string{only.addr}})
		if _, err := c1.NextValues(bg(t, 5*time.Second), "orders", 2); !errors.Is(err, ErrProtocol) {
			t.Fatalf("%s alone: %v", tc.name, err)
		}
	}
}

// A VALUES of max_batch values is one byte longer than an IDS of max_batch IDs.
func TestAValuesFrameOfMaxBatchValuesIsTaken(t *testing.T) {
	h := seqHello()
	h.MaxBatch = 1000
	f := newFake(t, h, "serve")
	f.addSeq("orders", SequenceDense, 1)
	c := newClient(t, Options{Nodes: []string{f.addr}})
	vs, err := c.NextValues(bg(t, 5*time.Second), "orders", 1000)
	if err != nil || len(vs) != 1000 || vs[999] != 1000 || !increasing(vs) {
		t.Fatalf("%v %d", err, len(vs))
	}
}

func TestPrefetchOnADenseSequenceSendsAboutCallsOverKRequests(t *testing.T) {
	f := seqFake(t)
	const k = 100
	c := newClient(t, Options{Nodes: []string{f.addr}, SequencePrefetch: k})
	var got []uint64
	for i := 0; i < 1000; i++ {
		v, err := c.NextValue(bg(t, 5*time.Second), "orders")
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
	}
	// The first call asks for exactly 1 (and learns the mode), then K at a time: no value
	// skipped, none repeated, in order.
	for i, v := range got {
		if v != uint64(i+1) {
			t.Fatalf("value %d is %d", i, v)
		}
	}
	reqs := counts(f.valueRequests())
	if len(reqs) != 1+10 || reqs[0] != 1 {
		t.Fatalf("%d requests for 1000 calls: %v", len(reqs), reqs)
	}
	for _, n := range reqs[1:] {
		if n != k {
			t.Fatalf("asked %v", reqs)
		}
	}
	if s := c.Stats(); s.ValueRequests != 11 || s.ValuesBuffered != 1000-11 {
		t.Fatalf("stats %+v", s)
	}
	// A call for more than K asks for n; a call the buffer can answer sends nothing.
	vs, err := c.NextValues(bg(t, 5*time.Second), "orders", 250) // the buffer holds 1: asks 250
	if err != nil || len(vs) != 250 || vs[0] != 1001 || !increasing(vs) {
		t.Fatalf("%v %v", vs, err)
	}
	if reqs := counts(f.valueRequests()); len(reqs) != 12 || reqs[11] != 250 {
		t.Fatalf("asked %v", reqs)
	}
	vs, err = c.NextValues(bg(t, 5*time.Second), "orders", 1) // the rest of the 250: 1
	if err != nil || vs[0] != 1251 || len(f.valueRequests()) != 12 {
		t.Fatalf("%v %v %d", vs, err, len(f.valueRequests()))
	}

	// Many goroutines: unique values, increasing per goroutine, about calls/K requests.
	before := len(f.valueRequests())
	const goroutines, calls = 16, 200
	results := runGoroutines(t, goroutines, 60*time.Second, func(int) ([]uint64, error) {
		var all []uint64
		for i := 0; i < calls; i++ {
			v, err := c.NextValue(bg(t, 10*time.Second), "orders")
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
	if n := checkUnique(t, results...); n != goroutines*calls {
		t.Fatalf("%d values", n)
	}
	sent := len(f.valueRequests()) - before
	if want := goroutines * calls / k; sent < want-1 || sent > want+1 {
		t.Fatalf("%d calls sent %d requests, want about %d", goroutines*calls, sent, want)
	}
}

func TestAStrictSequenceIsNeverBuffered(t *testing.T) {
	f := seqFake(t)
	c := newClient(t, Options{Nodes: []string{f.addr}, SequencePrefetch: 100})
	var got []uint64
	for i := 0; i < 50; i++ {
		vs, err := c.NextValues(bg(t, 5*time.Second), "ledger", 1+i%3)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, vs...)
	}
	reqs := counts(f.valueRequests())
	if len(reqs) != 50 {
		t.Fatalf("50 calls sent %d requests", len(reqs))
	}
	for i, n := range reqs {
		if n != uint32(1+i%3) {
			t.Fatalf("asked %v", reqs)
		}
	}
	if !increasing(got) || c.Stats().ValuesBuffered != 0 {
		t.Fatalf("values %v, stats %+v", got, c.Stats())
	}
	// From many goroutines too: one request per call.
	runGoroutines(t, 8, 30*time.Second, func(int) ([]uint64, error) {
		var all []uint64
		for i := 0; i < 20; i++ {
			v, err := c.NextValue(bg(t, 5*time.Second), "ledger")
			if err != nil {
				return nil, err
			}
			all = append(all, v)
		}
		return all, nil
	})
	if n := len(f.valueRequests()); n != 50+160 || c.Stats().ValuesBuffered != 0 {
		t.Fatalf("%d requests, stats %+v", n, c.Stats())
	}
}

func TestUnknownSequenceEmptiesTheBufferAndForgetsTheMode(t *testing.T) {
	f := seqFake(t)
	c := newClient(t, Options{Nodes: []string{f.addr}, SequencePrefetch: 100})
	for i := 0; i < 2; i++ { // learns dense, then buffers 99
		if _, err := c.NextValue(bg(t, 5*time.Second), "orders"); err != nil {
			t.Fatal(err)
		}
	}
	f.dropSeq("orders")
	// The buffer still answers calls it can answer; one it cannot asks, and meets 203.
	if v, err := c.NextValue(bg(t, 5*time.Second), "orders"); err != nil || v != 3 {
		t.Fatalf("%d %v", v, err)
	}
	if _, err := c.NextValues(bg(t, 5*time.Second), "orders", 150); !errors.Is(err, StatusUnknownSequence) {
		t.Fatalf("dropped: %v", err)
	}
	// Created again, strict, above: the old values are gone and the mode is learned anew
	// (the first call asks for exactly 1).
	f.addSeq("orders", SequenceStrict, 5000)
	for i := 0; i < 3; i++ {
		v, err := c.NextValue(bg(t, 5*time.Second), "orders")
		if err != nil || v != uint64(5000+i) {
			t.Fatalf("after the drop: %d %v", v, err)
		}
	}
	if reqs := counts(f.valueRequests()); fmt.Sprint(reqs) != "[1 100 150 1 1 1]" {
		t.Fatalf("asked %v", reqs)
	}
}

// A dense sequence created again as strict (without a call meeting UNKNOWN_SEQUENCE in
// between): the buffer is dropped as soon as a refill says strict, and those values are
// handed to nobody.
func TestARefillThatSaysStrictIsDroppedAndTheCallAsksForItself(t *testing.T) {
	f := seqFake(t)
	c := newClient(t, Options{Nodes: []string{f.addr}, SequencePrefetch: 10})
	if _, err := c.NextValue(bg(t, 5*time.Second), "orders"); err != nil { // learns dense
		t.Fatal(err)
	}
	f.setSeq("orders", func(s *fakeSeq) { s.mode, s.next = SequenceStrict, 100 })
	v, err := c.NextValue(bg(t, 5*time.Second), "orders") // refill of 10 says strict: dropped
	if err != nil || v != 110 {
		t.Fatalf("%d %v", v, err)
	}
	if v, err := c.NextValue(bg(t, 5*time.Second), "orders"); err != nil || v != 111 {
		t.Fatalf("%d %v", v, err)
	}
	if reqs := counts(f.valueRequests()); fmt.Sprint(reqs) != "[1 10 1 1]" {
		t.Fatalf("asked %v", reqs)
	}
}

// Near its maximum a sequence has fewer than K values left: the refill meets 307 and the
// call asks for exactly what it needs; 307 once those are gone too.
func TestPrefetchNearTheMaximumAsksForExactlyWhatTheCallNeeds(t *testing.T) {
	f := seqFake(t)
	f.addSeq("tiny", SequenceDense, 1).max = 5
	c := newClient(t, Options{Nodes: []string{f.addr}, SequencePrefetch: 100})
	var got []uint64
	for i := 0; i < 5; i++ {
		v, err := c.NextValue(bg(t, 5*time.Second), "tiny")
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		got = append(got, v)
	}
	if fmt.Sprint(got) != "[1 2 3 4 5]" {
		t.Fatalf("values %v", got)
	}
	_, err := c.NextValue(bg(t, 5*time.Second), "tiny")
	var se *ServerError
	if !errors.As(err, &se) || se.Status != StatusSequenceUsedUp || se.RetryElsewhere() {
		t.Fatalf("used up: %v", err)
	}
}

// After a failover the new node's values may lie below the buffer's: the buffer's are
// dropped, so a call's values still increase.
func TestARefillFromAnotherNodeBelowTheBufferDropsTheBuffer(t *testing.T) {
	a := seqFake(t)
	a.setSeq("orders", func(s *fakeSeq) { s.next = 1000 })
	b := seqFake(t)
	c := newClient(t, Options{Nodes: []string{a.addr, b.addr}, SequencePrefetch: 10,
		BackoffMin: 5 * time.Second, BackoffMax: 5 * time.Second})
	for i := 0; i < 2; i++ { // 1000, then a refill of 1001..1010: the buffer holds 1002..1010
		if _, err := c.NextValue(bg(t, 5*time.Second), "orders"); err != nil {
			t.Fatal(err)
		}
	}
	a.kill()
	vs, err := c.NextValues(bg(t, 5*time.Second), "orders", 20) // from b: 1..20
	if err != nil || len(vs) != 20 || vs[0] != 1 || !increasing(vs) {
		t.Fatalf("%v %v", vs, err)
	}
	v, err := c.NextValue(bg(t, 5*time.Second), "orders") // buffer empty: a refill from b
	if err != nil || v != 21 {
		t.Fatalf("%d %v", v, err)
	}
}

// Calls of a name made while its first call learns the mode wait for that call's answer
// (one request in flight per name): then, on a dense sequence, they share one refill; on a
// strict one, each asks for itself. First calls sent side by side could be answered above
// values another call had meanwhile buffered, and a caller's next value would then go down.
func TestCallsMadeWhileTheFirstLearnsTheModeWaitForItsAnswer(t *testing.T) {
	f := seqFake(t)
	c := newClient(t, Options{Nodes: []string{f.addr}, SequencePrefetch: 10, RequestTimeout: 5 * time.Second})
	if _, err := c.NextIDs(bg(t, 5*time.Second), 1); err != nil { // connected first
		t.Fatal(err)
	}
	f.setSeq("orders", func(s *fakeSeq) { s.delay = 300 * time.Millisecond })
	f.setSeq("ledger", func(s *fakeSeq) { s.delay = 100 * time.Millisecond })
	results := runGoroutines(t, 9, 30*time.Second, func(g int) ([]uint64, error) {
		if g%2 == 1 { // strict: "ledger", 2 values a call
			return c.NextValues(bg(t, 10*time.Second), "ledger", 2)
		}
		var got []uint64
		for k := 0; k < 2; k++ {
			v, err := c.NextValue(bg(t, 10*time.Second), "orders")
			if err != nil {
				return nil, err
			}
			got = append(got, v)
		}
		return got, nil
	})
	var orders, ledger [][]uint64
	for g, r := range results {
		if !increasing(r) {
			t.Fatalf("goroutine %d: values do not increase: %v", g, r)
		}
		if g%2 == 1 {
			ledger = append(ledger, r)
		} else {
			orders = append(orders, r)
		}
	}
	checkUnique(t, orders...)
	checkUnique(t, ledger...)
	var dense, strict []uint32
	for _, r := range f.valueRequests() {
		if r.name == "orders" {
			dense = append(dense, r.count)
		} else {
			strict = append(strict, r.count)
		}
	}
	// Dense: one request of exactly 1 learns the mode; the 9 calls left share one refill of K.
	if fmt.Sprint(dense) != "[1 10]" {
		t.Fatalf("GET_VALUES of orders: %v, want [1 10]", dense)
	}
	// Strict: once learnt, each call asks for exactly its own n.
	if fmt.Sprint(strict) != "[2 2 2 2]" {
		t.Fatalf("GET_VALUES of ledger: %v, want [2 2 2 2]", strict)
	}
}

// A call waiting for another call's refill: when the refill's caller gives up (its
// context), the waiting call asks for itself; when the refill fails, the waiting call gets
// its error.
func TestCallsWaitingForARefill(t *testing.T) {
	f := seqFake(t)
	c := newClient(t, Options{Nodes: []string{f.addr}, SequencePrefetch: 10, RequestTimeout: 5 * time.Second})
	if _, err := c.NextValue(bg(t, 5*time.Second), "orders"); err != nil { // learns dense
		t.Fatal(err)
	}
	f.setSeq("orders", func(s *fakeSeq) { s.delay = 300 * time.Millisecond })
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	var shortErr, longErr error
	var longVal uint64
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, shortErr = c.NextValue(short, "orders") // starts the refill, gives up
	}()
	time.Sleep(30 * time.Millisecond)
	longVal, longErr = c.NextValue(bg(t, 10*time.Second), "orders") // waits, then asks itself
	wg.Wait()
	if !errors.Is(shortErr, context.DeadlineExceeded) || longErr != nil || longVal <= 1 {
		t.Fatalf("short %v, long %d %v", shortErr, longVal, longErr)
	}
	if nodeState(c, f.addr).Down {
		t.Fatal("a caller's deadline marked the node down")
	}
	// A refill that fails: both the refilling call and the one waiting for it get 307 (the
	// refill of 10, then of exactly 1; the waiting call sends nothing).
	g := seqFake(t)
	c2 := newClient(t, Options{Nodes: []string{g.addr}, SequencePrefetch: 10})
	if _, err := c2.NextValue(bg(t, 5*time.Second), "orders"); err != nil {
		t.Fatal(err)
	}
	g.setSeq("orders", func(s *fakeSeq) { s.status, s.delay = StatusSequenceUsedUp, 200*time.Millisecond })
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, errs[i] = c2.NextValue(bg(t, 5*time.Second), "orders")
		}(i)
		time.Sleep(30 * time.Millisecond)
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, StatusSequenceUsedUp) {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if reqs := counts(g.valueRequests()); fmt.Sprint(reqs) != "[1 10 1]" {
		t.Fatalf("asked %v", reqs)
	}
}

func TestPrefetchBuffersAreBoundedAt1024NamesLeastRecentlyUsedFirst(t *testing.T) {
	f := seqFake(t)
	names := make([]string, maxSequenceBuffers+1)
	for i := range names {
		names[i] = fmt.Sprintf("s%04d", i)
		f.addSeq(names[i], SequenceDense, 1)
	}
	c := newClient(t, Options{Nodes: []string{f.addr}, SequencePrefetch: 4})
	next := func(name string) uint64 {
		t.Helper()
		v, err := c.NextValue(bg(t, 5*time.Second), name)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, name := range names[:maxSequenceBuffers] { // each: learn, then a buffer of 3
		next(name)
		next(name)
	}
	if n := c.seqs.size(); n != maxSequenceBuffers {
		t.Fatalf("%d names", n)
	}
	sent := len(f.valueRequests())
	next(names[0]) // from the buffer: names[0] is now the most recently used
	if len(f.valueRequests()) != sent {
		t.Fatal("a buffered call sent a request")
	}
	next(names[maxSequenceBuffers]) // a new name: names[1], least recently used, is forgotten
	if n := c.seqs.size(); n != maxSequenceBuffers {
		t.Fatalf("%d names", n)
	}
	sent = len(f.valueRequests())
	if v := next(names[0]); v != 4 || len(f.valueRequests()) != sent {
		t.Fatalf("names[0]: %d, %d requests", v, len(f.valueRequests())-sent)
	}
	// names[1] lost its buffer (3 to 5: a gap) and its mode: asks for exactly 1.
	if v := next(names[1]); v != 6 {
		t.Fatalf("names[1]: %d", v)
	}
	reqs := f.valueRequests()
	if last := reqs[len(reqs)-1]; last.name != names[1] || last.count != 1 {
		t.Fatalf("last request %+v", last)
	}
}

// Many goroutines over dense and strict sequences, more names than the client keeps, and
// calls of every size: unique values per sequence (run with -race).
func TestSequencePrefetchFromManyGoroutines(t *testing.T) {
	f := seqFake(t)
	const extra = maxSequenceBuffers + 100
	for i := 0; i < extra; i++ {
		f.addSeq(fmt.Sprintf("e%d", i), SequenceDense, 1)
	}
	c := newClient(t, Options{Nodes: []string{f.addr}, SequencePrefetch: 64})
	var mu sync.Mutex
	byName := map[string][][]uint64{}
	runGoroutines(t, 12, 120*time.Second, func(g int) ([]uint64, error) {
		mine := map[string][]uint64{}
		for i := 0; i < 150; i++ {
			var name string
			switch g % 3 {
			case 0:
				name = "orders"
			case 1:
				name = "ledger"
			default:
				name = fmt.Sprintf("e%d", (g*150+i)%extra)
			}
			vs, err := c.NextValues(bg(t, 10*time.Second), name, 1+(g+i)%90)
			if err != nil {
				return nil, err
			}
			if !increasing(vs) {
				return nil, fmt.Errorf("%s: %v", name, vs)
			}
			if len(mine[name]) > 0 && vs[0] <= mine[name][len(mine[name])-1] {
				return nil, fmt.Errorf("%s: %d after %d", name, vs[0], mine[name][len(mine[name])-1])
			}
			mine[name] = append(mine[name], vs...)
		}
		mu.Lock()
		for name, vs := range mine {
			byName[name] = append(byName[name], vs)
		}
		mu.Unlock()
		return nil, nil
	})
	for _, batches := range byName {
		checkUnique(t, batches...)
	}
	if n := c.seqs.size(); n > maxSequenceBuffers {
		t.Fatalf("%d names kept", n)
	}
	if c.Stats().ValuesBuffered == 0 {
		t.Fatal("nothing was answered from a buffer")
	}
	c.Close()
	if _, err := c.NextValue(bg(t, time.Second), "orders"); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}
