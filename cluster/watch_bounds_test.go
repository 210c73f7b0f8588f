package cluster

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/rpc"
)

// TestWatchListPaged: a list-watch over values whose total passes
// --max-page-bytes arrives in several listing messages, each within the
// bound, then the changes after the listing (issue 37 item 7: the
// listing was one read of up to 100,000 keys sent 500 keys a message,
// whatever their size: 67 MB at once for 64 values of 1 MiB).
func TestWatchListPaged(t *testing.T) {
	const pageBytes = 64 << 10
	tc := newTestCluster(t, 1, 1, func(c *Config) { c.MaxPageBytes = pageBytes })
	c := tc.client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rk := []byte("carol")
	val := bytes.Repeat([]byte{'v'}, 16<<10)
	for i := range 20 {
		if err := c.Put(ctx, rk, []byte(fmt.Sprintf("k%02d", i)), val); err != nil {
			t.Fatal(err)
		}
	}
	lw := c.ListWatch(ctx, rk)
	pages, keys := 0, 0
	for r := range lw {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if !r.Listing {
			t.Fatalf("event before the listing ended: %+v", r)
		}
		size := 0
		for _, e := range r.Events {
			size += len(e.Key) + len(e.Value)
			if want := fmt.Sprintf("k%02d", keys); string(e.Key) != want {
				t.Fatalf("listed %q, want %q", e.Key, want)
			}
			keys++
		}
		if size > pageBytes {
			t.Fatalf("listing page %d of %d events, %d bytes: over --max-page-bytes %d", pages, len(r.Events), size, pageBytes)
		}
		pages++
		if r.ListDone {
			break
		}
	}
	if keys != 20 || pages < 5 {
		t.Fatalf("%d keys in %d pages, want 20 in 5 or more", keys, pages)
	}
	if err := c.Put(ctx, rk, []byte("after"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	for r := range lw {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if len(r.Events) > 0 {
			if len(r.Events) != 1 || string(r.Events[0].Key) != "after" || r.Listing {
				t.Fatalf("after the listing: %+v", r)
			}
			break
		}
	}
	t.Logf("20 values of 16 KiB listed in %d pages", pages)
}

// TestWatchCapPerIdentity: the watchers of one identity (here, without
// auth, one client IP) are capped over all its connections (issue 37
// item 9: ten connections of one token filled the node's cap of 10,000,
// the per-connection cap being 1,000); the refusal names the flag, and a
// closed watcher frees its place.
func TestWatchCapPerIdentity(t *testing.T) {
	tc := newTestCluster(t, 1, 1, func(c *Config) { c.MaxWatchersPerIdentity = 3 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var cancels []context.CancelFunc
	for i := range 3 { // three clients, three connections
		c := tc.client()
		wctx, wcancel := context.WithCancel(ctx)
		cancels = append(cancels, wcancel)
		r := <-c.Watch(wctx, []byte(fmt.Sprint("rk", i)), client.WithProgress(20*time.Millisecond))
		if r.Err != nil {
			t.Fatalf("watcher %d: %v", i, r.Err)
		}
	}
	r := <-tc.client().Watch(ctx, []byte("rk4"))
	if status.Code(r.Err) != codes.ResourceExhausted && !isExhausted(r.Err) || r.Err == nil || !strings.Contains(r.Err.Error(), "max-watchers-per-identity") {
		t.Fatalf("fourth watcher, on a fourth connection: %+v", r)
	}
	t.Logf("refused: %v", r.Err)
	cancels[0]()
	waitFor(t, 10*time.Second, "a watcher's place freed", func() error {
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		defer wcancel()
		r := <-tc.client().Watch(wctx, []byte("rk5"), client.WithProgress(20*time.Millisecond))
		return r.Err
	})
	for _, c := range cancels {
		c()
	}
}

// TestKeepAliveStreamsCapPerIdentity: one identity's lease keep-alive
// streams are capped over all its connections; the refusal names the
// flag.
func TestKeepAliveStreamsCapPerIdentity(t *testing.T) {
	tc := newTestCluster(t, 1, 1, func(c *Config) { c.MaxKeepAliveStreamsPerIdentity = 2 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := tc.client()
	lease, err := c.Leases().Grant(ctx, []byte("dave"), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	open := func() (rpc.Lease_KeepAliveStreamClient, error) {
		cc, err := grpc.NewClient(tc.nodes[0].Addrs().GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		st, err := rpc.NewLeaseClient(cc).KeepAliveStream(ctx)
		if err != nil {
			return nil, err
		}
		if err := st.Send(&rpc.LeaseKeepAliveRequest{Id: uint64(lease)}); err != nil {
			return nil, err
		}
		_, err = st.Recv()
		return st, err
	}
	for i := range 2 {
		if _, err := open(); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	_, err = open()
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "max-keepalive-streams-per-identity") {
		t.Fatalf("third stream, on a third connection: %v", err)
	}
	t.Logf("refused: %v", err)
}
