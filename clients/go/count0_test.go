package idgen

import (
	"errors"
	"testing"
	"time"
)

// CONFIG.md "Count 0": every call that takes a count refuses 0 (like a negative count or one
// above the limit) with ErrInvalidArgument before anything is sent; none returns an empty
// batch.
func TestEveryCountedCallRefusesZeroBeforeSending(t *testing.T) {
	h := defaultHello()
	h.Version, h.MaxRequestFrame = 5, 128
	for _, prefetch := range []int{0, 8} {
		f := newFake(t, h, "serve")
		c := newClient(t, Options{Nodes: []string{f.addr}, Prefetch: prefetch, SequencePrefetch: prefetch})
		ctx := bg(t, 5*time.Second)
		calls := map[string]func(n int) (int, error){
			"NextIDs":         func(n int) (int, error) { v, err := c.NextIDs(ctx, n); return len(v), err },
			"NextIDsInt64":    func(n int) (int, error) { v, err := c.NextIDsInt64(ctx, n); return len(v), err },
			"NextUUIDs":       func(n int) (int, error) { v, err := c.NextUUIDs(ctx, n); return len(v), err },
			"NextValues":      func(n int) (int, error) { v, err := c.NextValues(ctx, "orders", n); return len(v), err },
			"NextValuesInt64": func(n int) (int, error) { v, err := c.NextValuesInt64(ctx, "orders", n); return len(v), err },
			"NextIDsWith": func(n int) (int, error) {
				v, err := c.NextIDsWith(ctx, n, IDOptions{After: 1})
				return len(v), err
			},
			"NextIDsWithInt64": func(n int) (int, error) {
				v, err := c.NextIDsWithInt64(ctx, n, IDOptions{})
				return len(v), err
			},
			"NextMaskedIDs": func(n int) (int, error) {
				v, err := c.NextMaskedIDs(ctx, n, IDOptions{})
				return len(v.Values), err
			},
		}
		for name, call := range calls {
			for _, n := range []int{0, -1, maxIDsPerCall + 1} {
				got, err := call(n)
				if !errors.Is(err, ErrInvalidArgument) || got != 0 {
					t.Errorf("prefetch %d: %s(%d): %d results, %v", prefetch, name, n, got, err)
				}
			}
		}
		// Nothing was sent (with a prefetch pool the client refills it in the background,
		// so the node's counters prove nothing there).
		if prefetch == 0 {
			if conns, reqs := f.counts(); conns != 0 || reqs != 0 {
				t.Errorf("the refused calls reached the node: %d connections, %d requests", conns, reqs)
			}
		}
	}
}
