package transport

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/swarmkv/swarmkv/internal/pki"
)

// TLSFiles names the PEM files of a node's TLS identity (swarmnode certs
// makes them). All three or none.
type TLSFiles struct {
	// CAFile is the cluster CA (one or more PEM certificates): peers' node
	// certificates and clients' certificates must chain to one of them.
	// Re-read when its modification time changes, like the certificate.
	CAFile string
	// CertFile and KeyFile are this node's certificate (with the SAN URI
	// swarmkv://node/<id> of the node id) and key. They are re-read when
	// their modification time changes, so a renewed certificate is used
	// by new connections without a restart.
	CertFile string
	KeyFile  string
}

// Enabled reports whether any file is set.
func (t TLSFiles) Enabled() bool { return t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" }

// Validate reports whether the files are all set or none.
func (t TLSFiles) Validate() error {
	if t.Enabled() && (t.CAFile == "" || t.CertFile == "" || t.KeyFile == "") {
		return errors.New("tls: want all of CA, certificate and key files")
	}
	return nil
}

// TLSReloadEvery is how often a handshake may stat the certificate files.
const TLSReloadEvery = time.Second

// NodeTLS is a node's TLS identity: the cluster CA and its own certificate,
// reloaded when the files change. It makes the tls.Configs of every
// listener and of node-to-node dialing.
//
// Who must present what:
//
//	Raft port        both sides a node certificate of the cluster CA
//	node-to-node gRPC the dialing node its node certificate; the server a node certificate
//	client gRPC, HTTP, RESP  the server its node certificate; the client a certificate
//	                 of the CA if it has one (else a token, see auth.go)
type NodeTLS struct {
	files TLSFiles
	id    string
	log   *slog.Logger

	mu struct {
		sync.Mutex
		cert                   *tls.Certificate
		pool                   *x509.CertPool // the CA file's certificates
		certMod, keyMod, caMod time.Time
		checked                time.Time
	}
}

// LoadNodeTLS reads the CA and the node certificate and checks that the
// certificate chains to the CA and is bound to node id.
func LoadNodeTLS(files TLSFiles, id string, log *slog.Logger) (*NodeTLS, error) {
	t := &NodeTLS{files: files, id: id, log: log}
	pool, caMod, err := t.readCA()
	if err != nil {
		return nil, err
	}
	cert, cm, km, err := t.read(pool)
	if err != nil {
		return nil, err
	}
	t.mu.cert, t.mu.pool, t.mu.certMod, t.mu.keyMod, t.mu.caMod, t.mu.checked = cert, pool, cm, km, caMod, time.Now()
	return t, nil
}

// readCA loads the CA file.
func (t *NodeTLS) readCA() (*x509.CertPool, time.Time, error) {
	st, err := os.Stat(t.files.CAFile)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("transport: tls CA: %w", err)
	}
	caPEM, err := os.ReadFile(t.files.CAFile)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("transport: tls CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, time.Time{}, fmt.Errorf("transport: tls CA %s: no PEM certificate", t.files.CAFile)
	}
	return pool, st.ModTime(), nil
}

