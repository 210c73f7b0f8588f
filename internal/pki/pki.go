// Package pki makes and reads the certificates of a swarmkv cluster: a
// cluster CA, node certificates and client certificates, all ECDSA P-256,
// made with the standard library (crypto/x509) and written as PEM.
//
// Identities live in URI SANs:
//
//	swarmkv://node/<id>      a node; <id> is its --id (Raft server id, gossip name)
//	swarmkv://client/<name>  a client; <name> is also the certificate's CN
//
// A client certificate's roles (package auth) are its OrganizationalUnit
// values, e.g. OU=registry:read.
//
// Usage:
//
//	ca, _ := pki.NewCA("swarmkv dev CA", 10*365*24*time.Hour)
//	node, _ := ca.Issue(pki.Request{Node: "n1", Hosts: []string{"n1", "127.0.0.1"}})
//	_ = pki.WriteFiles(dir, "n1", node)    // n1.pem, n1-key.pem
package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// URI schemes and hosts of the identity SANs.
const (
	scheme     = "swarmkv"
	nodeHost   = "node"
	clientHost = "client"
)

// NodeURI is the SAN URI binding node id to a certificate.
func NodeURI(id string) *url.URL { return &url.URL{Scheme: scheme, Host: nodeHost, Path: "/" + id} }

// ClientURI is the SAN URI of a client certificate.
func ClientURI(name string) *url.URL {
	return &url.URL{Scheme: scheme, Host: clientHost, Path: "/" + name}
}

// NodeID returns the node id a certificate is bound to ("" when it is not a
// node certificate).
func NodeID(c *x509.Certificate) string { return uriName(c, nodeHost) }

// ClientName returns a client certificate's name: its swarmkv://client/ URI,
// else its CN; "" for node certificates.
func ClientName(c *x509.Certificate) string {
	if NodeID(c) != "" {
		return ""
	}
	if n := uriName(c, clientHost); n != "" {
		return n
	}
	return c.Subject.CommonName
}

func uriName(c *x509.Certificate, host string) string {
	for _, u := range c.URIs {
		if u.Scheme == scheme && u.Host == host && len(u.Path) > 1 {
			return u.Path[1:]
		}
	}
	return ""
}

// CA is a certificate authority that issues node and client certificates.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// CertPEM and KeyPEM are the encoded forms (what WriteFiles writes).
	CertPEM, KeyPEM []byte
}

// Pair is an issued certificate and its key, PEM encoded.
type Pair struct {
	CertPEM, KeyPEM []byte
}

// Request describes a certificate to issue: a node (Node set) or a client
// (Client set), not both.
type Request struct {
	// Node is the node id (a server and client certificate for mTLS).
	Node string
	// Hosts are the DNS names and IP addresses clients dial the node at.
	Hosts []string
	// Client is a client's name (CN and swarmkv://client/ URI).
	Client string
	// Roles become the OU values of a client certificate.
	Roles []string
	// Valid is the lifetime; default one year.
	Valid time.Duration
}

// NewCA makes a self-signed CA valid for valid.
func NewCA(name string, valid time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"swarmkv"}},
		NotBefore:             now.Add(-5 * time.Minute),
		NotAfter:              now.Add(valid),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	kp, err := keyPEM(key)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM(der), KeyPEM: kp}, nil
}

// LoadCA reads a CA written by WriteCA (ca.pem, ca-key.pem in dir).
func LoadCA(dir string) (*CA, error) {
	cb, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		return nil, err
	}
	kb, err := os.ReadFile(filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		return nil, err
	}
	cblk, _ := pem.Decode(cb)
	kblk, _ := pem.Decode(kb)
	if cblk == nil || kblk == nil {
		return nil, fmt.Errorf("pki: %s: ca.pem or ca-key.pem is not PEM", dir)
	}
	cert, err := x509.ParseCertificate(cblk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: ca.pem: %w", err)
	}
	key, err := x509.ParseECPrivateKey(kblk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: ca-key.pem: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("pki: ca.pem is not a CA certificate")
	}
	return &CA{Cert: cert, Key: key, CertPEM: cb, KeyPEM: kb}, nil
}

