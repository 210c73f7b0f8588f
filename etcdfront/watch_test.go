package etcdfront_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/etcdfront"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/server"
	"github.com/swarmkv/swarmkv/shard"
)

// evString is an event as the tests compare it: type, key, value, mod
// revision, and the previous value when there is one.
func evString(e *clientv3.Event) string {
	s := fmt.Sprintf("%s %s=%s@%d", e.Type, e.Kv.Key, e.Kv.Value, e.Kv.ModRevision)
	if e.PrevKv != nil {
		s += fmt.Sprintf(" prev %s@%d", e.PrevKv.Value, e.PrevKv.ModRevision)
	}
	return s
}

// recvEvents receives n events from wch (failing on an error, a close or
// the deadline) and checks each response's header is at or above its
// events' revisions.
func recvEvents(t *testing.T, wch clientv3.WatchChan, n int) []string {
	t.Helper()
	var out []string
	deadline := time.After(20 * time.Second)
	for len(out) < n {
		select {
		case resp, ok := <-wch:
			if !ok {
				t.Fatalf("watch closed after %d events: %v", len(out), out)
			}
			if err := resp.Err(); err != nil {
				t.Fatalf("watch error after %d events: %v", len(out), err)
			}
			for _, e := range resp.Events {
				if e.Kv.ModRevision > resp.Header.Revision {
					t.Fatalf("event at %d in a response of header revision %d", e.Kv.ModRevision, resp.Header.Revision)
				}
				out = append(out, evString(e))
			}
		case <-deadline:
			t.Fatalf("got %d events, want %d: %v", len(out), n, out)
		}
	}
	return out
}

func sameEvents(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%s:\n got %s\nwant %s", what, strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
}

