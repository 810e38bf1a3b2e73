package idgen

import (
	"context"
	"sync"
	"time"
)

// The prefetch pool: IDs fetched ahead of time by one refill goroutine and handed out by
// NextID under one mutex, each at most once whatever the number of goroutines. A refill
// starts when the pool drops below LowWater (or is empty); callers finding it empty wait
// for the refill (or their context). A refill that fails hands its error to the callers
// that waited for it.

type pool struct {
	size, low int

	mu      sync.Mutex
	ids     []uint64
	head    int
	wanted  bool
	gen     uint64 // refills completed
	lastErr error  // of the last refill
	changed chan struct{}
	closed  bool

	kick chan struct{}
	stop chan struct{}
}

func newPool(size, low int) *pool {
	return &pool{size: size, low: low, changed: make(chan struct{}),
		kick: make(chan struct{}, 1), stop: make(chan struct{})}
}

func (p *pool) wantRefill() {
	if !p.wanted {
		p.wanted = true
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

func (p *pool) close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		p.ids, p.head = nil, 0
		close(p.stop)
		close(p.changed)
	}
	p.mu.Unlock()
}

func (c *Client) poolNext(ctx context.Context) (uint64, error) {
	p := c.pool
	p.mu.Lock()
	seen := p.gen
	for {
		if p.closed {
			p.mu.Unlock()
			return 0, c.errClosed()
		}
		if p.head < len(p.ids) {
			id := p.ids[p.head]
			p.head++
			if len(p.ids)-p.head < p.low {
				p.wantRefill()
			}
			p.mu.Unlock()
			c.stats.prefetchServed.Add(1)
			return id, nil
		}
		if p.gen != seen && p.lastErr != nil {
			err := p.lastErr
			p.mu.Unlock()
			return 0, err
		}
		p.wantRefill()
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, ctxError(ctx, "")
		}
		p.mu.Lock()
	}
}

func (c *Client) refillLoop() {
	defer c.wg.Done()
	p := c.pool
	// A refill tries each node at most once, each within its timeouts.
	parts := p.size/DefaultMaxBatch + 2
	bound := (c.opts.ConnectTimeout+c.opts.RequestTimeout*time.Duration(parts))*time.Duration(len(c.nodeList())) + time.Second
	for {
		select {
		case <-p.kick:
		case <-p.stop:
			return
		}
		p.mu.Lock()
		want := p.size - (len(p.ids) - p.head)
		p.mu.Unlock()
		var ids []uint64
		var err error
		if want > 0 {
			ctx, cancel := context.WithTimeout(c.base, bound)
			ids, err = c.NextIDs(ctx, want)
			cancel()
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return
		}
		p.ids = append(p.ids[:0], p.ids[p.head:]...)
		p.head = 0
		p.ids = append(p.ids, ids...)
		p.gen++
		p.lastErr = err
		p.wanted = false
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
		if len(ids) > 0 {
			c.stats.prefetchRefills.Add(1)
		}
		if err != nil {
			// Do not spin on a cluster that is down: callers ask for the next refill.
			pause := c.opts.BackoffMin
			if pause > 200*time.Millisecond {
				pause = 200 * time.Millisecond
			}
			select {
			case <-time.After(pause):
			case <-p.stop:
				return
			}
		}
	}
}
