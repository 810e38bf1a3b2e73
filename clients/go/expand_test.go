package idgen

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeResolver answers lookups from a table it can change, counting them.
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string][]string
	lookups int
}

func (r *fakeResolver) set(host string, addrs ...string) {
	r.mu.Lock()
	r.answers[host] = addrs
	r.mu.Unlock()
}

func (r *fakeResolver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lookups
}

func (r *fakeResolver) lookup(_ context.Context, host string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lookups++
	if a := r.answers[host]; len(a) > 0 {
		return append([]string(nil), a...), nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// fakeAt starts a serving fake node on ip:port (port "0": any).
func fakeAt(t *testing.T, ip, port string) *fakeNode {
	return startFake(t, &fakeNode{addr: net.JoinHostPort(ip, port), hello: defaultHello(), mode: "serve", status: StatusUnavailableLease})
}

func addrsOf(c *Client) string {
	var out []string
	for _, n := range c.Nodes() {
		out = append(out, n.Addr)
	}
	return strings.Join(out, " ")
}

// expand=true: each address is a node, in the resolver's order (duplicates removed), TLS
// verifies the name; a node failing re-resolves the name (at most once a second), adding
// what appeared and dropping what is gone.
func TestExpandMakesEachAddressANodeAndReResolvesOnFailure(t *testing.T) {
	a := fakeAt(t, "127.0.0.2", "0")
	_, port, _ := net.SplitHostPort(a.addr)
	b := fakeAt(t, "127.0.0.3", port)
	r := &fakeResolver{answers: map[string][]string{}}
	r.set("idgen-headless.test", "127.0.0.2", "127.0.0.3", "127.0.0.2")
	entry := "idgen-headless.test:" + port
	hooks := &recordHooks{}
	c := newClient(t, Options{Nodes: []string{entry, "127.0.0.3:" + port}, Expand: true, lookup: r.lookup,
		Hooks: hooks, BackoffMin: 10 * time.Second, BackoffMax: 10 * time.Second})
	if got, want := addrsOf(c), a.addr+" "+b.addr; got != want {
		t.Fatalf("nodes %q, want %q (the literal 127.0.0.3 entry is a duplicate)", got, want)
	}
	for _, n := range c.Nodes() {
		if n.Entry != entry {
			t.Fatalf("node %s: entry %q", n.Addr, n.Entry)
		}
	}
	ctx := bg(t, 5*time.Second)
	if _, err := c.NextIDs(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if rq := hooks.named(EventRequest); len(rq) != 1 || rq[0].Node != a.addr {
		t.Fatalf("the first node serves first: %+v", rq)
	}

	// The name now resolves to b and a new c; a goes down.
	cNode := fakeAt(t, "127.0.0.4", port)
	r.set("idgen-headless.test", "127.0.0.3", "127.0.0.4")
	before := r.count()
	a.kill()
	if _, err := c.NextIDs(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if rq := hooks.named(EventRequest); rq[len(rq)-1].Node != b.addr {
		t.Fatalf("after a failed: %+v", rq[len(rq)-1])
	}
	want := b.addr + " " + cNode.addr
	deadline := time.Now().Add(5 * time.Second)
	for addrsOf(c) != want {
		if time.Now().After(deadline) {
			t.Fatalf("after the re-resolution: %q, want %q", addrsOf(c), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := r.count() - before; got != 1 {
		t.Fatalf("%d lookups after one failure, want 1", got)
	}
	// b fails too, within the second: no new lookup; c serves.
	b.kill()
	if _, err := c.NextIDs(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if rq := hooks.named(EventRequest); rq[len(rq)-1].Node != cNode.addr {
		t.Fatalf("after b failed: %+v", rq[len(rq)-1])
	}
	time.Sleep(50 * time.Millisecond)
	if got := r.count() - before; got != 1 {
		t.Fatalf("%d lookups within a second, want 1", got)
	}

	// TLS verifies (and sends as SNI) the name, never the address.
	ct := newClient(t, Options{Nodes: []string{entry}, Expand: true, lookup: r.lookup, TLS: &tls.Config{}})
	for _, n := range ct.nodeList() {
		if n.tls.ServerName != "idgen-headless.test" {
			t.Fatalf("%s: TLS server name %q", n.addr, n.tls.ServerName)
		}
	}
}

// A name that resolves to nothing is a node that is down, not an error at construction;
// once it resolves, its addresses serve.
func TestExpandANameThatResolvesToNothingIsADownNode(t *testing.T) {
	a := fakeAt(t, "127.0.0.2", "0")
	_, port, _ := net.SplitHostPort(a.addr)
	r := &fakeResolver{answers: map[string][]string{}}
	entry := "later.test:" + port
	c := newClient(t, Options{Nodes: []string{entry}, Expand: true, lookup: r.lookup, BackoffMin: time.Millisecond})
	if got := addrsOf(c); got != entry {
		t.Fatalf("nodes %q", got)
	}
	ctx := bg(t, 5*time.Second)
	if _, err := c.NextIDs(ctx, 1); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "resolves to no address") {
		t.Fatalf("unresolved: %v", err)
	}
	r.set("later.test", "127.0.0.2")
	deadline := time.Now().Add(5 * time.Second)
	for {
		time.Sleep(resolveInterval / 10)
		_, err := c.NextIDs(ctx, 1)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never served after the name resolved: %v (nodes %s)", err, addrsOf(c))
		}
	}
	if got := addrsOf(c); got != a.addr {
		t.Fatalf("nodes %q, want %s", got, a.addr)
	}
}
