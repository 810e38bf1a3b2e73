package idgen

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// TLSFiles names PEM files for LoadTLSConfig.
type TLSFiles struct {
	// CA: the authorities the nodes' certificates must chain to (required).
	CA string
	// Cert and Key: a client certificate chain and its key, for mutual TLS (both or
	// neither).
	Cert, Key string
	// ServerName: the name every node's certificate must carry; empty: each node's host.
	ServerName string
}

// LoadTLSConfig builds the TLS configuration for Options.TLS from PEM files: the nodes'
// authority, and optionally a client certificate. The server's name is always verified;
// ALPN offers "idgen/1"; TLS 1.2 is the minimum.
func LoadTLSConfig(f TLSFiles) (*tls.Config, error) {
	if f.CA == "" {
		return nil, errors.New("idgen: TLSFiles.CA is required (the authority the nodes' certificates chain to)")
	}
	pem, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("idgen: reading the CA bundle: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("idgen: %s holds no PEM certificate", f.CA)
	}
	conf := &tls.Config{
		RootCAs:    roots,
		ServerName: f.ServerName,
		NextProtos: []string{"idgen/1"},
		MinVersion: tls.VersionTLS12,
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("idgen: TLSFiles.Cert and Key go together (mutual TLS needs both)")
	}
	if f.Cert != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			// The error names the files, never the key's content.
			return nil, fmt.Errorf("idgen: loading the client certificate %s and key %s: %w", f.Cert, f.Key, err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	return conf, nil
}
