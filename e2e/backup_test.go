package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/client"
)

// shardLeader returns the node id leading shard s, as p's admin API says.
func shardLeader(p *proc, s string) (string, error) {
	resp, err := http.Get("http://" + p.http + "/v1/shards")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var shards []struct {
		Shard  string `json:"shard"`
		Leader string `json:"leader"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&shards); err != nil {
		return "", err
	}
	for _, sh := range shards {
		if sh.Shard == s && sh.Leader != "" {
			return sh.Leader, nil
		}
	}
	return "", fmt.Errorf("shard %s has no leader", s)
}

// TestBackupSIGKILL: real processes. A backup (swarmnode backup, through
// a follower's admin API, paced by --max-rate 4MiB) of a shard of 40 MB
// is cut by SIGKILL of the shard's leader, which streams it: the command
// fails, leaves neither the file nor its temporary file, and the cluster
// keeps serving. With the node back, a backup succeeds, swarmnode backup
// verify checks it, and swarmnode restore seeds a data dir on which a
// lone node serves the data.
func TestBackupSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c := newCluster(t, 3, 1)
	c.waitReady(c.nodes...)
	cl := c.client(c.nodes...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// 10,000 values of 4 KiB: far more than the buffers between the
	// leader and the command (gRPC windows, sockets) hold.
	value := func(i int) []byte { return bytes.Repeat(fmt.Appendf(nil, "%07d", i), 4096/7+1)[:4096] }
	const n = 10000
	if err := parallel(n, 32, func(i int) error {
		for {
			err := cl.Put(ctx, rk(i%500), key(i), value(i))
			if !errors.Is(err, client.ErrOutcomeUnknown) || ctx.Err() != nil {
				return err
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	var leader, via *proc
	waitFor(t, 20*time.Second, "shard 0's leader", func() error {
		id, err := shardLeader(c.nodes[0], "0")
		for _, p := range c.nodes {
			if p.id == id {
				leader = p
			} else if via == nil {
				via = p
			}
		}
		return err
	})
	dir := t.TempDir()
	file := filepath.Join(dir, "cluster.swkvbak")
	keyFile := filepath.Join(t.TempDir(), "backup.key") // made by the first backup
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(c.bin, "backup", "--admin", via.http, "--out", file, "--max-rate", "4MiB", "--backup-key-file", keyFile)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	waitFor(t, 30*time.Second, "the backup under way", func() error {
		if fi, err := os.Stat(file + ".tmp"); err != nil || fi.Size() == 0 {
			return fmt.Errorf("%s: %v", file+".tmp", err)
		}
		return nil
	})
	written, _ := os.Stat(file + ".tmp")
	c.kill(leader)
	killed := time.Now()
	t.Logf("SIGKILL of %s, shard 0's leader, streaming it to %s, with %d bytes written", leader.id, via.id, written.Size())
	select {
	case err := <-exited:
		if err == nil {
			t.Fatalf("the backup succeeded: %s", stdout.String())
		}
		t.Logf("the backup failed %v after the kill", time.Since(killed).Round(time.Millisecond))
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		t.Fatal("the backup did not end")
	}
	t.Logf("swarmnode backup: %s", strings.TrimSpace(stderr.String()))
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("left %v", ents[0].Name())
	}
	var others []*proc
	for _, p := range c.nodes {
		if p != leader {
			others = append(others, p)
		}
	}
	oc := c.client(others...)
	waitFor(t, 30*time.Second, "writes after the kill", func() error {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return oc.Put(wctx, rk(1), []byte("after"), []byte("kill"))
	})
	if v, err := oc.Get(ctx, rk(7), key(7)); err != nil || !bytes.Equal(v, value(7)) {
		t.Fatalf("read after the kill: %v", err)
	}

	// The node back: a whole backup, verified, restored.
	c.restart(leader)
	c.waitReady(c.nodes...)
	run := func(args ...string) string {
		out, err := exec.Command(c.bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("swarmnode %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	t.Log(strings.TrimSpace(run("backup", "--admin", leader.http, "--out", file, "--backup-key-file", keyFile)))
	if out := run("backup", "verify", file, "--backup-key-file", keyFile); !strings.Contains(out, ": ok (signature ok") || !strings.Contains(out, "1 shards") {
		t.Fatalf("verify: %s", out)
	}
	r := &proc{id: "r1", dir: filepath.Join(t.TempDir(), "r1"), grpc: freePort(t), raft: freePort(t), http: freePort(t), gossip: freePort(t)}
	run("restore", "--from", file, "--data-dir", r.dir, "--backup-key-file", keyFile)
	if out, err := exec.Command(c.bin, "restore", "--from", file, "--data-dir", r.dir, "--backup-key-file", keyFile).CombinedOutput(); err == nil || !strings.Contains(string(out), "not empty") {
		t.Fatalf("a second restore into the seeded dir: %v %s", err, out)
	}
	r.args = []string{"serve", "--id", r.id, "--data-dir", r.dir, "--grpc-addr", r.grpc, "--raft-addr", r.raft,
		"--http-addr", r.http, "--gossip-addr", r.gossip, "--gossip-profile", "local"}
	c.nodes = append(c.nodes, r) // killed at cleanup
	c.start(r, 0, 0, "")
	c.waitReady(r)
	rc := c.client(r)
	for _, i := range []int{0, 4321, n - 1} {
		if v, err := rc.Get(ctx, rk(i%500), key(i)); err != nil || !bytes.Equal(v, value(i)) {
			t.Fatalf("restored key %d: %v", i, err)
		}
	}
	if v, err := rc.Get(ctx, rk(1), []byte("after")); err != nil || string(v) != "kill" {
		t.Fatalf("restored write after the kill: %q %v", v, err)
	}
}
