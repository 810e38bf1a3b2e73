package idgen

import (
	"crypto/tls"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TLS and mutual TLS: against a real node's TLS listener, and against fake TLS nodes for
// the server-side faults a real node cannot be made to show.

func tlsConf(t *testing.T, certs string, f TLSFiles) *tls.Config {
	t.Helper()
	if f.CA == "" {
		f.CA = "ca.crt"
	}
	f.CA = filepath.Join(certs, f.CA)
	if f.Cert != "" {
		f.Cert, f.Key = filepath.Join(certs, f.Cert), filepath.Join(certs, f.Key)
	}
	conf, err := LoadTLSConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	return conf
}

func localhost(addr string) string {
	return "localhost:" + addr[strings.LastIndex(addr, ":")+1:]
}

func tlsNode(t *testing.T, certs string, mutual bool) *realNode {
	args := []string{"--tls-listen", "127.0.0.1:0",
		"--tls-cert", filepath.Join(certs, "server.crt"), "--tls-key", filepath.Join(certs, "server.key")}
	if mutual {
		args = append(args, "--tls-client-ca", filepath.Join(certs, "ca.crt"))
	}
	return startNode(t, args...)
}

func expectTLSError(t *testing.T, opts Options, kinds ...TLSErrorKind) *TLSError {
	t.Helper()
	opts.ConnectTimeout = 5 * time.Second
	c := newClient(t, opts)
	_, err := c.NextID(bg(t, 10*time.Second))
	var te *TLSError
	if !errors.As(err, &te) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("want a TLSError, got %v", err)
	}
	for _, k := range kinds {
		if te.Kind == k {
			if !nodeState(c, opts.Nodes[0]).Down {
				t.Fatal("a node whose TLS fails is marked down")
			}
			return te
		}
	}
	t.Fatalf("TLS error kind %q (%v), want one of %v", te.Kind, te, kinds)
	return nil
}

