package client

import (
	"bytes"
	"context"
	"errors"
	"net"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

func enc[R records.Record](t testing.TB, r R) []byte {
	t.Helper()
	b, err := records.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var (
	tUser  = keys.UserID{1, 2, 3}
	tAgent = keys.AgentID{9, 8, 7}
)

func tRunner() *records.Runner {
	return &records.Runner{RunnerID: "r1", LastSeen: 1700000000000, Meta: `{"host":"h1"}`}
}

func tBot(id, pool string) *records.Bot {
	return &records.Bot{AgentID: id, ClientID: "app-" + id, Tag: "Bot#0001", PoolID: pool, OwnerUserID: "alice",
		Token:     records.EncryptedToken{KeyID: "k1", Nonce: make([]byte, records.TokenNonceLen), Ciphertext: []byte("SECRET-SEALED-TOKEN")},
		CreatedAt: 5, UpdatedAt: 6}
}

func tPool() *records.Pool {
	return &records.Pool{PoolID: "pool_a", OwnerUserID: "alice", Name: "A", Visibility: records.VisibilityPrivate, CreatedAt: 1, UpdatedAt: 2}
}

func tAgentRec() *records.AgentRecord {
	return &records.AgentRecord{AgentID: tAgent, UserID: tUser, Name: "scout", Status: records.AgentRunning,
		Spec: records.AgentSpecRecord{CPUMillicores: 100, MemoryMB: 64, RuntimeVersion: "v1"}, CreatedAt: 1, UpdatedAt: 2}
}

// TestTypedEventConversion: each table's events convert to their ids and
// records; a bot loses its sealed token (HasToken stays); every malformed
// event is refused with the cause's sentinel.
func TestTypedEventConversion(t *testing.T) {
	r, err := runnersTable.event(WatchEvent{Type: EventPut, Key: []byte("r1"), Value: enc(t, tRunner())})
	if err != nil || r.ID != "r1" || r.Type != EventPut || !reflect.DeepEqual(r.Record, tRunner()) {
		t.Fatalf("runner put: %+v %v", r, err)
	}
	if d, err := runnersTable.event(WatchEvent{Type: EventDelete, Key: []byte("r1")}); err != nil || d.ID != "r1" || d.Record != nil {
		t.Fatalf("runner delete: %+v %v", d, err)
	}
	b, err := botsTable.event(WatchEvent{Type: EventPut, Key: []byte("b1"), Value: enc(t, tBot("b1", "pool_a"))})
	want := &BotInfo{AgentID: "b1", ClientID: "app-b1", Tag: "Bot#0001", PoolID: "pool_a", OwnerUserID: "alice", HasToken: true, CreatedAt: 5, UpdatedAt: 6}
	if err != nil || !reflect.DeepEqual(b.Record, want) {
		t.Fatalf("bot put: %+v %v", b.Record, err)
	}
	p, err := poolsTable.event(WatchEvent{Type: EventPut, Key: []byte("pool_a"), Value: enc(t, tPool())})
	if err != nil || !reflect.DeepEqual(p.Record, tPool()) {
		t.Fatalf("pool put: %+v %v", p, err)
	}
	at := agentsTable(tUser)
	a, err := at.event(WatchEvent{Type: EventPut, Key: tAgent[:], Value: enc(t, tAgentRec())})
	if err != nil || a.ID != tAgent || !reflect.DeepEqual(a.Record, tAgentRec()) {
		t.Fatalf("agent put: %+v %v", a, err)
	}

	badStatus := tBot("b1", "pool_a")
	badStatus.Status = 9
	otherUser := tAgentRec()
	otherUser.UserID = keys.UserID{4}
	for _, tc := range []struct {
		name string
		conv func() error
		want error
	}{
		{"runner id with a space", func() error {
			_, err := runnersTable.event(WatchEvent{Type: EventDelete, Key: []byte("r 1")})
			return err
		}, keys.ErrInvalidID},
		{"runner id differs from the key", func() error {
			_, err := runnersTable.event(WatchEvent{Type: EventPut, Key: []byte("r2"), Value: enc(t, tRunner())})
			return err
		}, records.ErrInvalid},
		{"runner value not CBOR", func() error {
			_, err := runnersTable.event(WatchEvent{Type: EventPut, Key: []byte("r1"), Value: []byte{0xff, 0x00}})
			return err
		}, records.ErrMalformed},
		{"runner value a pool", func() error {
			_, err := runnersTable.event(WatchEvent{Type: EventPut, Key: []byte("r1"), Value: enc(t, tPool())})
			return err
		}, records.ErrMalformed},
		{"unknown event type", func() error {
			_, err := runnersTable.event(WatchEvent{Type: 7, Key: []byte("r1")})
			return err
		}, records.ErrMalformed},
		{"delete with a value", func() error {
			_, err := runnersTable.event(WatchEvent{Type: EventDelete, Key: []byte("r1"), Value: []byte{1}})
			return err
		}, records.ErrMalformed},
		{"bot with a bad status", func() error {
			_, err := botsTable.event(WatchEvent{Type: EventPut, Key: []byte("b1"), Value: enc(t, badStatus)})
			return err
		}, records.ErrInvalid},
		{"agent of another user", func() error {
			_, err := at.event(WatchEvent{Type: EventPut, Key: tAgent[:], Value: enc(t, otherUser)})
			return err
		}, records.ErrInvalid},
		{"agent key of 31 bytes", func() error {
			_, err := at.event(WatchEvent{Type: EventDelete, Key: tAgent[:31]})
			return err
		}, keys.ErrInvalidID},
	} {
		if err := tc.conv(); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// FuzzTypedWatchEvent: any event either converts or is refused (no
// panic); a converted put's record encodes back to the value it came
// from (a bot's, with its token, to the stored bot), its id is the key.
func FuzzTypedWatchEvent(f *testing.F) {
	f.Add(byte(0), byte(0), []byte("r1"), enc(f, tRunner()))
	f.Add(byte(1), byte(0), []byte("b1"), enc(f, tBot("b1", "pool_a")))
	f.Add(byte(2), byte(0), []byte("pool_a"), enc(f, tPool()))
	f.Add(byte(3), byte(0), tAgent[:], enc(f, tAgentRec()))
	f.Add(byte(0), byte(1), []byte("r1"), []byte(nil))
	f.Add(byte(3), byte(1), tAgent[:], []byte(nil))
	f.Fuzz(func(t *testing.T, table, typ byte, key, value []byte) {
		e := WatchEvent{Type: EventType(typ % 3), Key: key, Value: value}
		check := func(err error, id string, put bool, rec func() ([]byte, error)) {
			if err != nil {
				if !errors.Is(err, keys.ErrInvalidID) && !errors.Is(err, records.ErrMalformed) && !errors.Is(err, records.ErrInvalid) {
					t.Fatalf("refused with an unclassified error: %v", err)
				}
				return
			}
			if id != string(key) {
				t.Fatalf("id %q from key %q", id, key)
			}
			if !put {
				if e.Type != EventDelete || len(value) != 0 {
					t.Fatalf("converted a %v with value %x as a delete", e.Type, value)
				}
				return
			}
			back, err := rec()
			if err != nil || !bytes.Equal(back, value) {
				t.Fatalf("record re-encodes to %x (%v), came from %x", back, err, value)
			}
		}
		switch table % 4 {
		case 0:
			ev, err := runnersTable.event(e)
			check(err, ev.ID, ev.Record != nil, func() ([]byte, error) { return records.Encode(ev.Record) })
		case 1:
			ev, err := botsTable.event(e)
			check(err, ev.ID, ev.Record != nil, func() ([]byte, error) {
				var stored records.Bot
				if err := records.Decode(value, &stored); err != nil {
					return nil, err
				}
				b := ev.Record
				if b.HasToken != !stored.Token.IsZero() {
					t.Fatalf("HasToken %t for token %+v", b.HasToken, stored.Token)
				}
				return records.Encode(&records.Bot{AgentID: b.AgentID, ClientID: b.ClientID, Tag: b.Tag, Status: b.Status,
					PoolID: b.PoolID, OwnerUserID: b.OwnerUserID, Profile: b.Profile, CreatedAt: b.CreatedAt, UpdatedAt: b.UpdatedAt,
					Token: stored.Token})
			})
		case 2:
			ev, err := poolsTable.event(e)
			check(err, ev.ID, ev.Record != nil, func() ([]byte, error) { return records.Encode(ev.Record) })
		case 3:
			ev, err := agentsTable(tUser).event(e)
			check(err, string(ev.ID[:]), ev.Record != nil, func() ([]byte, error) { return records.Encode(ev.Record) })
		}
	})
}

// fakeWatchNode is a one-node, one-shard cluster whose Watch service
// plays script: attempt is the number of the Watch call (0 first).
type fakeWatchNode struct {
	rpc.UnimplementedClusterServer
	rpc.UnimplementedWatchServer
	addr     string
	attempts atomic.Int32
	script   func(attempt int, req *rpc.WatchRequest, s rpc.Watch_WatchServer) error
	ended    chan struct{} // a Watch call returned
}

func newFakeWatchNode(t *testing.T, script func(int, *rpc.WatchRequest, rpc.Watch_WatchServer) error) *fakeWatchNode {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &fakeWatchNode{addr: l.Addr().String(), script: script, ended: make(chan struct{}, 16)}
	srv := grpc.NewServer()
	rpc.RegisterClusterServer(srv, n)
	rpc.RegisterWatchServer(srv, n)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Stop(); wg.Wait() })
	return n
}

func (n *fakeWatchNode) ClusterMap(context.Context, *rpc.ClusterMapRequest) (*rpc.ClusterMapResponse, error) {
	return &rpc.ClusterMapResponse{MapVersion: 1, NumShards: 1, Slots: make([]uint32, shard.NumSlots),
		Nodes:  []*rpc.NodeInfo{{Id: "a", GrpcAddr: n.addr}},
		Shards: []*rpc.ShardInfo{{Id: 0, Replicas: []string{"a"}, LeaderId: "a"}}}, nil
}

func (n *fakeWatchNode) Watch(req *rpc.WatchRequest, s rpc.Watch_WatchServer) error {
	defer func() { n.ended <- struct{}{} }()
	return n.script(int(n.attempts.Add(1)-1), req, s)
}

func fakeClient(t *testing.T, n *fakeWatchNode) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := New(ctx, Config{Endpoints: []string{n.addr}, Unary: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func put(key string, v []byte) *rpc.WatchEvent {
	return &rpc.WatchEvent{Type: rpc.WatchEventType_WATCH_EVENT_PUT, Key: []byte(key), Value: v}
}

func del(key string) *rpc.WatchEvent {
	return &rpc.WatchEvent{Type: rpc.WatchEventType_WATCH_EVENT_DELETE, Key: []byte(key)}
}

// TestTypedWatchDecodeErrorEndsWatch: a value that does not decode ends
// the typed watch with a *WatchDecodeError naming the table, revision
// and key (not the value), after the good events before it; the stream to
// the node is closed, not left open until the context ends.
func TestTypedWatchDecodeErrorEndsWatch(t *testing.T) {
	bad := tBot("b2", "pool_a")
	bad.Status = 9
	n := newFakeWatchNode(t, func(_ int, req *rpc.WatchRequest, s rpc.Watch_WatchServer) error {
		if req.GetTable() != rpc.WatchTable_WATCH_TABLE_BOTS || string(req.GetRoutingKey()) != keys.PoolsRoutingKey {
			return status.Errorf(codes.InvalidArgument, "test: table %v routing key %q", req.GetTable(), req.GetRoutingKey())
		}
		_ = s.Send(&rpc.WatchResponse{Revision: 4, Created: &rpc.WatchCreated{AfterRevision: 4}})
		_ = s.Send(&rpc.WatchResponse{Revision: 5, Events: []*rpc.WatchEvent{put("b1", enc(t, tBot("b1", "pool_a")))}})
		_ = s.Send(&rpc.WatchResponse{Revision: 6, Events: []*rpc.WatchEvent{del("b1"), put("b2", enc(t, bad))}})
		<-s.Context().Done()
		return s.Context().Err()
	})
	c := fakeClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []BotWatchResponse
	for r := range c.Pools().WatchBots(ctx, WithAfter(4)) {
		got = append(got, r)
	}
	if len(got) != 2 || len(got[0].Events) != 1 || got[0].Events[0].ID != "b1" || got[0].Revision != 5 {
		t.Fatalf("messages %+v: want the revision 5 put of b1, then the error", got)
	}
	var de *WatchDecodeError
	if err := got[1].Err; !errors.As(err, &de) || de.Table != TableBots || de.Revision != 6 || string(de.Key) != "b2" ||
		!errors.Is(err, records.ErrInvalid) || !errors.Is(err, ErrWatchDecode) {
		t.Fatalf("last message %+v: want a *WatchDecodeError of bot b2 at revision 6 wrapping records.ErrInvalid", got[1])
	}
	if msg := got[1].Err.Error(); strings.Contains(msg, "SECRET") || !strings.Contains(msg, `"b2"`) {
		t.Fatalf("error message %q: must name the key and never the value", msg)
	}
	select {
	case <-n.ended: // the client cancelled the stream
	case <-time.After(10 * time.Second):
		t.Fatal("the node's Watch call still runs after the typed watch ended")
	}
	if got := n.attempts.Load(); got != 1 {
		t.Fatalf("%d Watch calls: the decode error must not reconnect", got)
	}
}

// TestListWatchResyncFirstPageAndPoolBots: a listing cut off by a
// reconnect starts over, and only the first page of the new listing is
// marked Resync (marking every page made a consumer that drops its view
// on Resync lose the earlier pages); ListWatchBots of one pool shows the
// pool's bots, a bot moved away or removed as a delete, and nothing of
// other pools.
func TestListWatchResyncFirstPageAndPoolBots(t *testing.T) {
	script := func(attempt int, req *rpc.WatchRequest, s rpc.Watch_WatchServer) error {
		if !req.GetList() {
			return status.Error(codes.InvalidArgument, "test: a list watch must list")
		}
		switch attempt {
		case 0:
			_ = s.Send(&rpc.WatchResponse{Revision: 3, Created: &rpc.WatchCreated{AfterRevision: 3}})
			_ = s.Send(&rpc.WatchResponse{Revision: 3, Listing: true, Events: []*rpc.WatchEvent{put("b1", enc(t, tBot("b1", "p"))), put("b2", enc(t, tBot("b2", "q")))}})
			return status.Error(codes.Unavailable, "test: node went away")
		default:
			_ = s.Send(&rpc.WatchResponse{Revision: 10, Created: &rpc.WatchCreated{AfterRevision: 10}})
			_ = s.Send(&rpc.WatchResponse{Revision: 10, Listing: true, Events: []*rpc.WatchEvent{put("b1", enc(t, tBot("b1", "p"))), put("b3", enc(t, tBot("b3", "p")))}})
			_ = s.Send(&rpc.WatchResponse{Revision: 10, Listing: true, ListDone: true, Events: []*rpc.WatchEvent{put("b4", enc(t, tBot("b4", "p"))), put("b5", enc(t, tBot("b5", "q")))}})
			_ = s.Send(&rpc.WatchResponse{Revision: 11, Events: []*rpc.WatchEvent{put("b1", enc(t, tBot("b1", "q"))), del("b4"), del("b5"), put("b6", enc(t, tBot("b6", "p")))}})
			_ = s.Send(&rpc.WatchResponse{Revision: 12, Events: []*rpc.WatchEvent{put("b2", enc(t, tBot("b2", "q")))}}) // nothing of p
			_ = s.Send(&rpc.WatchResponse{Revision: 13, Progress: true})
			<-s.Context().Done()
			return s.Context().Err()
		}
	}
	type msg struct {
		rev                       uint64
		listing, listDone, resync bool
		events                    string
	}
	summary := func(rev uint64, listing, done, resync, progress bool, evs []string) (msg, bool) {
		return msg{rev, listing, done, resync, strings.Join(evs, " ")}, progress
	}
	collect := func(t *testing.T, next func() (msg, bool, bool)) []msg {
		var out []msg
		for {
			m, progress, ok := next()
			if !ok {
				t.Fatalf("watch ended after %+v", out)
			}
			if progress {
				return out
			}
			out = append(out, m)
		}
	}

	t.Run("raw", func(t *testing.T) {
		n := newFakeWatchNode(t, script)
		c := fakeClient(t, n)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		ch := c.ListWatch(ctx, []byte(keys.PoolsRoutingKey), WithTable(TableBots))
		got := collect(t, func() (msg, bool, bool) {
			r, ok := <-ch
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			var evs []string
			for _, e := range r.Events {
				evs = append(evs, e.Type.String()+":"+string(e.Key))
			}
			m, p := summary(r.Revision, r.Listing, r.ListDone, r.Resync, r.Progress, evs)
			return m, p, ok
		})
		want := []msg{
			{3, true, false, false, "put:b1 put:b2"},
			{10, true, false, true, "put:b1 put:b3"},
			{10, true, true, false, "put:b4 put:b5"},
			{11, false, false, false, "put:b1 delete:b4 delete:b5 put:b6"},
			{12, false, false, false, "put:b2"},
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("messages\n%+v\nwant\n%+v", got, want)
		}
	})
	t.Run("pool", func(t *testing.T) {
		n := newFakeWatchNode(t, script)
		c := fakeClient(t, n)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		ch := c.Pools().ListWatchBots(ctx, "p")
		got := collect(t, func() (msg, bool, bool) {
			r, ok := <-ch
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			var evs []string
			for _, e := range r.Events {
				if (e.Type == EventPut) != (e.Record != nil) || e.Record != nil && e.Record.PoolID != "p" {
					t.Fatalf("event %+v", e)
				}
				evs = append(evs, e.Type.String()+":"+e.ID)
			}
			m, p := summary(r.Revision, r.Listing, r.ListDone, r.Resync, r.Progress, evs)
			return m, p, ok
		})
		want := []msg{
			{3, true, false, false, "put:b1"},
			{10, true, false, true, "put:b1 put:b3"},
			{10, true, true, false, "put:b4"},
			{11, false, false, false, "delete:b1 delete:b4 put:b6"},
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("messages\n%+v\nwant\n%+v", got, want)
		}
	})
}

// TestTypedWatchRefusesKVOptions: a typed watch with WithPrefix or another
// table ends at once with ErrInvalidArgument, without a call.
func TestTypedWatchRefusesKVOptions(t *testing.T) {
	n := newFakeWatchNode(t, func(int, *rpc.WatchRequest, rpc.Watch_WatchServer) error {
		return status.Error(codes.Internal, "test: no call expected")
	})
	c := fakeClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, opt := range []WatchOption{WithPrefix([]byte("x")), WithTable(TablePools)} {
		var msgs []RunnerWatchResponse
		for r := range c.Pools().WatchRunners(ctx, opt) {
			msgs = append(msgs, r)
		}
		if len(msgs) != 1 || !errors.Is(msgs[0].Err, ErrInvalidArgument) {
			t.Fatalf("messages %+v, want one ErrInvalidArgument", msgs)
		}
	}
	if r := <-c.Pools().ListWatchBots(ctx, "bad pool"); !errors.Is(r.Err, ErrInvalidArgument) {
		t.Fatalf("ListWatchBots of a bad pool id: %+v", r)
	}
	if got := n.attempts.Load(); got != 0 {
		t.Fatalf("%d Watch calls", got)
	}
}

// TestWatchHintPingPongBacksOff: two nodes that each answer "not the
// leader, try the other" (as during an election) are not asked in a tight
// loop: a hint is followed at once only when the previous attempt was not
// itself a hint's (before, the watch reconnected with no pause at all:
// thousands of calls a second).
func TestWatchHintPingPongBacksOff(t *testing.T) {
	var a, b *fakeWatchNode
	hintTo := func(other **fakeWatchNode) func(int, *rpc.WatchRequest, rpc.Watch_WatchServer) error {
		return func(int, *rpc.WatchRequest, rpc.Watch_WatchServer) error {
			return rpc.KindNotLeader.Status("not the leader", &rpc.NotLeader{Shard: 0, LeaderId: "x", LeaderAddr: (*other).addr})
		}
	}
	a = newFakeWatchNode(t, hintTo(&b))
	b = newFakeWatchNode(t, hintTo(&a))
	c := fakeClient(t, a)
	drained := make(chan struct{})
	stopDrain := make(chan struct{})
	go func() { // the fakes report each call's end; keep them from blocking
		defer close(drained)
		for {
			select {
			case <-a.ended:
			case <-b.ended:
			case <-stopDrain:
				return
			}
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	ch := c.Watch(ctx, []byte("rk"))
	time.Sleep(time.Second)
	cancel()
	for range ch {
	}
	close(stopDrain)
	<-drained
	// With the pause: the first hint at once, then one pause per two
	// calls (20 ms doubling): about a dozen in a second.
	if n := a.attempts.Load() + b.attempts.Load(); n > 100 {
		t.Fatalf("%d watch calls in a second between two nodes naming each other", n)
	} else if n < 2 {
		t.Fatalf("%d watch calls: the hint was not followed", n)
	}
}

// hintingKV answers every Get "not the leader, try other".
type hintingKV struct {
	rpc.UnimplementedKVServer
	other *string
	calls atomic.Int32
}

func (h *hintingKV) Get(context.Context, *rpc.GetRequest) (*rpc.GetResponse, error) {
	h.calls.Add(1)
	return nil, rpc.KindNotLeader.Status("not the leader", &rpc.NotLeader{Shard: 0, LeaderId: "x", LeaderAddr: *h.other})
}

// TestCallHintPingPongBacksOff: the same for unary calls (a Get).
func TestCallHintPingPongBacksOff(t *testing.T) {
	var addrA, addrB string
	kvA, kvB := &hintingKV{other: &addrB}, &hintingKV{other: &addrA}
	serve := func(kv *hintingKV) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		n := &fakeWatchNode{addr: l.Addr().String()}
		rpc.RegisterClusterServer(srv, n)
		rpc.RegisterKVServer(srv, kv)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); _ = srv.Serve(l) }()
		t.Cleanup(func() { srv.Stop(); wg.Wait() })
		return n.addr
	}
	addrA, addrB = serve(kvA), serve(kvB)
	c := fakeClient(t, &fakeWatchNode{addr: addrA})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := c.Get(ctx, []byte("rk"), []byte("k")); err == nil {
		t.Fatal("a get answered by nobody succeeded")
	}
	if n := kvA.calls.Load() + kvB.calls.Load(); n > 100 {
		t.Fatalf("%d calls in a second between two nodes naming each other", n)
	} else if n < 2 {
		t.Fatalf("%d calls: the hint was not followed", n)
	}
}

// TestWatchAnyReplicaCompactedAsksLeader: a watch that followers may
// serve, answered "compacted" (a follower restored from a snapshot keeps
// history only from its index on), asks the leader before it gives up;
// a leader-only watch gives up at once with *CompactedError.
func TestWatchAnyReplicaCompactedAsksLeader(t *testing.T) {
	for _, anyReplica := range []bool{true, false} {
		n := newFakeWatchNode(t, func(attempt int, req *rpc.WatchRequest, s rpc.Watch_WatchServer) error {
			if attempt == 0 {
				st, _ := status.New(codes.OutOfRange, "swarmkv: compacted").WithDetails(&rpc.Compacted{Oldest: 50, Current: 60})
				return st.Err()
			}
			_ = s.Send(&rpc.WatchResponse{Revision: 4, Created: &rpc.WatchCreated{AfterRevision: 4}})
			_ = s.Send(&rpc.WatchResponse{Revision: 5, Events: []*rpc.WatchEvent{put("k", []byte("v"))}})
			<-s.Context().Done()
			return s.Context().Err()
		})
		c := fakeClient(t, n)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		opts := []WatchOption{WithAfter(4)}
		if anyReplica {
			opts = append(opts, WithAnyReplica())
		}
		r := <-c.Watch(ctx, []byte("rk"), opts...)
		cancel()
		var ce *CompactedError
		switch {
		case anyReplica && (r.Err != nil || r.Revision != 5):
			t.Fatalf("any replica: first message %+v, want the revision 5 event from the leader", r)
		case !anyReplica && (!errors.As(r.Err, &ce) || ce.Oldest != 50):
			t.Fatalf("leader only: first message %+v, want *CompactedError oldest 50", r)
		}
		for len(n.ended) > 0 {
			<-n.ended
		}
	}
}
