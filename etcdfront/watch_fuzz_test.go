package etcdfront

import (
	"bytes"
	"reflect"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/swarmkv/swarmkv/fsm"
)

// FuzzWatchRequest decodes a WatchRequest as grpc would and validates its
// create request (validateCreate): it never panics; an accepted one has a
// non-empty key, a range end above it (or every key from it, or none);
// validating its re-encoding gives the same spec (the round trip); and
// matches agrees with a naive range check (put and delete, filters).
func FuzzWatchRequest(f *testing.F) {
	for _, req := range []*pb.WatchCreateRequest{
		{Key: []byte("a")},
		{Key: []byte("dir/"), RangeEnd: []byte("dir0"), StartRevision: 5, PrevKv: true, ProgressNotify: true},
		{Key: []byte{0}, RangeEnd: []byte{0}, Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT}},
		{Key: []byte("b"), RangeEnd: []byte("a")},
		{WatchId: 7, Fragment: true, Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NODELETE, 9}},
		{WatchId: -1, StartRevision: -3},
	} {
		b, err := (&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: req}}).Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, []byte("a"))
	}
	f.Fuzz(func(t *testing.T, data, probe []byte) {
		var req pb.WatchRequest
		if req.Unmarshal(data) != nil {
			return
		}
		cr := req.GetCreateRequest()
		if cr == nil {
			return
		}
		s, err := validateCreate(cr)
		if err != nil {
			return
		}
		if len(s.key) == 0 || s.end != nil && bytes.Compare(s.key, s.end) >= 0 || s.fromKey && s.end != nil || s.id < 0 || s.start < 0 {
			t.Fatalf("accepted %+v as %+v", cr, s)
		}
		again := new(pb.WatchCreateRequest)
		b, err := cr.Marshal()
		if err != nil || again.Unmarshal(b) != nil {
			t.Fatalf("re-encoding %+v: %v", cr, err)
		}
		s2, err := validateCreate(again)
		if err != nil || !reflect.DeepEqual(s, s2) {
			t.Fatalf("round trip: %+v then %+v (%v)", s, s2, err)
		}
		inRange := func(k []byte) bool {
			switch {
			case s.fromKey:
				return bytes.Compare(k, s.key) >= 0
			case s.end != nil:
				return bytes.Compare(k, s.key) >= 0 && bytes.Compare(k, s.end) < 0
			}
			return bytes.Equal(k, s.key)
		}
		for _, k := range [][]byte{probe, s.key, s.end, append(bytes.Clone(s.key), 0)} {
			for _, del := range []bool{false, true} {
				e := &fsm.EtcdEvent{Delete: del, KV: fsm.EtcdKV{Key: k}}
				want := inRange(k) && !(del && s.noDelete) && !(!del && s.noPut)
				if got := s.matches(e); got != want {
					t.Fatalf("spec %+v: matches(%q, delete %v) = %v, want %v", s, k, del, got, want)
				}
			}
		}
	})
}
