package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/swarmkv/swarmkv/auth/authn"
	"github.com/swarmkv/swarmkv/cluster"
)

// The operator commands talk to a node's admin HTTP API (package admin);
// any member answers, forwarding to the meta group's leader as needed.

// adminLong is the help text of the operator commands.
const adminLong = `An operator command: it talks to the admin HTTP API of any member
(--admin, its --http-addr), which forwards to the meta group's leader.

A node with --auth without TLS takes requests signed with its cluster
secret (--cluster-secret-file <data-dir>/cluster-secret): how to reach it
before any token exists.`

type adminFlags struct {
	admin   string
	json    bool
	timeout time.Duration
	wait    bool
	conn    *connFlags
	// secretFile is --cluster-secret-file: sign each request with the
	// cluster secret (a node with --auth without TLS); secret is its
	// content, read at the first call.
	secretFile string
	secret     []byte
}

// addSecretFlag adds --cluster-secret-file to an admin command's flags.
func (f *adminFlags) addSecretFlag(fs *pflag.FlagSet) {
	fs.StringVar(&f.secretFile, "cluster-secret-file", "", "sign the requests with this cluster secret (a node with --auth without TLS; a lone node's is <data-dir>/cluster-secret; also SWARM_CLUSTER_SECRET_FILE)")
}

// authorize adds the request's credential: a cluster-secret signature
// with --cluster-secret-file, else the bearer token, if any.
func (f *adminFlags) authorize(req *http.Request) error {
	if f.secretFile == "" {
		return f.conn.authorize(req)
	}
	if *f.conn.ca != "" {
		return usageError{errors.New("--cluster-secret-file is for a node with --auth without TLS; with TLS use a client certificate (--tls-cert, --tls-key)")}
	}
	if f.secret == nil {
		b, err := authn.ReadClusterSecret(f.secretFile)
		if err != nil {
			return usageError{err}
		}
		f.secret = b
	}
	req.Header.Set("Authorization", authn.AdminSecretAuth(f.secret, req.Method, req.URL.Path, req.URL.RawQuery, time.Now()))
	return nil
}

// addAdminFlags adds the flags of a command that talks to the admin API
// (the operator commands and token).
func addAdminFlags(fs *pflag.FlagSet) *adminFlags {
	f := &adminFlags{}
	fs.StringVar(&f.admin, "admin", "127.0.0.1:7102", "admin HTTP address of any member (its --http-addr)")
	fs.BoolVar(&f.json, "json", false, "print the API's JSON")
	f.conn = addConnFlags(fs)
	f.addSecretFlag(fs)
	return f
}

// newAdminCmds are the operator commands.
func newAdminCmds() []*cobra.Command {
	var cmds []*cobra.Command
	for _, a := range []struct {
		use, short string
		min, max   int
		run        func(context.Context, *adminFlags, []string, io.Writer) error
	}{
		{"members", "list members: status, gossip, version, replicas, leaderships", 0, 0, members},
		{"status", "cluster overview and a per-shard table", 0, 0, status},
		{"join NODE_ID", "admit a node started with --join (it waits for this)", 1, 1, join},
		{"remove NODE_ID", "decommission a node: move its replicas away, then remove it", 1, 1, remove},
		{"transfer-leader SHARD [NODE_ID]", `move a shard's leadership ("meta": the meta group's)`, 1, 2, transferLeader},
		{"snapshot SHARD", "make every replica of a shard take a snapshot", 1, 1, snapshot},
	} {
		c := &cobra.Command{Use: a.use, Short: a.short, Long: a.short + ".\n\n" + adminLong, Args: nargs(a.min, a.max)}
		f := addAdminFlags(c.Flags())
		c.Flags().DurationVar(&f.timeout, "timeout", 10*time.Minute, "how long to wait (remove --wait, join --wait)")
		c.Flags().BoolVar(&f.wait, "wait", true, "remove: wait until the node is removed; join: until it holds replicas, or 5s active with none placed")
		run := a.run
		c.RunE = func(c *cobra.Command, args []string) error { return run(c.Context(), f, args, c.OutOrStdout()) }
		cmds = append(cmds, c)
	}
	return cmds
}

// adminError is an error answered by the admin API.
type adminError struct {
	code int
	msg  string
}

func (e *adminError) Error() string { return e.msg }

// call sends one admin request and decodes the JSON answer into out
// (returning the raw body too).
func (f *adminFlags) call(ctx context.Context, method, path string, out any) ([]byte, error) {
	return f.callBody(ctx, method, path, nil, out)
}

// callBody is call with a JSON request body (nil: none).
func (f *adminFlags) callBody(ctx context.Context, method, path string, in, out any) ([]byte, error) {
	hc, scheme, err := f.conn.httpClient(0)
	if err != nil {
		return nil, err
	}
	u := f.admin
	if !strings.Contains(u, "://") {
		u = scheme + "://" + u
	}
	ctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	var reqBody io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		reqBody = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u+path, reqBody)
	if err != nil {
		return nil, usageError{err}
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if err := f.authorize(req); err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("admin API at %s: %w", f.admin, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(body))
		}
		return body, &adminError{code: resp.StatusCode, msg: e.Error}
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			return body, fmt.Errorf("admin API answer: %w", err)
		}
	}
	return body, nil
}

