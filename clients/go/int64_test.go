package idgen

import (
	"errors"
	"testing"
	"time"
)

// The int64 forms hand out the same IDs and values as the uint64 calls, exact up to the
// largest, 2^63 - 1, and refuse what the uint64 calls refuse.
func TestInt64FormsAreExactUpToTheLargestIDAndValue(t *testing.T) {
	const top = 1<<63 - 1
	for _, prefetch := range []int{0, 4} {
		f := startFake(t, &fakeNode{hello: seqHello(), mode: "serve", status: StatusUnavailableLease, nextID: top - 30})
		f.addSeq("orders", SequenceDense, top-30)
		f.addSeq("ledger", SequenceStrict, 1)
		c := newClient(t, Options{Nodes: []string{f.addr}, Prefetch: prefetch, SequencePrefetch: prefetch})
		ctx := bg(t, 5*time.Second)

		ids, err := c.NextIDsInt64(ctx, 5)
		if err != nil || len(ids) != 5 || ids[0] <= 0 {
			t.Fatalf("prefetch %d: NextIDsInt64: %v %v", prefetch, ids, err)
		}
		f.mu.Lock()
		sent := append([]uint64(nil), f.idsByConn[0]...)
		f.mu.Unlock()
		for i, id := range ids {
			if uint64(id) != sent[i] {
				t.Fatalf("prefetch %d: ID %d is %d, the node sent %d", prefetch, i, id, sent[i])
			}
		}
		id, err := c.NextIDInt64(ctx)
		if err != nil || id <= ids[4] {
			t.Fatalf("prefetch %d: NextIDInt64: %d %v", prefetch, id, err)
		}

		vs, err := c.NextValuesInt64(ctx, "orders", 3)
		if err != nil || len(vs) != 3 || vs[0] != top-30 || vs[2] != top-28 {
			t.Fatalf("prefetch %d: NextValuesInt64: %v %v", prefetch, vs, err)
		}
		v, err := c.NextValueInt64(ctx, "orders")
		if err != nil || v != top-27 {
			t.Fatalf("prefetch %d: NextValueInt64: %d %v", prefetch, v, err)
		}
		// The largest value a sequence can hold comes back as the largest int64.
		f.setSeq("ledger", func(s *fakeSeq) { s.next = top - 1 })
		last, err := c.NextValuesInt64(ctx, "ledger", 2)
		if err != nil || len(last) != 2 || last[0] != top-1 || last[1] != top {
			t.Fatalf("prefetch %d: the top values: %v %v", prefetch, last, err)
		}

		if _, err := c.NextIDsInt64(ctx, 0); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("prefetch %d: NextIDsInt64(0): %v", prefetch, err)
		}
		if _, err := c.NextValuesInt64(ctx, "Bad", 1); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("prefetch %d: NextValuesInt64 of a bad name: %v", prefetch, err)
		}
		if _, err := c.NextValueInt64(ctx, "nope"); !errors.Is(err, StatusUnknownSequence) {
			t.Fatalf("prefetch %d: NextValueInt64 of an unknown name: %v", prefetch, err)
		}
		c.Close()
		if _, err := c.NextIDInt64(ctx); !errors.Is(err, ErrClosed) {
			t.Fatalf("prefetch %d: after Close: %v", prefetch, err)
		}
	}
}

// A node that answers an ID with the top bit set (above every layout's 63 bits) fails the
// call with a protocol error, in IDS (version 1) and RANGES (version 2) alike: no int64 form
// ever returns a negative number.
func TestAnIDWithTheTopBitSetFailsClearly(t *testing.T) {
	for _, version := range []uint16{1, 2} {
		h := defaultHello()
		h.Version = version
		f := startFake(t, &fakeNode{hello: h, mode: "serve", status: StatusUnavailableLease, nextID: 1<<63 - 2})
		c := newClient(t, Options{Nodes: []string{f.addr}})
		ids, err := c.NextIDsInt64(bg(t, 5*time.Second), 5)
		if !errors.Is(err, ErrProtocol) || ids != nil {
			t.Fatalf("version %d: IDs past 2^63: %v %v", version, ids, err)
		}
		t.Logf("version %d: %v", version, err)
	}
}
