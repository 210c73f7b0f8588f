package client

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/rpc"
)

// TestWatchRetriesBusyCatchUp: a node that refuses a watch's catch-up for
// its load (ResourceExhausted with a RetryInfo: --max-concurrent-catchups)
// is asked again after the hint, from the same position, and the paged
// listing and the events that follow reach the consumer with no error.
// A ResourceExhausted without the hint (a cap of watchers) stays final.
func TestWatchRetriesBusyCatchUp(t *testing.T) {
	busy := func() error {
		st, _ := status.New(codes.ResourceExhausted, "test: too many catch-ups; retry after 10ms").WithDetails(&rpc.RetryInfo{RetryAfterMs: 10})
		return st.Err()
	}
	var asked []string
	n := newFakeWatchNode(t, func(attempt int, req *rpc.WatchRequest, s rpc.Watch_WatchServer) error {
		asked = append(asked, fmt.Sprintf("list=%v after=%d", req.GetList(), req.GetAfterRevision()))
		switch attempt {
		case 0, 1:
			return busy()
		case 2:
			_ = s.Send(&rpc.WatchResponse{Revision: 5, Created: &rpc.WatchCreated{AfterRevision: 5}})
			_ = s.Send(&rpc.WatchResponse{Revision: 5, Listing: true, Events: []*rpc.WatchEvent{put("a", []byte("1"))}})
			_ = s.Send(&rpc.WatchResponse{Revision: 5, Listing: true, Events: []*rpc.WatchEvent{put("b", []byte("2"))}})
			_ = s.Send(&rpc.WatchResponse{Revision: 5, Listing: true, ListDone: true, Events: []*rpc.WatchEvent{put("c", []byte("3"))}})
			_ = s.Send(&rpc.WatchResponse{Revision: 6, Events: []*rpc.WatchEvent{put("a", []byte("4"))}})
			return busy() // the catch-up of the resume is refused once more
		case 3:
			_ = s.Send(&rpc.WatchResponse{Revision: 6, Created: &rpc.WatchCreated{AfterRevision: 6}})
			_ = s.Send(&rpc.WatchResponse{Revision: 7, Events: []*rpc.WatchEvent{del("b")}})
			<-s.Context().Done()
			return s.Context().Err()
		}
		return status.Error(codes.Internal, "test: unexpected attempt")
	})
	c := fakeClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []string
	for r := range c.ListWatch(ctx, []byte("u")) {
		if r.Err != nil {
			t.Fatalf("watch ended with %v after %v", r.Err, got)
		}
		for _, e := range r.Events {
			got = append(got, fmt.Sprintf("%d:%s%s/%v/%v", r.Revision, e.Type, e.Key, r.Listing, r.ListDone))
		}
		if r.Revision == 7 {
			break
		}
	}
	want := "[5:puta/true/false 5:putb/true/false 5:putc/true/true 6:puta/false/false 7:deleteb/false/false]"
	if fmt.Sprint(got) != want {
		t.Fatalf("got %v\nwant %s", got, want)
	}
	cancel()
	<-n.ended
	if fmt.Sprint(asked) != "[list=true after=0 list=true after=0 list=true after=0 list=false after=6]" {
		t.Fatalf("requests %v", asked)
	}

	// A cap (no retry hint) ends the watch.
	capped := newFakeWatchNode(t, func(int, *rpc.WatchRequest, rpc.Watch_WatchServer) error {
		return status.Error(codes.ResourceExhausted, "test: too many watchers (--max-watchers-per-identity)")
	})
	r := <-fakeClient(t, capped).Watch(context.Background(), []byte("u"))
	if status.Code(r.Err) != codes.ResourceExhausted && r.Err == nil {
		t.Fatalf("capped watch: %+v", r)
	}
	t.Logf("capped: %v", r.Err)
}
