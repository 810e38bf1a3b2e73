package idgen

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
)

// Named sequences (protocol version 3, clients/vectors/SEQUENCES.md): NextValue and
// NextValues ask a node for values of a sequence an operator created with `idgen seq
// create`, and, with Options.SequencePrefetch, keep the rest of larger answers of dense
// sequences in a buffer per name.

// maxSequenceBuffers is how many sequence names a client keeps buffers (and modes) for: the
// namespace's bound. The least recently used name is forgotten beyond it.
const maxSequenceBuffers = 1024

// checkSequenceName reports whether name is 1 to 64 bytes of a-z, 0-9, '.', '_' and '-',
// the first a letter or a digit.
func checkSequenceName(name string) error {
	if len(name) == 0 || len(name) > MaxSequenceName {
		return argError("sequence name %q: must be 1 to %d bytes long, not %d", name, MaxSequenceName, len(name))
	}
	for i := 0; i < len(name); i++ {
		b := name[i]
		alnum := (b >= 'a' && b <= 'z') || (b >= '0' && b <= '9')
		if i == 0 && !alnum {
			return argError("sequence name %q: must start with a-z or 0-9", name)
		}
		if !alnum && b != '.' && b != '_' && b != '-' {
			return argError("sequence name %q: byte %d (%q) is not one of a-z, 0-9, '.', '_', '-'", name, i, b)
		}
	}
	return nil
}

// checkValuesCount checks a call's n before any node is asked.
func checkValuesCount(n int) error {
	if n < 1 || n > MaxValuesPerCall {
		return argError("NextValues: n = %d: must be in 1..=%d", n, MaxValuesPerCall)
	}
	return nil
}

// checkValuesRequest checks, against the connection's HELLO_OK, a GET_VALUES of n values of
// name (already a valid name) before it is sent: the version, max_batch and the request
// frame limit.
func checkValuesRequest(h ServerHello, node, name string, n int) error {
	if h.Version < 3 {
		return &VersionError{Node: node, Version: h.Version}
	}
	if n > int(h.MaxBatch) {
		return argError("%s: NextValues: n = %d is above the node's max_batch %d", node, n, h.MaxBatch)
	}
	if frame := 5 + len(name); uint64(frame) > uint64(h.MaxRequestFrame) {
		return argError("%s: sequence name %q: its GET_VALUES frame of %d bytes is above the node's max_request_frame %d", node, name, frame, h.MaxRequestFrame)
	}
	return nil
}

// NextValue returns the next value of the named sequence: a positive integer below 2^63 (it
// fits an int64 / BIGINT). See NextValues.
func (c *Client) NextValue(ctx context.Context, name string) (uint64, error) {
	v, err := c.NextValues(ctx, name, 1)
	if err != nil {
		return 0, err
	}
	return v[0], nil
}

// NextValues returns n values of the named sequence, strictly increasing, all or nothing:
// 1 <= n <= the node's max_batch (65536 by default) and at most 1048576.
//
// Errors: a bad name or n fails with ErrInvalidArgument before anything is sent; a node
// that speaks protocol version 1 or 2 with a *VersionError (ErrSequencesUnsupported), at
// once, nothing sent and no other node tried. A *ServerError with 203 UNKNOWN_SEQUENCE, 204
// INVALID_SEQUENCE_NAME, 307 SEQUENCE_USED_UP, 200 or 201 is returned at once (every node
// would answer the same); 308 SEQUENCE_UNAVAILABLE, 306 BUSY and the other retry-elsewhere
// statuses, closed or stalled connections fail over like NextIDs. A retried call asks
// again: values are never re-sent, so a retry cannot duplicate a value (it may leave a gap).
//
// With Options.SequencePrefetch set, a dense sequence's calls are answered from a buffer
// of values asked for ahead (see Options.SequencePrefetch); a strict sequence's never.
func (c *Client) NextValues(ctx context.Context, name string, n int) ([]uint64, error) {
	if err := checkSequenceName(name); err != nil {
		return nil, err
	}
	if err := checkValuesCount(n); err != nil {
		return nil, err
	}
	if c.closed.Load() {
		return nil, c.errClosed()
	}
	if c.opts.MaxVersion < 3 {
		return nil, &VersionError{Version: c.opts.MaxVersion}
	}
	if c.seqs == nil {
		values, _, err := c.fetchValues(ctx, name, n, n)
		return values, err
	}
	return c.bufferedValues(ctx, name, n)
}