// WriteCA writes ca-key.pem (0600) and ca.pem (0644) into dir, refusing to
// overwrite an existing CA key (atomically: the key is linked into place,
// which fails if the name exists).
func (ca *CA) WriteCA(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := WriteNew(filepath.Join(dir, "ca-key.pem"), ca.KeyPEM, 0o600); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("pki: %s already holds a CA (ca-key.pem); remove it first", dir)
		}
		return err
	}
	return WriteAtomic(filepath.Join(dir, "ca.pem"), ca.CertPEM, 0o644)
}

// ErrRequest is wrapped by Issue's errors about a bad Request.
var ErrRequest = errors.New("pki: bad certificate request")

// Issue signs a node or client certificate.
func (ca *CA) Issue(r Request) (*Pair, error) {
	if (r.Node == "") == (r.Client == "") {
		return nil, fmt.Errorf("%w: want a node id or a client name", ErrRequest)
	}
	name := r.Node + r.Client
	if strings.ContainsAny(name, "/?#% \t\r\n") || len(name) > 128 {
		return nil, fmt.Errorf("%w: name %q", ErrRequest, name)
	}
	if r.Valid == 0 {
		r.Valid = 365 * 24 * time.Hour
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"swarmkv"}},
		NotBefore:    now.Add(-5 * time.Minute),
		NotAfter:     now.Add(r.Valid),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if r.Node != "" {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.URIs = []*url.URL{NodeURI(r.Node)}
		for _, h := range r.Hosts {
			if h = strings.TrimSpace(h); h == "" {
				continue
			}
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		tmpl.URIs = []*url.URL{ClientURI(r.Client)}
		tmpl.Subject.OrganizationalUnit = r.Roles
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, err
	}
	kp, err := keyPEM(key)
	if err != nil {
		return nil, err
	}
	return &Pair{CertPEM: certPEM(der), KeyPEM: kp}, nil
}

// WriteFiles writes <name>.pem (0644) and <name>-key.pem (0600) into dir.
// Existing files are replaced atomically (a running node reloads them).
func WriteFiles(dir, name string, p *Pair) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := WriteAtomic(filepath.Join(dir, name+"-key.pem"), p.KeyPEM, 0o600); err != nil {
		return err
	}
	return WriteAtomic(filepath.Join(dir, name+".pem"), p.CertPEM, 0o644)
}

// tempFile writes b to a new temporary file next to path, created with
// O_EXCL under a random name and mode 0600 (so no planted file or symlink
// is followed and the bytes are never readable by others), then set to
// mode, and synced. The caller renames or links it into place.
func tempFile(path string, b []byte, mode os.FileMode) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	err = f.Chmod(mode)
	if err == nil {
		_, err = f.Write(b)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// syncDir makes a rename or link in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// WriteAtomic replaces path with b (mode mode) atomically and durably:
// an O_EXCL temporary file, fsync, rename, fsync of the directory. A
// reader sees the old file or the new one, never a part.
func WriteAtomic(path string, b []byte, mode os.FileMode) error {
	tmp, err := tempFile(path, b, mode)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(path))
}

// WriteNew creates path with b (mode mode) atomically and durably, failing
// with an error wrapping fs.ErrExist if path exists: the synced temporary
// file is hard-linked to path (which never replaces), then removed.
func WriteNew(path string, b []byte, mode os.FileMode) error {
	tmp, err := tempFile(path, b, mode)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// Describe returns one line naming a certificate's identity, hosts and
// expiry (for the CLI).
func Describe(certPEMBytes []byte) (string, error) {
	blk, _ := pem.Decode(certPEMBytes)
	if blk == nil {
		return "", errors.New("pki: not PEM")
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	switch {
	case NodeID(c) != "":
		fmt.Fprintf(&b, "node %s", NodeID(c))
	case c.IsCA:
		fmt.Fprintf(&b, "CA %q", c.Subject.CommonName)
	default:
		fmt.Fprintf(&b, "client %s", ClientName(c))
		if len(c.Subject.OrganizationalUnit) > 0 {
			fmt.Fprintf(&b, " roles %s", strings.Join(c.Subject.OrganizationalUnit, ","))
		}
	}
	var hosts []string
	hosts = append(hosts, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		hosts = append(hosts, ip.String())
	}
	if len(hosts) > 0 {
		fmt.Fprintf(&b, " hosts %s", strings.Join(hosts, ","))
	}
	fmt.Fprintf(&b, " until %s", c.NotAfter.UTC().Format(time.DateOnly))
	return b.String(), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return n
}

func certPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func keyPEM(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}