// waitWatchers waits until the front serves n watchers.
func waitWatchers(t *testing.T, s *server.Server, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for s.Etcd().Watchers() != n {
		if time.Now().After(deadline) {
			t.Fatalf("the front serves %d watchers, want %d", s.Etcd().Watchers(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestEtcdWatch: the official client watches a key (with prev_kv) and a
// prefix and gets puts and deletes in order with their revisions; a watch
// from a start revision replays the history; the NOPUT and NODELETE
// filters; a cancelled watch is gone from the front.
func TestEtcdWatch(t *testing.T) {
	s := startNode(t, etcdfront.Config{})
	c := newClient(t, s.EtcdAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	firstPut(t, ctx, c, "a", "0") // 2
	actx, acancel := context.WithCancel(ctx)
	wa := c.Watch(actx, "a", clientv3.WithPrevKV())
	wp := c.Watch(ctx, "dir/", clientv3.WithPrefix())
	waitWatchers(t, s, 2)
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Put(ctx, "a", "1"))                                                                 // 3
	must(c.Put(ctx, "dir/x", "1"))                                                             // 4
	must(c.Put(ctx, "b", "1"))                                                                 // 5
	must(c.Delete(ctx, "a"))                                                                   // 6
	must(c.Txn(ctx).Then(clientv3.OpPut("dir/y", "2"), clientv3.OpPut("dir/z", "3")).Commit()) // 7
	must(c.Delete(ctx, "dir/", clientv3.WithPrefix()))                                         // 8

	sameEvents(t, "watch a --prev-kv", recvEvents(t, wa, 2),
		"PUT a=1@3 prev 0@2",
		"DELETE a=@6 prev 1@3")
	sameEvents(t, "watch --prefix dir/", recvEvents(t, wp, 6),
		"PUT dir/x=1@4", "PUT dir/y=2@7", "PUT dir/z=3@7",
		"DELETE dir/x=@8", "DELETE dir/y=@8", "DELETE dir/z=@8")
	all := []string{"PUT a=0@2", "PUT a=1@3", "PUT dir/x=1@4", "PUT b=1@5", "DELETE a=@6",
		"PUT dir/y=2@7", "PUT dir/z=3@7", "DELETE dir/x=@8", "DELETE dir/y=@8", "DELETE dir/z=@8"}
	sameEvents(t, "watch every key from revision 2", recvEvents(t, c.Watch(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(2)), 10), all...)
	sameEvents(t, "watch from revision 7", recvEvents(t, c.Watch(ctx, "", clientv3.WithFromKey(), clientv3.WithRev(7)), 5), all[5:]...)
	sameEvents(t, "watch a range [b, dir/y) from 2", recvEvents(t, c.Watch(ctx, "b", clientv3.WithRange("dir/y"), clientv3.WithRev(2)), 3),
		"PUT dir/x=1@4", "PUT b=1@5", "DELETE dir/x=@8")
	sameEvents(t, "deletes only (NOPUT)", recvEvents(t, c.Watch(ctx, "dir/", clientv3.WithPrefix(), clientv3.WithRev(2), clientv3.WithFilterPut()), 3),
		"DELETE dir/x=@8", "DELETE dir/y=@8", "DELETE dir/z=@8")
	sameEvents(t, "puts only (NODELETE)", recvEvents(t, c.Watch(ctx, "a", clientv3.WithRev(2), clientv3.WithFilterDelete()), 2),
		"PUT a=0@2", "PUT a=1@3")
	// A watch from a future revision gets nothing before it.
	wf := c.Watch(ctx, "a", clientv3.WithRev(10))
	must(c.Put(ctx, "a", "9"))  // 9
	must(c.Put(ctx, "a", "10")) // 10
	sameEvents(t, "watch a from the future revision 10", recvEvents(t, wf, 1), "PUT a=10@10")

	// Cancel: the client's cancel reaches the front.
	before := s.Etcd().Watchers()
	acancel()
	waitWatchers(t, s, before-1)
}

// TestEtcdWatchCompacted: a watch from a compacted revision ends at once
// with etcd's compacted answer (CompactRevision: the lowest revision a
// watch may start from); from there on it replays.
func TestEtcdWatchCompacted(t *testing.T) {
	s := startNode(t, etcdfront.Config{})
	c := newClient(t, s.EtcdAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	firstPut(t, ctx, c, "k", "2")
	for i := 3; i <= 6; i++ {
		if _, err := c.Put(ctx, "k", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Compact(ctx, 4); err != nil {
		t.Fatal(err)
	}
	for _, from := range []int64{2, 4} {
		select {
		case resp := <-c.Watch(ctx, "k", clientv3.WithRev(from)):
			if !resp.Canceled || resp.CompactRevision != 5 || !errors.Is(resp.Err(), rpctypes.ErrCompacted) {
				t.Fatalf("watch from %d after compacting at 4: %+v (err %v), want canceled at compact revision 5", from, resp, resp.Err())
			}
		case <-ctx.Done():
			t.Fatal("no answer to a watch from a compacted revision")
		}
	}
	sameEvents(t, "watch from 5", recvEvents(t, c.Watch(ctx, "k", clientv3.WithRev(5)), 2), "PUT k=5@5", "PUT k=6@6")
	waitWatchers(t, s, 1)
}

// TestEtcdWatchProgress: a watcher with progress_notify gets a progress
// notification (no events, the revision it is synced to) each interval
// without events; RequestProgress answers every watcher of the stream
// with the current revision once they have sent everything up to it.
func TestEtcdWatchProgress(t *testing.T) {
	s := startNode(t, etcdfront.Config{WatchProgressInterval: 50 * time.Millisecond})
	c := newClient(t, s.EtcdAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	firstPut(t, ctx, c, "k", "v") // 2
	// progress waits for a notification at want; an earlier one, at a
	// revision below (the watcher had not read want yet), may come first.
	progress := func(wch clientv3.WatchChan, want int64) {
		t.Helper()
		for {
			select {
			case resp := <-wch:
				if resp.Err() != nil {
					t.Fatal(resp.Err())
				}
				if resp.IsProgressNotify() {
					if resp.Header.Revision > want {
						t.Fatalf("progress at %d, want %d", resp.Header.Revision, want)
					}
					if resp.Header.Revision == want {
						return
					}
				}
			case <-ctx.Done():
				t.Fatal("no progress notification")
			}
		}
	}
	wn := c.Watch(ctx, "other", clientv3.WithProgressNotify())
	progress(wn, 2)
	if _, err := c.Put(ctx, "k", "w"); err != nil { // 3
		t.Fatal(err)
	}
	progress(wn, 3)

	// RequestProgress, on the stream of a watcher without progress_notify
	// (its own context: its own stream), with a replaying watcher on it.
	rctx, rcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer rcancel()
	wr := c.Watch(rctx, "none")
	wk := c.Watch(rctx, "k", clientv3.WithRev(2))
	if err := c.RequestProgress(rctx); err != nil {
		t.Fatal(err)
	}
	select { // RequestProgress's answer is at 3 at once (only it notifies wr)
	case resp := <-wr:
		if !resp.IsProgressNotify() || resp.Header.Revision != 3 {
			t.Fatalf("the answer to RequestProgress: %+v, want a progress notification at 3", resp)
		}
	case <-ctx.Done():
		t.Fatal("no answer to RequestProgress")
	}
	sameEvents(t, "the replaying watcher, before its progress", recvEvents(t, wk, 2), "PUT k=v@2", "PUT k=w@3")
	progress(wk, 3)
}

// TestEtcdWatchLimits: a create over --etcd-max-watchers-per-conn, or
// over --etcd-max-watchers on the node, is refused with a reason the
// official client returns as the watch's error; a cancelled watch frees
// its place.
func TestEtcdWatchLimits(t *testing.T) {
	s := startNode(t, etcdfront.Config{MaxWatchers: 3, MaxWatchersPerConn: 2})
	c1 := newClient(t, s.EtcdAddr())
	c2 := newClient(t, s.EtcdAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	firstPut(t, ctx, c1, "k", "v")
	refused := func(wch clientv3.WatchChan, want string) {
		t.Helper()
		select {
		case resp := <-wch:
			if !resp.Canceled || resp.Err() == nil || !strings.Contains(resp.Err().Error(), want) {
				t.Fatalf("a watch over the limit: %+v %v, want refused with %q", resp, resp.Err(), want)
			}
		case <-ctx.Done():
			t.Fatal("no answer")
		}
	}
	c1ctx, c1cancel := context.WithCancel(ctx)
	c1.Watch(c1ctx, "a")
	c1.Watch(c1ctx, "b")
	waitWatchers(t, s, 2)
	// Its own stream (another context), the same connection.
	refused(c1.Watch(clientv3.WithRequireLeader(ctx), "c"), "too many watchers on this connection (limit 2, --etcd-max-watchers-per-conn)")
	c2.Watch(ctx, "d")
	waitWatchers(t, s, 3)
	refused(c2.Watch(clientv3.WithRequireLeader(ctx), "e"), "too many watchers on this node (limit 3, --etcd-max-watchers)")
	c1cancel()
	waitWatchers(t, s, 1)
	w := c2.Watch(clientv3.WithRequireLeader(ctx), "k", clientv3.WithRev(2))
	sameEvents(t, "a watch once places were freed", recvEvents(t, w, 1), "PUT k=v@2")
}

// rawWatch opens a Watch stream of etcd's generated client, with gRPC's
// smallest flow-control windows (no BDP growth: a client that does not
// read blocks the server's sends after about 64 KiB).
func rawWatch(t *testing.T, ctx context.Context, addr string) pb.Watch_WatchClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	st, err := pb.NewWatchClient(conn).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func create(t *testing.T, st pb.Watch_WatchClient, req *pb.WatchCreateRequest) *pb.WatchResponse {
	t.Helper()
	if err := st.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: req}}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil || !resp.Created {
		t.Fatalf("create %+v: %+v %v", req, resp, err)
	}
	return resp
}

// TestEtcdWatchIDsAndFragments, on etcd's generated client: watch ids
// chosen by the server (from 0) and by the client, a duplicate id and an
// empty range refused as etcd refuses them; a cancel answered with
// Canceled; a response over --etcd-max-request-bytes split in fragments
// when the watcher asked for them, whole otherwise.
func TestEtcdWatchIDsAndFragments(t *testing.T) {
	s := startNode(t, etcdfront.Config{MaxRequestBytes: 4096})
	c := newClient(t, s.EtcdAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	firstPut(t, ctx, c, "k", "v") // 2
	st := rawWatch(t, ctx, s.EtcdAddr())
	if r := create(t, st, &pb.WatchCreateRequest{Key: []byte("a")}); r.WatchId != 0 || r.Canceled || r.Header.Revision != 2 {
		t.Fatalf("first server-chosen id: %+v", r)
	}
	if r := create(t, st, &pb.WatchCreateRequest{Key: []byte("a"), WatchId: 1}); r.WatchId != 1 || r.Canceled {
		t.Fatalf("client-chosen id 1: %+v", r)
	}
	if r := create(t, st, &pb.WatchCreateRequest{Key: []byte("a")}); r.WatchId != 2 {
		t.Fatalf("next server-chosen id: %+v, want 2 (1 is taken)", r)
	}
	if r := create(t, st, &pb.WatchCreateRequest{Key: []byte("a"), WatchId: 1}); r.WatchId != -1 || !r.Canceled || r.CancelReason != "mvcc: duplicate watch ID provided on the WatchStream" {
		t.Fatalf("a duplicate id: %+v", r)
	}
	if r := create(t, st, &pb.WatchCreateRequest{Key: []byte("b"), RangeEnd: []byte("a")}); r.WatchId != -1 || !r.Canceled || r.CancelReason != "mvcc: watcher range is empty" {
		t.Fatalf("an empty range: %+v", r)
	}
	if err := st.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: 1}}}); err != nil {
		t.Fatal(err)
	}
	if r, err := st.Recv(); err != nil || !r.Canceled || r.WatchId != 1 {
		t.Fatalf("cancel of 1: %+v %v", r, err)
	}
	// A txn of four values of 1 KiB: one response of about 4.2 KiB.
	create(t, st, &pb.WatchCreateRequest{Key: []byte("f/"), RangeEnd: []byte("f0"), Fragment: true, WatchId: 10})
	create(t, st, &pb.WatchCreateRequest{Key: []byte("f/"), RangeEnd: []byte("f0"), WatchId: 11})
	var ops []clientv3.Op
	for i := range 4 {
		ops = append(ops, clientv3.OpPut(fmt.Sprint("f/", i), strings.Repeat("v", 1000)))
	}
	if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
		t.Fatal(err)
	}
	parts := map[int64][]int{} // events per response, per watch id
	for len(parts[10]) == 0 || parts[10][len(parts[10])-1] < 0 || len(parts[11]) == 0 {
		r, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		n := len(r.Events)
		if r.Fragment {
			n = -n // more to come
		}
		parts[r.WatchId] = append(parts[r.WatchId], n)
		if r.Size() > 4096 && r.WatchId == 10 && len(r.Events) > 1 {
			t.Fatalf("a fragment of %d bytes with %d events", r.Size(), len(r.Events))
		}
	}
	got10, total := parts[10], 0
	for _, n := range got10 {
		total += max(n, -n)
	}
	if len(got10) < 2 || total != 4 || fmt.Sprint(parts[11]) != "[4]" {
		t.Fatalf("responses (events, negative: a fragment) of the fragmenting watcher %v, of the other %v", got10, parts[11])
	}
}

// TestEtcdWatchSlowConsumer: a client that stops reading holds at most
// the stream's pages of events on the node (the watchers read the history
// only when the stream can take a page), never a growing buffer; after
// the send timeout the stream ends with Unavailable (the official client
// resumes), and what the client had received was in order, without gaps.
func TestEtcdWatchSlowConsumer(t *testing.T) {
	const maxReq = 64 << 10
	s := startNode(t, etcdfront.Config{MaxRequestBytes: maxReq, WatchSendTimeout: 500 * time.Millisecond})
	c := newClient(t, s.EtcdAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	firstPut(t, ctx, c, "k", "v") // 2
	st := rawWatch(t, ctx, s.EtcdAddr())
	create(t, st, &pb.WatchCreateRequest{Key: []byte("big/"), RangeEnd: []byte("big0")})
	// 4 MiB of events, 64 times the client's window; nobody reads.
	val := strings.Repeat("v", 32<<10)
	const n = 128
	var peak int64
	for i := range n {
		if _, err := c.Put(ctx, fmt.Sprintf("big/%03d", i), val); err != nil {
			t.Fatal(err)
		}
		peak = max(peak, s.Etcd().WatchBytesHeld())
	}
	for s.Etcd().Watchers() != 0 { // until the send timeout ends the stream
		peak = max(peak, s.Etcd().WatchBytesHeld())
		if ctx.Err() != nil {
			t.Fatal("the stream of a client that reads nothing was never ended")
		}
		time.Sleep(time.Millisecond)
	}
	// Two pages of the stream, each its page or one revision larger.
	if bound := int64(2 * (maxReq + len(val) + 1024)); peak > bound || peak == 0 {
		t.Fatalf("the node held %d bytes of events for a client that reads nothing, bound %d", peak, bound)
	}
	for s.Etcd().WatchBytesHeld() != 0 {
		if ctx.Err() != nil {
			t.Fatalf("%d bytes still held after the stream ended", s.Etcd().WatchBytesHeld())
		}
		time.Sleep(time.Millisecond)
	}
	next := int64(3)
	for {
		r, err := st.Recv()
		if err != nil {
			if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "slow consumer") {
				t.Fatalf("the stream ended with %v, want Unavailable (slow consumer)", err)
			}
			break
		}
		for _, e := range r.Events {
			if e.Kv.ModRevision != next || e.Type != mvccpb.PUT {
				t.Fatalf("event at %d, want %d (in order, no gap)", e.Kv.ModRevision, next)
			}
			next++
		}
	}
	if next == 3 || next > n+2 {
		t.Fatalf("the client received events up to %d before the end", next-1)
	}
	t.Logf("peak %d bytes held; the client had received %d of %d events", peak, next-3, n)
}

// TestEtcdWatchFollowsMove: a split that moves the namespace to a new
// shard ends the stream with Unavailable; the official client resumes
// every watcher from its last revision, on the new shard, without a gap
// or a duplicate.
func TestEtcdWatchFollowsMove(t *testing.T) {
	s := startNode(t, etcdfront.Config{})
	c := newClient(t, s.EtcdAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	firstPut(t, ctx, c, "k", "2")
	wch := c.Watch(ctx, "k")
	waitWatchers(t, s, 1)
	for i := 3; i <= 5; i++ {
		if _, err := c.Put(ctx, "k", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	sameEvents(t, "before the move", recvEvents(t, wch, 3), "PUT k=3@3", "PUT k=4@4", "PUT k=5@5")
	moving := shard.SlotSetOf(shard.SlotOf(keys.EtcdRoutingKey(etcdfront.DefaultNamespace)))
	mv, err := s.Node().SplitShard(ctx, 0, &moving)
	if err != nil {
		t.Fatal(err)
	}
	for {
		moves, err := s.Node().Moves(ctx)
		if err == nil && len(moves) == 0 {
			if id, _, _ := s.Node().Route(keys.EtcdRoutingKey(etcdfront.DefaultNamespace)); id == mv.Target {
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("the split did not finish: %v %v", moves, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Writes retried until the new shard takes them (the old one refuses
	// them once frozen).
	for i := 6; i <= 8; i++ {
		for {
			_, err := c.Put(ctx, "k", fmt.Sprint(i))
			if err == nil {
				break
			}
			if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
				t.Fatalf("put during the move: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	sameEvents(t, "across the move", recvEvents(t, wch, 3), "PUT k=6@6", "PUT k=7@7", "PUT k=8@8")
	if id, _, _ := s.Node().Route(keys.EtcdRoutingKey(etcdfront.DefaultNamespace)); id != mv.Target {
		t.Fatalf("the namespace is on shard %d, want the split's target %d", id, mv.Target)
	}
}

// TestEtcdWatchOnFollower: a 3-node cluster; a watch on a node that does
// not lead the namespace's shard is served from its replica's applied
// state: the writes made through the leader arrive in order with their
// revisions, and a replay from a revision works there too.
func TestEtcdWatchOnFollower(t *testing.T) {
	const n = 3
	cfgs := make([]cluster.Config, n)
	for i := range cfgs {
		name := fmt.Sprint("n", i+1)
		cfgs[i] = cluster.Config{
			ID: name, DataDir: filepath.Join(t.TempDir(), name), BootstrapExpect: n, Shards: 1,
			RaftAddr: addr(t), GRPCAddr: addr(t), GossipAddr: addr(t),
			HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond,
			LeaderLeaseTimeout: 100 * time.Millisecond, GossipProfile: "local",
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		}
	}
	nodes := make([]*server.Server, n)
	for i := range cfgs {
		for j := range cfgs {
			if j != i {
				cfgs[i].Join = append(cfgs[i].Join, cfgs[j].GossipAddr)
			}
		}
		s, err := server.New(cfgs[i], server.WithEtcd(etcdfront.Config{Addr: addr(t)}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		nodes[i] = s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	rk := keys.EtcdRoutingKey(etcdfront.DefaultNamespace)
	var leader, follower *server.Server // of the namespace's shard
	for leader == nil || follower == nil {
		if ctx.Err() != nil {
			t.Fatal("no leader and follower of the namespace's shard")
		}
		time.Sleep(20 * time.Millisecond)
		leader, follower = nil, nil
		for _, s := range nodes {
			if s.Node().Ready() != nil {
				continue
			}
			_, r, err := s.Node().Route(rk)
			if err != nil || r == nil {
				continue
			}
			if r.IsLeader() {
				leader = s
			} else if r.Leader() != "" {
				follower = s
			}
		}
	}
	fc := newClient(t, follower.EtcdAddr())
	// Each write a compare-and-swap, retried until it is seen: a write
	// whose outcome was unknown (an election on this loaded machine) is
	// then never applied twice.
	var eps []string
	for _, s := range nodes {
		eps = append(eps, s.EtcdAddr())
	}
	all, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	write := func(v string, cmp clientv3.Cmp) {
		t.Helper()
		for {
			_, err := all.Txn(ctx).If(cmp).Then(clientv3.OpPut("k", v)).Commit()
			if err == nil {
				if g, err := all.Get(ctx, "k"); err == nil && len(g.Kvs) == 1 && string(g.Kvs[0].Value) == v {
					return
				}
			}
			if ctx.Err() != nil {
				t.Fatalf("put k=%s: %v", v, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	write("2", clientv3.Compare(clientv3.Version("k"), "=", 0))
	// A watch without a start revision starts after the revision the
	// follower has applied (its created header's): wait until that is 2.
	for {
		g, err := fc.Get(ctx, "k", clientv3.WithSerializable())
		if err == nil && g.Header.Revision >= 2 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the follower never applied revision 2: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	wch := fc.Watch(clientv3.WithRequireLeader(ctx), "k")
	waitWatchers(t, follower, 1)
	for i := 3; i <= 5; i++ {
		write(fmt.Sprint(i), clientv3.Compare(clientv3.Value("k"), "=", fmt.Sprint(i-1)))
	}
	sameEvents(t, "on the follower", recvEvents(t, wch, 3), "PUT k=3@3", "PUT k=4@4", "PUT k=5@5")
	sameEvents(t, "a replay on the follower", recvEvents(t, fc.Watch(ctx, "k", clientv3.WithRev(2)), 4),
		"PUT k=2@2", "PUT k=3@3", "PUT k=4@4", "PUT k=5@5")
}
