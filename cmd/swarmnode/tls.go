package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/swarmkv/swarmkv/client"
)

// connFlags are the security flags of every command that talks to a
// cluster: the cluster CA (TLS on), an optional client certificate, and a
// bearer token. Each falls back to SWARM_TLS_CA, SWARM_TLS_CERT,
// SWARM_TLS_KEY and SWARM_TOKEN (prefer the variable for the token: a
// flag shows in ps; envDefaults reads them like every flag's).
type connFlags struct {
	ca, cert, key, token *string
}

func addConnFlags(fs *pflag.FlagSet) *connFlags {
	return &connFlags{
		ca:    fs.String("tls-ca", "", "cluster CA file: talk TLS (also SWARM_TLS_CA)"),
		cert:  fs.String("tls-cert", "", "client certificate file (also SWARM_TLS_CERT)"),
		key:   fs.String("tls-key", "", "client certificate key file (also SWARM_TLS_KEY)"),
		token: fs.String("token", "", "bearer token from swarmnode token create (better: SWARM_TOKEN)"),
	}
}

// tlsConfig is the client TLS configuration, nil without --tls-ca.
func (f *connFlags) tlsConfig() (*tls.Config, error) {
	if *f.ca == "" {
		if *f.cert != "" || *f.key != "" {
			return nil, usageError{errString("--tls-cert and --tls-key need --tls-ca")}
		}
		return nil, nil
	}
	c, err := client.LoadTLS(*f.ca, *f.cert, *f.key)
	if err != nil {
		return nil, usageError{err}
	}
	return c, nil
}

// clientConfig is a Go client configuration for endpoints.
func (f *connFlags) clientConfig(endpoints string) (client.Config, error) {
	tc, err := f.tlsConfig()
	if err != nil {
		return client.Config{}, err
	}
	var eps []string
	for _, e := range strings.Split(endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	return client.Config{Endpoints: eps, TLS: tc, Token: *f.token}, nil
}

// httpClient returns an HTTP client and the URL scheme to use. It follows
// a redirect only where a request may carry its credential
// (plaintextToken).
func (f *connFlags) httpClient(timeout time.Duration) (*http.Client, string, error) {
	tc, err := f.tlsConfig()
	if err != nil {
		return nil, "", err
	}
	hc := &http.Client{Timeout: timeout, CheckRedirect: checkRedirect}
	if tc == nil {
		return hc, "http", nil
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	hc.Transport = tr
	return hc, "https", nil
}

// checkRedirect is net/http's default redirect policy (at most 10), and
// refuses a redirect that would carry the request's Authorization header
// in plaintext off loopback (net/http keeps the header on a redirect to
// the same host, https to http included).
func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if req.Header.Get("Authorization") != "" {
		return plaintextToken(req.URL)
	}
	return nil
}

// authorize adds the bearer token to an HTTP request; refused before
// anything is sent when it would cross the network in plaintext
// (plaintextToken).
func (f *connFlags) authorize(req *http.Request) error {
	if *f.token == "" {
		return nil
	}
	if err := plaintextToken(req.URL); err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+*f.token)
	return nil
}

// plaintextToken applies the Go client's rule (client.ErrPlaintextToken,
// client.IsLoopback) to a request of the admin HTTP API that carries a
// credential: over http, only to a loopback address (localhost,
// 127.0.0.0/8, ::1); anywhere else only over https (--tls-ca).
func plaintextToken(u *url.URL) error {
	if u.Scheme == "https" || client.IsLoopback(u.Hostname()) {
		return nil
	}
	return usageError{fmt.Errorf("%w to %s over http, which is not a loopback address: give the cluster CA with --tls-ca "+
		"(or SWARM_TLS_CA) to talk https, or reach the admin API through 127.0.0.1", client.ErrPlaintextToken, u.Host)}
}

type errString string

func (e errString) Error() string { return string(e) }

// checkRoles validates role names (auth.ParseRoles once auth lands).
var checkRoles = func([]string) error { return nil }
