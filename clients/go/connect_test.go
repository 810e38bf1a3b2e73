package idgen

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// clients/vectors/connect.json: a node listening on one loopback address only is reached
// through a name that resolves to both (::1 first, then 127.0.0.1), in plaintext and over TLS
// verified for that name. The nodes run in the parent test; the test binary then re-runs this
// test (the probe half, IDGEN_CONNECT_PROBE set) in a mount namespace with a default Debian
// /etc/hosts (clients/with-debian-hosts.sh), where it connects.
func TestANameThatResolvesToSeveralAddressesReachesTheNodeOnAnyOfThem(t *testing.T) {
	if targets := os.Getenv("IDGEN_CONNECT_PROBE"); targets != "" {
		connectProbe(t, strings.Fields(targets))
		return
	}
	var v struct {
		Cases []struct{ Name, Listen, Dial string }
	}
	loadJSON(t, "clients/vectors/connect.json", &v)
	if len(v.Cases) == 0 {
		t.Fatal("connect.json has no cases")
	}
	certs := certsDir(t)
	var targets []string
	for _, c := range v.Cases {
		bind := c.Listen + ":0"
		if strings.Contains(c.Listen, ":") {
			bind = "[" + c.Listen + "]:0"
		}
		n := startNode(t, "--listen", bind, "--tls-listen", bind, "--shards", "1",
			"--tls-cert", filepath.Join(certs, "server.crt"), "--tls-key", filepath.Join(certs, "server.key"))
		port := func(a string) string { return a[strings.LastIndex(a, ":")+1:] }
		targets = append(targets, "plain="+c.Dial+":"+port(n.addr), "tls="+c.Dial+":"+port(n.tlsAddr))
	}
	cmd := exec.Command("bash", filepath.Join(repoRoot(t), "clients", "with-debian-hosts.sh"),
		os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "IDGEN_CONNECT_PROBE="+strings.Join(targets, " "))
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
	if want := fmt.Sprintf("connected: %d", len(targets)); !strings.Contains(string(out), want) {
		t.Fatalf("probe output lacks %q:\n%s", want, out)
	}
}

// connectProbe gets IDs from each of targets (plain=HOST:PORT or tls=HOST:PORT).
func connectProbe(t *testing.T, targets []string) {
	pem, err := os.ReadFile(filepath.Join(certsDir(t), "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatal("ca.crt holds no certificate")
	}
	for _, target := range targets {
		kind, addr, _ := strings.Cut(target, "=")
		opts := Options{Nodes: []string{addr}, ConnectTimeout: 5 * time.Second}
		if kind == "tls" {
			opts.TLS = &tls.Config{RootCAs: roots}
		}
		c := newClient(t, opts)
		ids, err := c.NextIDs(bg(t, 10*time.Second), 3)
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		t.Logf("%s: ids %d..%d", target, ids[0], ids[2])
	}
	t.Logf("connected: %d", len(targets))
}
