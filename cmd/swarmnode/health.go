package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

const healthUsage = `Usage:
  swarmnode health [--http-addr host:port,...] [--ready] [--wait DURATION]

Asks each node's HTTP address for /healthz (the process is up) or, with
--ready, /readyz (every local shard has a leader) and prints one line per
node. Exits 0 when every node answered 200, 1 otherwise. With --wait it polls
until every node answers 200 or the duration passes. It needs nothing but the
binary, so it serves as the health check of a FROM scratch container.

Flags:
`

func health(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, healthUsage); fs.PrintDefaults() }
	addrs := fs.String("http-addr", "127.0.0.1:7102", "comma-separated HTTP addresses of nodes")
	ready := fs.Bool("ready", false, "check /readyz instead of /healthz")
	wait := fs.Duration("wait", 0, "poll until every node answers 200, for at most this long (0: ask once)")
	timeout := fs.Duration("timeout", 2*time.Second, "timeout of each request")
	quiet := fs.Bool("quiet", false, "print nothing; only the exit code tells")
	conn := addConnFlags(fs)
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("health: unexpected argument %q", fs.Arg(0))}
	}
	path := "/healthz"
	if *ready {
		path = "/readyz"
	}
	var targets []string
	for _, a := range strings.Split(*addrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			targets = append(targets, a)
		}
	}
	if len(targets) == 0 {
		return usageError{errors.New("health: --http-addr is empty")}
	}
	hc, scheme, err := conn.httpClient(*timeout)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(*wait)
	for {
		lines, bad := probeAll(ctx, hc, scheme, targets, path)
		if bad == 0 || *wait <= 0 || time.Now().After(deadline) || ctx.Err() != nil {
			if !*quiet {
				for _, l := range lines {
					fmt.Fprintln(stdout, l)
				}
			}
			if bad > 0 {
				return fmt.Errorf("health: %d of %d nodes not ok", bad, len(targets))
			}
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// probeAll asks every target for path and returns one line per target and
// the number that did not answer 200.
func probeAll(ctx context.Context, hc *http.Client, scheme string, targets []string, path string) (lines []string, bad int) {
	for _, a := range targets {
		msg, ok := probe(ctx, hc, scheme+"://"+a+path)
		if !ok {
			bad++
		}
		lines = append(lines, fmt.Sprintf("%-22s %s", a, msg))
	}
	return lines, bad
}

func probe(ctx context.Context, hc *http.Client, url string) (string, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err.Error(), false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "down: " + err.Error(), false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	msg := strings.TrimSpace(string(body))
	return msg, resp.StatusCode == http.StatusOK
}
