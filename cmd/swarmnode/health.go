package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

const healthLong = `Asks each node's HTTP address for /healthz (the process is up) or, with
--ready, /readyz (every local shard has a leader) and prints one line per
node. Exits 0 when every node answered 200, 1 otherwise. With --wait it polls
until every node answers 200 or the duration passes. It needs nothing but the
binary, so it serves as the health check of a FROM scratch container.`

// healthFlags are health's flags.
type healthFlags struct {
	addrs         string
	ready, quiet  bool
	wait, timeout time.Duration
	conn          *connFlags
}

func newHealthCmd() *cobra.Command {
	f := &healthFlags{}
	c := &cobra.Command{Use: "health [--http-addr host:port,...] [--ready] [--wait DURATION]",
		Short: "probe nodes' /healthz or /readyz", Long: healthLong, Args: nargs(0, 0),
		RunE: func(c *cobra.Command, _ []string) error { return f.run(c.Context(), c.OutOrStdout()) }}
	fs := c.Flags()
	fs.StringVar(&f.addrs, "http-addr", "127.0.0.1:7102", "comma-separated HTTP addresses of nodes")
	fs.BoolVar(&f.ready, "ready", false, "check /readyz instead of /healthz")
	fs.DurationVar(&f.wait, "wait", 0, "poll until every node answers 200, for at most this long (0: ask once)")
	fs.DurationVar(&f.timeout, "timeout", 2*time.Second, "timeout of each request")
	fs.BoolVar(&f.quiet, "quiet", false, "print nothing; only the exit code tells")
	f.conn = addConnFlags(fs)
	return c
}

func (f *healthFlags) run(ctx context.Context, stdout io.Writer) error {
	path := "/healthz"
	if f.ready {
		path = "/readyz"
	}
	var targets []string
	for _, a := range strings.Split(f.addrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			targets = append(targets, a)
		}
	}
	if len(targets) == 0 {
		return usageError{errors.New("health: --http-addr is empty")}
	}
	hc, scheme, err := f.conn.httpClient(f.timeout)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(f.wait)
	for {
		lines, bad := probeAll(ctx, hc, scheme, targets, path)
		if bad == 0 || f.wait <= 0 || time.Now().After(deadline) || ctx.Err() != nil {
			if !f.quiet {
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