// fetchValues sends one GET_VALUES (with failover) for at least need and, the node's
// max_batch permitting, want values; it returns them and the sequence's mode.
func (c *Client) fetchValues(ctx context.Context, name string, need, want int) ([]uint64, SequenceMode, error) {
	var values []uint64
	var mode SequenceMode
	err := c.withFailover(ctx, "values", need, func(cc *conn) error {
		if err := checkValuesRequest(cc.hello, cc.node, name, need); err != nil {
			return err
		}
		count := want
		if count > int(cc.hello.MaxBatch) {
			count = int(cc.hello.MaxBatch)
		}
		if count < need {
			count = need
		}
		r := newRequest(1)
		s := &r.slots[0]
		s.op, s.name, s.dst = opGetValues, name, make([]uint64, count)
		if err := cc.submit(r); err != nil {
			return err
		}
		c.stats.valueRequests.Add(1)
		if err := r.wait(ctx, cc.node); err != nil {
			return err
		}
		values, mode = s.dst, s.mode // written by the reader before r.done closed
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return values, mode, nil
}

// ---- prefetch buffers (dense sequences only) ------------------------------------------

// seqBuffers are the per-name buffers of a client with SequencePrefetch: one mutex over a
// map and an LRU list of at most maxSequenceBuffers names. Values leave a buffer in
// increasing order, each to exactly one call. At most one request refills a name's buffer
// at a time; callers that need more than it holds wait for that request (or their context).
type seqBuffers struct {
	k int

	mu    sync.Mutex
	names map[string]*seqEntry
	lru   *list.List // of *seqEntry, most recently used first
}

type seqEntry struct {
	name  string
	known bool         // mode learned from a VALUES
	mode  SequenceMode // when known
	vals  []uint64     // the buffer: vals[head:], strictly increasing (dense only)
	head  int
	// fetch is non-nil while a request refilling the buffer is in flight; it is closed when
	// that request ends. gen counts the ended ones; lastErr is the error of the last one
	// (nil on success, or when the error belonged to its own caller: its context ended, or
	// its n did not fit the node).
	fetch   chan struct{}
	gen     uint64
	lastErr error
	elem    *list.Element
}

func newSeqBuffers(k int) *seqBuffers {
	return &seqBuffers{k: k, names: make(map[string]*seqEntry), lru: list.New()}
}

func (e *seqEntry) avail() int { return len(e.vals) - e.head }

// take hands out the buffer's first n values (n <= avail).
func (e *seqEntry) take(n int) []uint64 {
	out := append([]uint64(nil), e.vals[e.head:e.head+n]...)
	e.head += n
	if e.head == len(e.vals) {
		e.vals, e.head = e.vals[:0], 0
	}
	return out
}

// forget empties the buffer and forgets the mode (the sequence is unknown now: dropped, or
// never created).
func (e *seqEntry) forget() {
	e.vals, e.head, e.known = nil, 0, false
}

// entry is name's entry, created if needed, marked most recently used; the least recently
// used name beyond maxSequenceBuffers is forgotten (its values are lost: a gap). Called
// with b.mu held.
func (b *seqBuffers) entry(name string) *seqEntry {
	if e, ok := b.names[name]; ok {
		b.lru.MoveToFront(e.elem)
		return e
	}
	e := &seqEntry{name: name}
	e.elem = b.lru.PushFront(e)
	b.names[name] = e
	for b.lru.Len() > maxSequenceBuffers {
		old := b.lru.Back().Value.(*seqEntry)
		b.lru.Remove(old.elem)
		delete(b.names, old.name)
		old.forget()
	}
	return e
}

// learn records what a call that asked for exactly its own values met: the mode of a VALUES,
// or UNKNOWN_SEQUENCE (forget the name's buffer and mode).
func (b *seqBuffers) learn(name string, mode SequenceMode, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case err == nil:
		e := b.entry(name)
		if e.known && e.mode != mode {
			e.forget() // the sequence was dropped and created again with another mode
		}
		e.known, e.mode = true, mode
	case errors.Is(err, StatusUnknownSequence):
		if e, ok := b.names[name]; ok {
			e.forget()
		}
	}
}

// size is how many names have an entry (for tests).
func (b *seqBuffers) size() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.names)
}

// clear drops every buffer (Close).
func (b *seqBuffers) clear() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.names {
		e.forget()
	}
	b.names = make(map[string]*seqEntry)
	b.lru.Init()
}