func TestRealNodeOverTLSByNameAndByAddressWithALPN(t *testing.T) {
	certs := certsDir(t)
	n := tlsNode(t, certs, false)
	for _, addr := range []string{localhost(n.tlsAddr), n.tlsAddr} {
		c := newClient(t, Options{Nodes: []string{addr}, TLS: tlsConf(t, certs, TLSFiles{})})
		ids, err := c.NextIDs(bg(t, 10*time.Second), 100)
		if err != nil || len(ids) != 100 || !increasing(ids) {
			t.Fatalf("%s: %v", addr, err)
		}
		if _, err := c.Ping(bg(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		st := nodeState(c, addr)
		if st.TLS == nil || st.TLS.NegotiatedProtocol != "idgen/1" || st.TLS.Version < tls.VersionTLS12 {
			t.Fatalf("%s: TLS state %+v", addr, st.TLS)
		}
	}
	// The plaintext listener beside it still serves plaintext clients, and a TLS client
	// dialing it fails cleanly.
	plain := newClient(t, Options{Nodes: []string{n.addr}})
	if _, err := plain.NextID(bg(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	expectTLSError(t, Options{Nodes: []string{n.addr}, TLS: tlsConf(t, certs, TLSFiles{})}, TLSHandshake)
}

func TestRealNodeMutualTLS(t *testing.T) {
	certs := certsDir(t)
	n := tlsNode(t, certs, true)
	addr := localhost(n.tlsAddr)
	ok := newClient(t, Options{Nodes: []string{addr}, TLS: tlsConf(t, certs, TLSFiles{Cert: "client.crt", Key: "client.key"})})
	results := runGoroutines(t, 8, 60*time.Second, func(int) ([]uint64, error) {
		var all []uint64
		for k := 0; k < 100; k++ {
			ids, err := ok.NextIDs(bg(t, 10*time.Second), 5)
			if err != nil {
				return nil, err
			}
			all = append(all, ids...)
		}
		return all, nil
	})
	checkUnique(t, results...)
	pooled := newClient(t, Options{Nodes: []string{addr}, Prefetch: 100,
		TLS: tlsConf(t, certs, TLSFiles{Cert: "client.crt", Key: "client.key"})})
	if _, err := pooled.NextID(bg(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	// Refused: no client certificate, an expired one, one from another authority.
	expectTLSError(t, Options{Nodes: []string{addr}, TLS: tlsConf(t, certs, TLSFiles{})},
		TLSClientCertificateRequired, TLSClientCertificateRejected)
	expectTLSError(t, Options{Nodes: []string{addr}, TLS: tlsConf(t, certs, TLSFiles{Cert: "client-expired.crt", Key: "client-expired.key"})},
		TLSClientCertificateRejected)
	// crypto/tls sends no certificate whose issuer is not among the authorities the node
	// asks for, so the node sees none.
	expectTLSError(t, Options{Nodes: []string{addr}, TLS: tlsConf(t, certs, TLSFiles{Cert: "client-other-ca.crt", Key: "client-other-ca.key"})},
		TLSClientCertificateRequired, TLSClientCertificateRejected)
}

func TestTheClientVerifiesTheNodesCertificate(t *testing.T) {
	certs := certsDir(t)
	n := tlsNode(t, certs, false)
	addr := localhost(n.tlsAddr)
	// Another authority.
	expectTLSError(t, Options{Nodes: []string{addr}, TLS: tlsConf(t, certs, TLSFiles{CA: "other-ca.crt"})}, TLSUnknownIssuer)
	// A name the certificate lacks.
	expectTLSError(t, Options{Nodes: []string{addr}, TLS: tlsConf(t, certs, TLSFiles{ServerName: "idgen.internal"})}, TLSNameMismatch)
	// Turning verification off is refused.
	conf := tlsConf(t, certs, TLSFiles{})
	conf.InsecureSkipVerify = true
	if _, err := NewClient(Options{Nodes: []string{addr}, TLS: conf}); err == nil {
		t.Fatal("InsecureSkipVerify accepted")
	}
	// Fake TLS nodes: an expired certificate, one for another name, and one of another
	// authority; a TLS failure fails over to the next node.
	for _, c := range []struct {
		cert string
		kind TLSErrorKind
	}{{"server-expired", TLSExpired}, {"server-other-name", TLSNameMismatch}, {"server-other-ca", TLSUnknownIssuer}} {
		f := startFake(t, &fakeNode{hello: defaultHello(), mode: "serve", tlsConf: serverTLS(t, certs, c.cert, "")})
		expectTLSError(t, Options{Nodes: []string{localhost(f.addr)}, TLS: tlsConf(t, certs, TLSFiles{})}, c.kind)
	}
	bad := startFake(t, &fakeNode{hello: defaultHello(), mode: "serve", tlsConf: serverTLS(t, certs, "server-other-ca", "")})
	good := startFake(t, &fakeNode{hello: defaultHello(), mode: "serve", tlsConf: serverTLS(t, certs, "server", "ca.crt")})
	c := newClient(t, Options{Nodes: []string{localhost(bad.addr), localhost(good.addr)},
		TLS: tlsConf(t, certs, TLSFiles{Cert: "client.crt", Key: "client.key"})})
	if _, err := c.NextIDs(bg(t, 10*time.Second), 10); err != nil {
		t.Fatal(err)
	}
	good.mu.Lock()
	sessions := good.tlsSessions
	good.mu.Unlock()
	if len(sessions) != 1 || sessions[0].NegotiatedProtocol != "idgen/1" || len(sessions[0].PeerCertificates) != 1 {
		t.Fatalf("sessions %+v", sessions)
	}
}

func TestLoadTLSConfigRefusesIncompleteFiles(t *testing.T) {
	certs := certsDir(t)
	for _, f := range []TLSFiles{
		{},
		{CA: filepath.Join(certs, "missing.crt")},
		{CA: filepath.Join(certs, "server.key")},
		{CA: filepath.Join(certs, "ca.crt"), Cert: filepath.Join(certs, "client.crt")},
		{CA: filepath.Join(certs, "ca.crt"), Cert: filepath.Join(certs, "client.crt"), Key: filepath.Join(certs, "server.key")},
	} {
		if _, err := LoadTLSConfig(f); err == nil {
			t.Errorf("accepted %+v", f)
		} else if strings.Contains(err.Error(), "PRIVATE KEY") {
			t.Errorf("the error shows key material: %v", err)
		}
	}
}
