package idgen

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// clearClientEnv unsets (empties: an empty variable is unset) every IDGEN_CLIENT_* variable
// for the test.
func clearClientEnv(t *testing.T) {
	for _, name := range clientEnv {
		t.Setenv(name, "")
	}
}

// Real nodes configured from IDGEN_NODES alone (plain, then TLS with the IDGEN_CLIENT_*
// variables, mutual TLS included), and from URLs.
func TestRealNodeConfiguredFromTheEnvironmentAndFromAURL(t *testing.T) {
	certs := certsDir(t)
	plain := startNode(t)
	mutual := tlsNode(t, certs, true)
	ca, cert, key := filepath.Join(certs, "ca.crt"), filepath.Join(certs, "client.crt"), filepath.Join(certs, "client.key")
	// get takes n IDs from the client and checks whether it spoke TLS.
	get := func(name string, c *Client, err error, n int, wantTLS bool) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		defer c.Close()
		ids, err := c.NextIDs(bg(t, 10*time.Second), n)
		if err != nil || len(ids) != n || !increasing(ids) {
			t.Fatalf("%s: NextIDs: %v", name, err)
		}
		for _, st := range c.Nodes() {
			if st.Connected && (st.TLS != nil) != wantTLS {
				t.Fatalf("%s: %s: TLS %v, want %v", name, st.Addr, st.TLS != nil, wantTLS)
			}
		}
	}

	clearClientEnv(t)
	t.Setenv("IDGEN_NODES", plain.addr)
	c, err := NewClientFromEnv(Options{})
	get("IDGEN_NODES plain list", c, err, 10, false)

	t.Setenv("IDGEN_NODES", "idgen://"+plain.addr+"?connect_timeout_ms=3000&timeout_ms=2000")
	c, err = NewClientFromEnv(Options{Prefetch: 8})
	get("IDGEN_NODES URL", c, err, 5, false)
	if c.opts.ConnectTimeout != 3*time.Second || c.opts.RequestTimeout != 2*time.Second || c.opts.Prefetch != 8 {
		t.Fatalf("options from the URL: %+v", c.opts)
	}

	// TLS from the IDGEN_CLIENT_* variables: by name, and by address with the server name.
	t.Setenv("IDGEN_NODES", localhost(mutual.tlsAddr))
	t.Setenv("IDGEN_CLIENT_CA", ca)
	t.Setenv("IDGEN_CLIENT_CERT", cert)
	t.Setenv("IDGEN_CLIENT_KEY", key)
	c, err = NewClientFromEnv(Options{})
	get("IDGEN_CLIENT_CA/CERT/KEY", c, err, 10, true)
	t.Setenv("IDGEN_NODES", mutual.tlsAddr)
	t.Setenv("IDGEN_CLIENT_SERVER_NAME", "localhost")
	c, err = NewClientFromEnv(Options{})
	get("IDGEN_CLIENT_SERVER_NAME", c, err, 3, true)
	// Without the client certificate the mutual-TLS node refuses.
	t.Setenv("IDGEN_CLIENT_CERT", "")
	t.Setenv("IDGEN_CLIENT_KEY", "")
	c, err = NewClientFromEnv(Options{ConnectTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.NextID(bg(t, 10*time.Second)); err == nil {
		t.Fatal("a mutual-TLS node served a client without a certificate")
	}
	c.Close()
	// A URL in IDGEN_NODES next to IDGEN_CLIENT_* is refused before any connection.
	t.Setenv("IDGEN_NODES", "idgens://"+localhost(mutual.tlsAddr))
	if _, err := NewClientFromEnv(Options{}); err == nil || !strings.Contains(err.Error(), "IDGEN_CLIENT_CA") {
		t.Fatalf("URL and IDGEN_CLIENT_CA: %v", err)
	}
	clearClientEnv(t)

	// From a URL: mutual TLS, files percent-encoded.
	u := "idgens://" + localhost(mutual.tlsAddr) + "/?ca=" + url.QueryEscape(ca) + "&cert=" + url.QueryEscape(cert) + "&key=" + url.QueryEscape(key)
	c, err = NewClientFromURL(u, Options{})
	get("idgens:// URL", c, err, 10, true)
	c, err = NewClientFromURL("idgen://"+plain.addr+","+localhost(mutual.addr), Options{})
	get("idgen:// URL with two nodes", c, err, 10, false)
}

// expand=true against real nodes: `localhost` with a default Debian /etc/hosts (127.0.0.1
// and ::1, clients/with-debian-hosts.sh) names two nodes, one on each address on the same
// port; both serve, in the resolver's order, and TLS verifies the name localhost.
func TestRealNodesExpandANameToItsAddresses(t *testing.T) {
	if probe := os.Getenv("IDGEN_EXPAND_PROBE"); probe != "" {
		expandProbe(t, strings.Fields(probe))
		return
	}
	certs := certsDir(t)
	tlsArgs := []string{"--tls-cert", filepath.Join(certs, "server.crt"), "--tls-key", filepath.Join(certs, "server.key"), "--shards", "1"}
	v4 := startNode(t, append([]string{"--listen", "127.0.0.1:0", "--tls-listen", "127.0.0.1:0"}, tlsArgs...)...)
	portOf := func(a string) string { return a[strings.LastIndex(a, ":")+1:] }
	port, tlsPort := portOf(v4.addr), portOf(v4.tlsAddr)
	v6 := startNode(t, append([]string{"--listen", net.JoinHostPort("::1", port), "--tls-listen", net.JoinHostPort("::1", tlsPort)}, tlsArgs...)...)
	probe := fmt.Sprintf("%s %s %d %d", port, tlsPort, v4.cmd.Process.Pid, v6.cmd.Process.Pid)
	cmd := exec.Command("bash", filepath.Join(repoRoot(t), "clients", "with-debian-hosts.sh"),
		os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "IDGEN_EXPAND_PROBE="+probe)
	done := make(chan struct{})
	timer := time.AfterFunc(60*time.Second, func() {
		select {
		case <-done:
		default:
			cmd.Process.Kill()
		}
	})
	out, err := cmd.CombinedOutput()
	close(done)
	timer.Stop()
	if err != nil {
		t.Fatalf("probe failed (%v):\n%s", err, out)
	}
	if !strings.Contains(string(out), "expand probe: ok") {
		t.Fatalf("probe output lacks its verdict:\n%s", out)
	}
	t.Logf("probe:\n%s", out)
}

// expandProbe runs inside the Debian hosts namespace: PORT TLS_PORT PID_V4 PID_V6.
func expandProbe(t *testing.T, args []string) {
	if len(args) != 4 {
		t.Fatalf("probe arguments %q", args)
	}
	port, tlsPort := args[0], args[1]
	pids := map[string]int{}
	for i, key := range []string{net.JoinHostPort("127.0.0.1", port), net.JoinHostPort("::1", port)} {
		pid, err := strconv.Atoi(args[2+i])
		if err != nil {
			t.Fatal(err)
		}
		pids[key] = pid
	}
	resolved, err := net.DefaultResolver.LookupHost(bg(t, 5*time.Second), "localhost")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Go's resolver gives localhost as %v (it reads /etc/hosts in file order)", resolved)
	var want []string
	for _, a := range resolved {
		want = append(want, net.JoinHostPort(a, port))
	}
	sorted := append([]string(nil), want...)
	sort.Strings(sorted)
	if strings.Join(sorted, " ") != net.JoinHostPort("127.0.0.1", port)+" "+net.JoinHostPort("::1", port) {
		t.Fatalf("localhost resolves to %v here, not 127.0.0.1 and ::1", resolved)
	}

	// TLS: each address a node, the certificate verified for the name localhost.
	ca := url.QueryEscape(filepath.Join(certsDir(t), "ca.crt"))
	ct, err := NewClientFromURL("idgens://localhost:"+tlsPort+"?expand=true&ca="+ca, Options{ConnectTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer ct.Close()
	if _, err := ct.NextIDs(bg(t, 10*time.Second), 3); err != nil {
		t.Fatalf("TLS: %v", err)
	}
	for _, n := range ct.nodeList() {
		if n.tls.ServerName != "localhost" {
			t.Fatalf("TLS node %s verifies %q", n.addr, n.tls.ServerName)
		}
	}
	if got := len(ct.Nodes()); got != 2 {
		t.Fatalf("TLS: %d nodes", got)
	}

	hooks := &recordHooks{}
	c, err := NewClientFromURL("idgen://localhost:"+port+"?expand=true", Options{Hooks: hooks, ConnectTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := addrsOf(c); got != strings.Join(want, " ") {
		t.Fatalf("nodes %q, want %q (the resolver's order)", got, strings.Join(want, " "))
	}
	ctx := bg(t, 20*time.Second)
	if _, err := c.NextIDs(ctx, 5); err != nil {
		t.Fatal(err)
	}
	rq := hooks.named(EventRequest)
	first := rq[len(rq)-1].Node
	if first != want[0] {
		t.Fatalf("the first call went to %s, not the first node %s", first, want[0])
	}
	// The first node dies: the other address, a node of its own, serves.
	if err := syscall.Kill(pids[first], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := c.NextIDs(ctx, 5); err == nil {
			rq = hooks.named(EventRequest)
			if rq[len(rq)-1].Node == want[1] {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second node never served: %+v", hooks.named(EventRequest))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if fo := hooks.named(EventFailover); len(fo) == 0 || fo[0].From != want[0] || fo[0].To != want[1] {
		t.Fatalf("failover events: %+v", fo)
	}
	t.Logf("expand probe: ok (nodes %v, served by both)", want)
}