// firstValues is a call for a name whose mode is not known (called with b.mu held, and
// releasing it): it asks for exactly n and learns the mode. It is the name's only request in
// flight (e.fetch): calls of the name made meanwhile wait for it, and then share one refill
// (dense) or ask for themselves (strict). Were first calls sent side by side, one could be
// answered with values above those another call had meanwhile fetched into the buffer, and
// its caller's next call would get a smaller value from the buffer.
func (c *Client) firstValues(ctx context.Context, e *seqEntry, n int) ([]uint64, error) {
	b := c.seqs
	ch := make(chan struct{})
	e.fetch = ch
	b.mu.Unlock()

	values, mode, err := c.fetchValues(ctx, e.name, n, n)

	b.mu.Lock()
	defer b.mu.Unlock()
	e.fetch = nil
	e.gen++
	close(ch)
	e.lastErr = err
	if err != nil && (ctx.Err() != nil || errors.Is(err, ErrInvalidArgument)) {
		e.lastErr = nil // this call's own fault: the callers waiting try for themselves
	}
	switch {
	case errors.Is(err, StatusUnknownSequence):
		e.forget()
	case err == nil:
		// Values still buffered while the mode was unknown (a refill that ended after the
		// name was forgotten) are older than this answer's: dropped (a gap), so that what
		// this caller gets next does not go down.
		e.forget()
		e.known, e.mode = true, mode
	}
	return values, err
}

// bufferedValues is NextValues with prefetch buffers.
func (c *Client) bufferedValues(ctx context.Context, name string, n int) ([]uint64, error) {
	b := c.seqs
	// Each turn either returns or waits for a request that ended (one per turn at most: a
	// turn that finds none in flight sends one itself), so the loop ends with the calls.
	for {
		b.mu.Lock()
		e := b.entry(name)
		if e.known && e.mode == SequenceStrict {
			// A strict sequence's calls always ask for exactly what they need, side by side.
			b.mu.Unlock()
			values, mode, err := c.fetchValues(ctx, name, n, n)
			b.learn(name, mode, err)
			return values, err
		}
		if !e.known && e.fetch == nil {
			return c.firstValues(ctx, e, n)
		}
		if e.known && e.avail() >= n {
			out := e.take(n)
			b.mu.Unlock()
			c.stats.valuesBuffered.Add(int64(n))
			return out, nil
		}
		if ch := e.fetch; ch != nil {
			// A refill, or while the mode is unknown the name's first call, is in flight.
			seen := e.gen
			b.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return nil, ctxError(ctx, "")
			}
			b.mu.Lock()
			err := e.lastErr
			failed := e.gen != seen && err != nil
			b.mu.Unlock()
			if failed {
				return nil, err // the request this call waited for failed
			}
			continue
		}
		// Refill: ask for max(K, n) (the node's max_batch permitting), answer this call with
		// the buffer's first n and keep the rest.
		ch := make(chan struct{})
		e.fetch = ch
		want := b.k
		if want < n {
			want = n
		}
		b.mu.Unlock()

		values, mode, err := c.fetchValues(ctx, name, n, want)
		var used *ServerError
		if errors.As(err, &used) && used.Status == StatusSequenceUsedUp && want > n && ctx.Err() == nil {
			// Fewer than want values are left below the maximum: ask for exactly n.
			values, mode, err = c.fetchValues(ctx, name, n, n)
		}

		b.mu.Lock()
		e.fetch = nil
		e.gen++
		close(ch)
		e.lastErr = err
		if err != nil && (ctx.Err() != nil || errors.Is(err, ErrInvalidArgument)) {
			e.lastErr = nil // this call's own fault: the callers waiting try for themselves
		}
		switch {
		case err != nil:
			if errors.Is(err, StatusUnknownSequence) {
				e.forget()
			}
			b.mu.Unlock()
			return nil, err
		case mode == SequenceStrict:
			// Created again as strict since the mode was learned: its values must not be
			// kept, nor handed to a call other than the one that asked (these were asked
			// for the buffer): dropped (a gap), and the call asks again for itself.
			e.forget()
			e.known, e.mode = true, SequenceStrict
			b.mu.Unlock()
			continue
		}
		if e.avail() > 0 && values[0] <= e.vals[len(e.vals)-1] {
			// Another node answered (a failover) with values below the buffer's: the buffer's
			// are dropped (a gap), so that what leaves the buffer keeps increasing.
			e.vals, e.head = e.vals[:0], 0
		}
		if e.head > 0 {
			e.vals = append(e.vals[:0], e.vals[e.head:]...)
			e.head = 0
		}
		e.vals = append(e.vals, values...)
		if e.avail() < n { // cannot happen: values holds at least n
			b.mu.Unlock()
			return nil, &ProtocolError{Detail: fmt.Sprintf("VALUES of %d for a call of %d", len(values), n)}
		}
		out := e.take(n)
		b.mu.Unlock()
		return out, nil
	}
}