// show GETs path into a T and writes it to stdout: the body as it came
// with --json, else as print renders it.
func show[T any](ctx context.Context, f *adminFlags, path string, stdout io.Writer, print func(T) error) error {
	var v T
	body, err := f.call(ctx, "GET", path, &v)
	if err != nil {
		return err
	}
	if f.json {
		_, err := stdout.Write(body)
		return err
	}
	return print(v)
}

func members(ctx context.Context, f *adminFlags, _ []string, stdout io.Writer) error {
	return show(ctx, f, "/v1/members", stdout, func(ms []cluster.MemberInfo) error {
		printMembers(stdout, ms)
		return nil
	})
}

func printMembers(w io.Writer, ms []cluster.MemberInfo) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATUS\tGOSSIP\tVERSION\tSPEAKS\tZONE\tHOST\tREPLICAS\tLEADERS\tMETA\tGRPC\tRAFT")
	for _, m := range ms {
		meta := "-"
		switch {
		case m.MetaLeader:
			meta = "leader"
		case m.MetaVoter:
			meta = "voter"
		}
		speaks := "-"
		if m.MaxVersion != 0 {
			speaks = fmt.Sprintf("%d..%d", m.MinVersion, m.MaxVersion)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", m.ID, m.Status, m.Gossip, m.Version, speaks,
			orDash(m.Zone), orDash(m.Host), m.Replicas, m.Leaderships, meta, m.GRPCAddr, m.RaftAddr)
	}
	tw.Flush()
}

func status(ctx context.Context, f *adminFlags, _ []string, stdout io.Writer) error {
	return show(ctx, f, "/v1/status", stdout, func(st cluster.ClusterStatus) error { return printStatus(stdout, st) })
}

func printStatus(stdout io.Writer, st cluster.ClusterStatus) error {
	healthy := 0
	for _, s := range st.Shards {
		if shardHealthy(s, st.ReplicationFactor) {
			healthy++
		}
	}
	version := fmt.Sprint(st.ProtocolVersion)
	if st.ProtocolVersion == 0 { // a node before protocol versions answered: its cluster runs 1
		version = "1 (answered by a node before protocol versions)"
	}
	fmt.Fprintf(stdout, "cluster %s  epoch %d  %d members  %d shards (%d of %d groups settled)  replication factor %d  protocol version %s\n",
		st.ClusterID, st.Epoch, len(st.Members), st.NumShards, healthy, len(st.Shards), st.ReplicationFactor, version)
	if p := st.Protocol; st.ProtocolVersion != 0 && p.Highest > st.ProtocolVersion {
		if p.Target > st.ProtocolVersion {
			fmt.Fprintf(stdout, "protocol version %d is due: every member speaks it (the meta leader raises it within a second)\n", p.Target)
		} else {
			fmt.Fprintf(stdout, "protocol version %d waits for: %s\n", p.Highest, strings.Join(p.WaitingFor, ", "))
		}
	}
	fmt.Fprintln(stdout)
	printMembers(stdout, st.Members)
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tLEADER\tTERM\tCOMMIT\tSURVIVES\tREPLICAS (node:role:lag)")
	for _, s := range st.Shards {
		var reps []string
		for _, r := range s.Replicas {
			lag := fmt.Sprint(r.Lag)
			if !r.Reachable {
				lag = "unreachable"
			}
			reps = append(reps, fmt.Sprintf("%s:%s:%s", r.Node, r.Role, lag))
		}
		leader := s.Leader
		if leader == "" {
			leader = "(none)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", s.Shard, leader, s.Term, s.CommitIndex, survives(s), strings.Join(reps, " "))
	}
	return tw.Flush()
}

// orDash is s, or "-" when empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// survives is the SURVIVES column of status and shards: the failure
// domains whose loss, any one of them, the group's voters survive
// ("zone,host", "zone", "host"), or "none".
func survives(s cluster.ShardInfo) string {
	var d []string
	if s.ZoneSafe {
		d = append(d, "zone")
	}
	if s.HostSafe {
		d = append(d, "host")
	}
	if len(d) == 0 {
		return "none"
	}
	return strings.Join(d, ",")
}

// shardHealthy: a leader, and every placed replica a reachable voter.
func shardHealthy(s cluster.ShardInfo, rf int) bool {
	if s.Leader == "" {
		return false
	}
	for _, r := range s.Replicas {
		if r.Role != "voter" || !r.Reachable {
			return false
		}
	}
	return len(s.Replicas) > 0
}

type memberResult struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Epoch  uint64 `json:"epoch"`
}

func join(ctx context.Context, f *adminFlags, args []string, stdout io.Writer) error {
	w := joinWait{now: time.Now}
	return memberChange(ctx, f, "join", args[0], stdout, w.done)
}

