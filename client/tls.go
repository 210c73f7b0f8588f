package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// LoadTLS makes a client TLS configuration (TLS 1.3) trusting the cluster
// CA in caFile and presenting the client certificate in certFile and
// keyFile when both are set (`swarmnode certs client` makes them).
func LoadTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" {
		return nil, fmt.Errorf("%w: TLS needs the cluster CA file", ErrInvalidArgument)
	}
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("swarmkv: tls CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%w: %s holds no PEM certificate", ErrInvalidArgument, caFile)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool}
	switch {
	case certFile != "" && keyFile != "":
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("swarmkv: tls client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	case certFile != "" || keyFile != "":
		return nil, fmt.Errorf("%w: a client certificate needs both the certificate and the key file", ErrInvalidArgument)
	}
	return c, nil
}

// ErrPlaintextToken is wrapped by New and by calls that would send
// Config.Token without TLS to an address that is not loopback: the bearer
// token would cross the network readable by anyone on the path.
var ErrPlaintextToken = fmt.Errorf("%w: refusing to send the bearer token in plaintext", ErrInvalidArgument)

// IsLoopback reports whether a gRPC address (host:port, or a target with
// a dns:/// or passthrough:/// scheme, or a unix socket) stays on this
// machine: localhost, 127.0.0.0/8, ::1.
func IsLoopback(addr string) bool {
	if strings.HasPrefix(addr, "unix:") || strings.HasPrefix(addr, "unix-abstract:") {
		return true
	}
	for _, scheme := range []string{"dns:///", "passthrough:///"} {
		addr = strings.TrimPrefix(addr, scheme)
	}
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkTokenTransport refuses a plaintext connection carrying the token to
// a non-loopback address.
func (c *Client) checkTokenTransport(addr string) error {
	if c.cfg.Token == "" || c.cfg.TLS != nil || IsLoopback(addr) {
		return nil
	}
	return fmt.Errorf("%w to %s, which is not a loopback address: set Config.TLS (client.LoadTLS with the cluster CA; "+
		"swarmnode: --tls-ca) to reach the cluster over TLS, or connect through 127.0.0.1", ErrPlaintextToken, addr)
}

// transportOptions are the credentials of every connection.
func (c *Client) transportOptions() []grpc.DialOption {
	var opts []grpc.DialOption
	if c.cfg.TLS != nil {
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(c.cfg.TLS)))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if c.cfg.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{token: c.cfg.Token, secure: c.cfg.TLS != nil}))
	}
	return opts
}

// bearer sends the token with every call.
type bearer struct {
	token  string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity: a token goes over TLS, or in plaintext only to
// a cluster without TLS (on loopback).
func (b bearer) RequireTransportSecurity() bool { return b.secure }

var _ credentials.PerRPCCredentials = bearer{}
