package idgen

import (
	"context"
	"net"
	"time"
)

// Options.Expand: each address a configured name resolves to is a node of its own
// (clients/vectors/CONFIG.md, "Names with several addresses").

// nodeEntry is one configured node.
type nodeEntry struct {
	addr, host, port string
}

// resolveInterval is the least time between two resolutions.
const resolveInterval = time.Second

func (c *Client) newNode(addr, entry, host string) *node {
	n := &node{addr: addr, entry: entry}
	if c.opts.TLS != nil {
		n.tls = nodeTLS(c.opts.TLS, host) // the name given, never the address
	}
	return n
}

// nodeList is the current node list (never changed in place).
func (c *Client) nodeList() []*node {
	c.nodesMu.Lock()
	defer c.nodesMu.Unlock()
	return c.nodes
}

// resolveAll resolves every entry and returns the new node list: the entries in order, each
// replaced by its addresses in the resolver's order, duplicates removed. Nodes of old (the
// current list) are kept for the addresses still there; an entry whose name fails to
// resolve keeps its old nodes (or, with none, is one unresolved node: down). An address
// that is gone stays, marked gone, while its connection is up (dropped when it fails).
func (c *Client) resolveAll(ctx context.Context, old []*node) []*node {
	byAddr := map[string]*node{}
	for _, n := range old {
		byAddr[n.addr] = n
	}
	var list []*node
	seen := map[string]bool{}
	add := func(n *node) {
		if !seen[n.addr] {
			seen[n.addr] = true
			list = append(list, n)
		}
	}
	for _, e := range c.entries {
		var addrs []string
		if net.ParseIP(e.host) != nil {
			addrs = []string{e.host}
		} else {
			rctx, cancel := context.WithTimeout(ctx, c.opts.ConnectTimeout)
			got, err := c.lookup(rctx, e.host)
			cancel()
			if err != nil || len(got) == 0 {
				kept := false
				for _, n := range old {
					if n.entry == e.addr {
						add(n)
						kept = true
					}
				}
				if !kept {
					n := c.newNode(e.addr, e.addr, e.host)
					n.unresolved = true
					add(n)
				}
				continue
			}
			addrs = got
		}
		now := map[string]bool{}
		for _, a := range addrs {
			addr := net.JoinHostPort(a, e.port)
			now[addr] = true
			n := byAddr[addr]
			if n == nil || n.entry != e.addr {
				n = c.newNode(addr, e.addr, e.host)
			}
			n.mu.Lock()
			n.gone = false
			n.mu.Unlock()
			add(n)
		}
		for _, n := range old {
			if n.entry != e.addr || now[n.addr] || n.unresolved {
				continue
			}
			n.mu.Lock()
			up := n.conn != nil && n.conn.alive() && !n.downUntil.After(time.Now())
			n.gone = true
			n.mu.Unlock()
			if up {
				add(n)
			}
		}
	}
	return list
}

// maybeResolve starts a resolution in the background unless one ran less than a second ago
// or is running.
func (c *Client) maybeResolve() {
	c.resolveMu.Lock()
	if c.resolving || time.Since(c.lastResolve) < resolveInterval {
		c.resolveMu.Unlock()
		return
	}
	c.resolving = true
	c.lastResolve = time.Now()
	c.resolveMu.Unlock()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		list := c.resolveAll(c.base, c.nodeList())
		c.resolveMu.Lock()
		c.resolving = false
		c.lastResolve = time.Now()
		c.resolveMu.Unlock()
		if c.closed.Load() {
			return
		}
		c.setNodes(list)
	}()
}

// setNodes makes list the node list; nodes left out are closed.
func (c *Client) setNodes(list []*node) {
	keep := map[*node]bool{}
	for _, n := range list {
		keep[n] = true
	}
	c.nodesMu.Lock()
	old := c.nodes
	c.nodes = list
	c.nodesMu.Unlock()
	for _, n := range old {
		if !keep[n] {
			c.retire(n)
		}
	}
}

// removeNode drops n (an address its name no longer resolves to, whose connection failed).
func (c *Client) removeNode(n *node) {
	c.nodesMu.Lock()
	var list []*node
	for _, m := range c.nodes {
		if m != n {
			list = append(list, m)
		}
	}
	if len(list) == len(c.nodes) || len(list) == 0 {
		c.nodesMu.Unlock()
		return // not in the list, or the last node: kept (down) until a resolution replaces it
	}
	c.nodes = list
	c.nodesMu.Unlock()
	c.retire(n)
}

// retire closes a node that left the list.
func (c *Client) retire(n *node) {
	n.mu.Lock()
	n.removed = true
	cc := n.conn
	n.conn = nil
	n.mu.Unlock()
	if cc != nil {
		cc.close()
	}
}