// joinSettle is how long join --wait gives the reconciler to place
// replicas on a node once it is active before it reports that the cluster
// placed none there.
const joinSettle = 5 * time.Second

// joinWait is join --wait's condition: the reconciler placed replicas on
// the node, or the node has been active for joinSettle with none: every
// shard has its replicas elsewhere and the counts are even within one (a
// fourth node of a one-shard cluster of three), until the shard policy
// adds a shard.
type joinWait struct {
	now    func() time.Time
	active time.Time // when the node was first seen active
}

func (w *joinWait) done(id string, m cluster.MemberInfo) (bool, string) {
	if m.Replicas > 0 {
		return true, fmt.Sprintf("%s: %d replicas, gossip %s", id, m.Replicas, m.Gossip)
	}
	if m.Status == cluster.StatusActive {
		if w.active.IsZero() {
			w.active = w.now()
		}
		if w.now().Sub(w.active) >= joinSettle {
			return true, fmt.Sprintf("%s: active, 0 replicas: every shard has its replicas on other nodes (the shard policy adds shards as members join: swarmnode shards)", id)
		}
	}
	return false, fmt.Sprintf("%s: 0 replicas, gossip %s", id, m.Gossip)
}

func remove(ctx context.Context, f *adminFlags, args []string, stdout io.Writer) error {
	// Waits until every replica has moved away and the node is removed.
	return memberChange(ctx, f, "remove", args[0], stdout, func(id string, m cluster.MemberInfo) (bool, string) {
		return m.Status == cluster.StatusRemoved, fmt.Sprintf("%s: %s, %d replicas left", id, m.Status, m.Replicas)
	})
}

// memberChange posts /v1/members/{id}/{verb} and, with --wait, polls until
// done says the change is complete.
func memberChange(ctx context.Context, f *adminFlags, verb, id string, stdout io.Writer, done func(string, cluster.MemberInfo) (bool, string)) error {
	var res memberResult
	body, err := f.call(ctx, "POST", "/v1/members/"+url.PathEscape(id)+"/"+verb, &res)
	if err != nil {
		return err
	}
	if f.json && !f.wait {
		_, err := stdout.Write(body)
		return err
	}
	if !f.json {
		fmt.Fprintf(stdout, "%s: %s (epoch %d)\n", id, res.Status, res.Epoch)
	}
	if !f.wait {
		return nil
	}
	return f.waitMember(ctx, stdout, id, func(m cluster.MemberInfo) (bool, string) { return done(id, m) })
}

// waitMember polls the member listing until done says so, printing each new
// progress line; with --json it prints the final member as JSON.
func (f *adminFlags) waitMember(ctx context.Context, stdout io.Writer, id string, done func(cluster.MemberInfo) (bool, string)) error {
	deadline := time.Now().Add(f.timeout)
	last := ""
	for {
		var ms []cluster.MemberInfo
		_, err := f.call(ctx, "GET", "/v1/members", &ms)
		var ae *adminError
		if err != nil && !errors.As(err, &ae) {
			return err
		}
		for _, m := range ms {
			if m.ID != id {
				continue
			}
			ok, line := done(m)
			if line != last && !f.json {
				fmt.Fprintln(stdout, line)
				last = line
			}
			if ok {
				if f.json {
					b, _ := json.MarshalIndent(m, "", "  ")
					fmt.Fprintln(stdout, string(b))
				}
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not done within %v (last: %s)", id, f.timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func transferLeader(ctx context.Context, f *adminFlags, rest []string, stdout io.Writer) error {
	q := ""
	if len(rest) == 2 {
		q = "?to=" + url.QueryEscape(rest[1])
	}
	var res struct {
		Shard  string `json:"shard"`
		Leader string `json:"leader"`
	}
	body, err := f.call(ctx, "POST", "/v1/shards/"+url.PathEscape(rest[0])+"/transfer-leader"+q, &res)
	if err != nil {
		return err
	}
	if f.json {
		_, err := stdout.Write(body)
		return err
	}
	fmt.Fprintf(stdout, "shard %s: leader %s\n", res.Shard, res.Leader)
	return nil
}

func snapshot(ctx context.Context, f *adminFlags, rest []string, stdout io.Writer) error {
	var res []cluster.SnapshotResult
	body, err := f.call(ctx, "POST", "/v1/shards/"+url.PathEscape(rest[0])+"/snapshot", &res)
	if err != nil {
		return err
	}
	if f.json {
		_, err := stdout.Write(body)
		return err
	}
	var buf bytes.Buffer
	failed := 0
	for _, r := range res {
		if r.Error != "" {
			failed++
			fmt.Fprintf(&buf, "%s: error: %s\n", r.Node, r.Error)
		} else {
			fmt.Fprintf(&buf, "%s: snapshot at index %d\n", r.Node, r.Index)
		}
	}
	stdout.Write(buf.Bytes())
	if failed > 0 {
		return fmt.Errorf("%d of %d replicas failed to snapshot", failed, len(res))
	}
	return nil
}