// read loads the certificate files and checks them against pool.
func (t *NodeTLS) read(pool *x509.CertPool) (*tls.Certificate, time.Time, time.Time, error) {
	cs, err := os.Stat(t.files.CertFile)
	if err != nil {
		return nil, time.Time{}, time.Time{}, fmt.Errorf("transport: tls certificate: %w", err)
	}
	ks, err := os.Stat(t.files.KeyFile)
	if err != nil {
		return nil, time.Time{}, time.Time{}, fmt.Errorf("transport: tls key: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(t.files.CertFile, t.files.KeyFile)
	if err != nil {
		return nil, time.Time{}, time.Time{}, fmt.Errorf("transport: tls certificate %s: %w", t.files.CertFile, err)
	}
	leaf := cert.Leaf
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: intermediates(cert.Certificate[1:]),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return nil, time.Time{}, time.Time{}, fmt.Errorf("transport: tls certificate %s is not a server certificate of the CA %s: %w", t.files.CertFile, t.files.CAFile, err)
	}
	if got := pki.NodeID(leaf); got != t.id {
		return nil, time.Time{}, time.Time{}, fmt.Errorf("transport: tls certificate %s is bound to node %q, this node is %q (make one with: swarmnode certs node --id %s)", t.files.CertFile, got, t.id, t.id)
	}
	return &cert, cs.ModTime(), ks.ModTime(), nil
}

func intermediates(ders [][]byte) *x509.CertPool {
	p := x509.NewCertPool()
	for _, d := range ders {
		if c, err := x509.ParseCertificate(d); err == nil {
			p.AddCert(c)
		}
	}
	return p
}

// certificate returns the node's certificate (see current).
func (t *NodeTLS) certificate() (*tls.Certificate, error) {
	cert, _ := t.current()
	return cert, nil
}

// caPool returns the cluster CA's certificates (see current).
func (t *NodeTLS) caPool() *x509.CertPool {
	_, pool := t.current()
	return pool
}

// current returns the node's certificate and the CA pool, reloading the
// files when a modification time changed (checked at most every
// TLSReloadEvery). The certificate must chain to the (new) CA. A reload
// that fails keeps the previous certificate and CA, logs why, and is
// tried again.
func (t *NodeTLS) current() (*tls.Certificate, *x509.CertPool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if time.Since(t.mu.checked) < TLSReloadEvery {
		return t.mu.cert, t.mu.pool
	}
	t.mu.checked = time.Now()
	as, err0 := os.Stat(t.files.CAFile)
	cs, err1 := os.Stat(t.files.CertFile)
	ks, err2 := os.Stat(t.files.KeyFile)
	if err0 != nil || err1 != nil || err2 != nil ||
		(as.ModTime().Equal(t.mu.caMod) && cs.ModTime().Equal(t.mu.certMod) && ks.ModTime().Equal(t.mu.keyMod)) {
		return t.mu.cert, t.mu.pool
	}
	pool, caMod := t.mu.pool, t.mu.caMod
	caChanged := !as.ModTime().Equal(t.mu.caMod)
	if caChanged {
		var err error
		if pool, caMod, err = t.readCA(); err != nil {
			t.log.Warn("tls: keeping the previous CA and certificate", "err", err)
			return t.mu.cert, t.mu.pool
		}
	}
	cert, cm, km, err := t.read(pool)
	if err != nil {
		t.log.Warn("tls: keeping the previous CA and certificate", "err", err)
		return t.mu.cert, t.mu.pool
	}
	if caChanged {
		t.log.Info("tls: CA reloaded", "file", t.files.CAFile)
	}
	if !cm.Equal(t.mu.certMod) || !km.Equal(t.mu.keyMod) {
		t.log.Info("tls: certificate reloaded", "file", t.files.CertFile, "not_after", cert.Leaf.NotAfter)
	}
	t.mu.cert, t.mu.pool, t.mu.certMod, t.mu.keyMod, t.mu.caMod = cert, pool, cm, km, caMod
	return t.mu.cert, t.mu.pool
}

// ServerConfig is the configuration of a listener. With nodesOnly the
// peer must present a node certificate of the CA (Raft port); otherwise a
// client certificate is verified if given (client gRPC, HTTP, RESP).
// Each handshake gets a configuration with the current CA pool
// (GetConfigForClient), so a reloaded CA applies to new connections.
func (t *NodeTLS) ServerConfig(nodesOnly bool) *tls.Config {
	build := func() *tls.Config {
		c := &tls.Config{
			MinVersion:     tls.VersionTLS13,
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return t.certificate() },
			ClientCAs:      t.caPool(),
			ClientAuth:     tls.VerifyClientCertIfGiven,
		}
		if nodesOnly {
			c.ClientAuth = tls.RequireAndVerifyClientCert
			c.VerifyConnection = requireNodeCert
		}
		return c
	}
	c := build()
	// (gRPC adds ALPN h2 to the returned configurations too; the admin
	// HTTP server then speaks HTTP/1.1.)
	c.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) { return build(), nil }
	return c
}

// PeerConfig is the configuration for dialing another node (Raft port and
// node-to-node gRPC): this node's certificate as client certificate, and
// the peer must present a node certificate of the CA. A node's identity is
// the swarmkv://node/ URI, not its address: the chain is verified against
// the CA without a host name check (peers are dialed at advertised
// addresses a certificate need not list).
func (t *NodeTLS) PeerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:           tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return t.certificate() },
		InsecureSkipVerify:   true, // replaced by VerifyConnection: chain to the CA, node URI
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("transport: tls: peer presented no certificate")
			}
			opts := x509.VerifyOptions{Roots: t.caPool(), Intermediates: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
				return fmt.Errorf("transport: tls: peer certificate: %w", err)
			}
			return requireNodeCert(cs)
		},
	}
}

// requireNodeCert refuses a connection whose peer is not a node.
func requireNodeCert(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 || pki.NodeID(cs.PeerCertificates[0]) == "" {
		return errors.New("transport: tls: peer certificate is not a node certificate")
	}
	return nil
}
