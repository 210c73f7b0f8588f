package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/swarmkv/swarmkv/internal/pki"
)

const certsUsage = `Usage:
  swarmnode certs ca     [--dir DIR] [--name NAME]          a cluster CA (ca.pem, ca-key.pem) and a gossip key (gossip.key)
  swarmnode certs node   [--dir DIR] --id ID [--addr HOST,...]  a node certificate (ID.pem, ID-key.pem)
  swarmnode certs client [--dir DIR] --name NAME [--role ROLE,...]  a client certificate (NAME.pem, NAME-key.pem)

A node certificate binds the node id (SAN URI swarmkv://node/ID) and lists
the host names and IPs clients dial it at (--addr; localhost and 127.0.0.1
are always added). A client certificate's roles (e.g. registry:read,
billing:write, admin) are its OU values. Keys are ECDSA P-256, files PEM;
keys are written 0600, every file atomically (an O_EXCL temporary file,
fsync, rename). A running node re-reads a replaced certificate.

Flags:
`

func certs(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("certs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, certsUsage); fs.PrintDefaults() }
	dir := fs.String("dir", "certs", "folder holding the CA and the files written")
	name := fs.String("name", "", "ca: the CA's name (default \"swarmkv CA\"); client: the client's name")
	id := fs.String("id", "", "node: the node id (its --id)")
	addrs := fs.String("addr", "", "node: comma-separated host names and IPs the node is reached at")
	roles := fs.String("role", "", "client: comma-separated roles (e.g. registry:read,billing:write)")
	valid := fs.Duration("valid", 0, "lifetime (default: CA 10 years, others 1 year)")
	verb, pos, err := parseVerb(fs, args, "certs: missing ca, node or client")
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError{fmt.Errorf("certs %s: unexpected argument %q", verb, pos[0])}
	}
	switch verb {
	case "ca":
		if *name == "" {
			*name = "swarmkv CA"
		}
		if *valid == 0 {
			*valid = 10 * 365 * 24 * time.Hour
		}
		ca, err := pki.NewCA(*name, *valid)
		if err != nil {
			return err
		}
		if err := ca.WriteCA(*dir); err != nil {
			return err
		}
		key := make([]byte, 32)
		rand.Read(key)
		gk := filepath.Join(*dir, "gossip.key")
		text := "# swarmkv gossip keyring: base64 keys, the first encrypts\n" + base64.StdEncoding.EncodeToString(key) + "\n"
		if err := pki.WriteNew(gk, []byte(text), 0o600); err != nil && !errors.Is(err, os.ErrExist) {
			return err // an existing gossip key is kept
		}
		fmt.Fprintf(stdout, "wrote %s, %s (keep it offline), %s\n", filepath.Join(*dir, "ca.pem"), filepath.Join(*dir, "ca-key.pem"), gk)
		return nil
	case "node", "client":
	default:
		fs.Usage()
		return usageError{fmt.Errorf("certs: unknown command %q", verb)}
	}
	ca, err := pki.LoadCA(*dir)
	if err != nil {
		return fmt.Errorf("certs %s: %w (run `swarmnode certs ca --dir %s` first)", verb, err, *dir)
	}
	req := pki.Request{Valid: *valid}
	file := ""
	if verb == "node" {
		if *id == "" {
			return usageError{errors.New("certs node: --id is required")}
		}
		req.Node, file = *id, *id
		req.Hosts = append(splitList(*addrs), "localhost", "127.0.0.1")
	} else {
		if *name == "" {
			return usageError{errors.New("certs client: --name is required")}
		}
		req.Client, file = *name, *name
		req.Roles = splitList(*roles)
		if err := checkRoles(req.Roles); err != nil {
			return usageError{err}
		}
	}
	p, err := ca.Issue(req)
	if err != nil {
		return usageError{err}
	}
	if err := pki.WriteFiles(*dir, file, p); err != nil {
		return err
	}
	desc, _ := pki.Describe(p.CertPEM)
	fmt.Fprintf(stdout, "wrote %s, %s: %s\n", filepath.Join(*dir, file+".pem"), filepath.Join(*dir, file+"-key.pem"), desc)
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
