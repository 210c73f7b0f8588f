package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStartupLines runs serve as the binary does (loopback, a temp data
// dir, the RESP front on) and checks what it prints: the addresses it
// listens on, then, once the node is ready, the block of what to try
// next, each line naming this node's addresses; and the shutdown line.
func TestStartupLines(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node")
	}
	grpcAddr, httpAddr, raftAddr, gossipAddr, redisAddr := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	var out, errOut lockedBuffer
	ctx, stop := context.WithCancel(context.Background())
	exited := make(chan error, 1)
	go func() {
		exited <- run(ctx, []string{"serve", "--id", "s1", "--data-dir", dataDir,
			"--grpc-addr", grpcAddr, "--raft-addr", raftAddr, "--http-addr", httpAddr,
			"--gossip-addr", gossipAddr, "--redis-addr", redisAddr, "--gossip-profile", "local",
			"--heartbeat-timeout", "200ms", "--election-timeout", "200ms", "--log-level", "warn",
		}, &out, &errOut)
	}()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			stop()
			<-exited
		}
		if t.Failed() {
			t.Logf("serve stdout:\n%s\nserve stderr:\n%s", out.String(), errOut.String())
		}
	})
	pollUntil(t, 60*time.Second, "the ready block", func() error {
		select {
		case err := <-exited:
			stopped = true
			t.Fatalf("serve returned early: %v", err)
		default:
		}
		if !strings.Contains(out.String(), "Ctrl-C stops the node.\n") {
			return fmt.Errorf("not printed yet")
		}
		return nil
	})
	_, redisPort, _ := strings.Cut(redisAddr, ":")
	got := out.String()
	for _, want := range []string{
		"swarmnode " + version + ": node s1 serving\n",
		"  grpc   " + grpcAddr + "\n",
		"  http   " + httpAddr + "\n",
		"  raft   " + raftAddr + "\n",
		"  gossip " + gossipAddr + "\n",
		"  redis  " + redisAddr + "\n",
		"  data   " + dataDir + "\n",
		"swarmnode: node s1 ready (every local shard has a leader). Try:\n",
		"  swarmnode kv put --endpoints " + grpcAddr + " --user alice greeting hello\n",
		"  swarmnode kv get --endpoints " + grpcAddr + " --user alice greeting\n",
		"  swarmnode status --admin " + httpAddr + "\n",
		"  console: http://" + httpAddr + "/ui/ ",
		"  redis-cli -h 127.0.0.1 -p " + redisPort + " HSET asset:metadata:demo id demo category tool\n",
		`  Go client: client.New(ctx, client.Config{Endpoints: []string{"` + grpcAddr + `"}})` + "\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("serve's output lacks %q", want)
		}
	}
	if i, j := strings.Index(got, "  data "), strings.Index(got, " ready "); i < 0 || j < i {
		t.Errorf("the ready block comes before the addresses")
	}
	// The commands it suggests work.
	for _, args := range [][]string{
		{"kv", "put", "--endpoints", grpcAddr, "--user", "alice", "greeting", "hello"},
		{"kv", "get", "--endpoints", grpcAddr, "--user", "alice", "greeting"},
		{"status", "--admin", httpAddr},
	} {
		if _, stderr, err := runCmd(context.Background(), args...); err != nil {
			t.Errorf("%q: %v %s", args, err, stderr)
		}
	}
	stop()
	stopped = true
	if err := <-exited; err != nil {
		t.Errorf("serve after cancel: %v", err)
	}
	if !strings.HasSuffix(out.String(), "Ctrl-C stops the node.\nswarmnode: shutting down\n") {
		t.Errorf("serve did not end with the shutdown line right after the ready block")
	}
}

// TestWaitReady: waitReady says once why the node is not ready yet, and
// returns true when it is, false when the context ends first.
func TestWaitReady(t *testing.T) {
	calls := 0
	ready := func() error {
		if calls++; calls < 3 {
			return fmt.Errorf("waiting to be admitted")
		}
		return nil
	}
	var out strings.Builder
	if !waitReady(context.Background(), ready, 0, &out) {
		t.Fatal("waitReady = false, want true")
	}
	if got, want := out.String(), "swarmnode: not ready yet: waiting to be admitted\n"; got != want {
		t.Errorf("printed %q, want %q", got, want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out.Reset()
	if waitReady(ctx, func() error { return fmt.Errorf("no leader") }, time.Hour, &out) {
		t.Error("waitReady after the context ended = true, want false")
	}
	if out.Len() != 0 {
		t.Errorf("printed %q before the hint's time", out.String())
	}
}
