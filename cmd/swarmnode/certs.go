package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/swarmkv/swarmkv/internal/pki"
)

const certsLong = `Make a cluster CA, node and client certificates.

A node certificate binds the node id (SAN URI swarmkv://node/ID) and lists
the host names and IPs clients dial it at (--addr; localhost and 127.0.0.1
are always added). A client certificate's roles (e.g. registry:read,
billing:write, admin) are its OU values. Keys are ECDSA P-256, files PEM;
keys are written 0600, every file atomically (an O_EXCL temporary file,
fsync, rename). A running node re-reads a replaced certificate.`

// certsFlags are certs' flags.
type certsFlags struct {
	dir, name, id, addrs, roles string
	valid                       time.Duration
}

func newCertsCmd() *cobra.Command {
	f := &certsFlags{}
	g := group("certs", "make a cluster CA, node and client certificates", certsLong, "ca, node or client", "command", []verb{
		{"ca [--dir DIR] [--name NAME]", "a cluster CA (ca.pem, ca-key.pem) and a gossip key (gossip.key)", 0, 0},
		{"node [--dir DIR] --id ID [--addr HOST,...]", "a node certificate (ID.pem, ID-key.pem)", 0, 0},
		{"client [--dir DIR] --name NAME [--role ROLE,...]", "a client certificate (NAME.pem, NAME-key.pem)", 0, 0},
	}, f.run)
	fs := g.PersistentFlags()
	fs.StringVar(&f.dir, "dir", "certs", "folder holding the CA and the files written")
	fs.StringVar(&f.name, "name", "", "ca: the CA's name (default \"swarmkv CA\"); client: the client's name")
	fs.StringVar(&f.id, "id", "", "node: the node id (its --id)")
	fs.StringVar(&f.addrs, "addr", "", "node: comma-separated host names and IPs the node is reached at")
	fs.StringVar(&f.roles, "role", "", "client: comma-separated roles (e.g. registry:read,billing:write)")
	fs.DurationVar(&f.valid, "valid", 0, "lifetime (default: CA 10 years, others 1 year)")
	return g
}

func (f *certsFlags) run(_ context.Context, verb string, _ []string, stdout, _ io.Writer) error {
	switch verb {
	case "ca":
		if f.name == "" {
			f.name = "swarmkv CA"
		}
		if f.valid == 0 {
			f.valid = 10 * 365 * 24 * time.Hour
		}
		ca, err := pki.NewCA(f.name, f.valid)
		if err != nil {
			return err
		}
		if err := ca.WriteCA(f.dir); err != nil {
			return err
		}
		key := make([]byte, 32)
		rand.Read(key)
		gk := filepath.Join(f.dir, "gossip.key")
		text := "# swarmkv gossip keyring: base64 keys, the first encrypts\n" + base64.StdEncoding.EncodeToString(key) + "\n"
		if err := pki.WriteNew(gk, []byte(text), 0o600); err != nil && !errors.Is(err, os.ErrExist) {
			return err // an existing gossip key is kept
		}
		fmt.Fprintf(stdout, "wrote %s, %s (keep it offline), %s\n", filepath.Join(f.dir, "ca.pem"), filepath.Join(f.dir, "ca-key.pem"), gk)
		return nil
	}
	ca, err := pki.LoadCA(f.dir)
	if err != nil {
		return fmt.Errorf("certs %s: %w (run `swarmnode certs ca --dir %s` first)", verb, err, f.dir)
	}
	req := pki.Request{Valid: f.valid}
	file := ""
	if verb == "node" {
		if f.id == "" {
			return usageError{errors.New("certs node: --id is required")}
		}
		req.Node, file = f.id, f.id
		req.Hosts = append(splitList(f.addrs), "localhost", "127.0.0.1")
	} else {
		if f.name == "" {
			return usageError{errors.New("certs client: --name is required")}
		}
		req.Client, file = f.name, f.name
		req.Roles = splitList(f.roles)
		if err := checkRoles(req.Roles); err != nil {
			return usageError{err}
		}
	}
	p, err := ca.Issue(req)
	if err != nil {
		return usageError{err}
	}
	if err := pki.WriteFiles(f.dir, file, p); err != nil {
		return err
	}
	desc, _ := pki.Describe(p.CertPEM)
	fmt.Fprintf(stdout, "wrote %s, %s: %s\n", filepath.Join(f.dir, file+".pem"), filepath.Join(f.dir, file+"-key.pem"), desc)
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
