package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

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
