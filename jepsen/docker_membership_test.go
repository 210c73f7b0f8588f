package jepsen

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/cluster"
)

// The docker driver reaches the admin API over HTTP; its answers must map
// back to the codes viaMember treats as permanent or retryable, or a
// membership step would either spin on a bad request or give up on a
// passing condition.
func TestAdminHTTPCodes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/members":
			json.NewEncoder(w).Encode([]cluster.MemberInfo{{ID: "n1", Status: cluster.StatusActive, Replicas: 5}})
			return
		case "/v1/members/n9/join":
			w.WriteHeader(http.StatusConflict)
			json.NewEncoder(w).Encode(map[string]string{"error": "node n9 is not alive in gossip"})
			return
		case "/v1/members/bad%20id/join", "/v1/members/bad id/join":
			w.WriteHeader(http.StatusBadRequest)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
		json.NewEncoder(w).Encode(map[string]string{"error": "refused " + r.URL.Path})
	}))
	defer srv.Close()
	ctx := context.Background()

	var ms []cluster.MemberInfo
	if err := adminHTTP(ctx, http.MethodGet, srv.URL+"/v1/members", nil, &ms); err != nil || len(ms) != 1 || ms[0].Replicas != 5 {
		t.Fatalf("members: %v %+v", err, ms)
	}
	for _, tc := range []struct {
		path string
		code codes.Code
		msg  string
	}{
		{"/v1/members/n9/join", codes.Unavailable, "not alive in gossip"},
		{"/v1/members/bad%20id/join", codes.InvalidArgument, "refused"},
		{"/v1/members/n9/remove", codes.NotFound, "refused"},
	} {
		var res struct{ Status string }
		err := adminHTTP(ctx, http.MethodPost, srv.URL+tc.path, nil, &res)
		if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v (code %v), want %v with %q", tc.path, err, status.Code(err), tc.code, tc.msg)
		}
	}
}

// fakeAdmin is a memberAdmin whose answers a test scripts.
type fakeAdmin struct {
	vias    []string
	join    func(via string) (string, error)
	members func(via string) ([]cluster.MemberInfo, error)
	calls   []string
}

func (f *fakeAdmin) adminVia(except string) []string {
	var out []string
	for _, v := range f.vias {
		if v != except {
			out = append(out, v)
		}
	}
	return out
}
func (f *fakeAdmin) adminJoin(_ context.Context, via, node string) (string, error) {
	f.calls = append(f.calls, "join via "+via)
	return f.join(via)
}
func (f *fakeAdmin) adminRemove(context.Context, string, string) (string, error) {
	return "", errors.New("unused")
}
func (f *fakeAdmin) adminMembers(_ context.Context, via string) ([]cluster.MemberInfo, error) {
	f.calls = append(f.calls, "members via "+via)
	return f.members(via)
}

// joinMember retries a failing member through the next one, stops at once
// on a permanent error, and names the step and the last failure when it
// gives up.
func TestJoinMemberRetriesAndStops(t *testing.T) {
	f := &fakeAdmin{vias: []string{"n1", "n2", "n4"}, join: func(via string) (string, error) {
		if via == "n1" {
			return "", status.Error(codes.Unavailable, "no meta leader")
		}
		return cluster.StatusActive, nil
	}}
	if err := joinMember(context.Background(), f, "n4"); err != nil {
		t.Fatal(err)
	}
	if want := "join via n1,join via n2"; strings.Join(f.calls, ",") != want {
		t.Errorf("calls %v, want %s (n4 itself is never asked)", f.calls, want)
	}

	f = &fakeAdmin{vias: []string{"n1", "n2"}, join: func(string) (string, error) {
		return "", status.Error(codes.InvalidArgument, "bad id")
	}}
	if err := joinMember(context.Background(), f, "n4"); err == nil || !strings.Contains(err.Error(), "admit n4") || !strings.Contains(err.Error(), "bad id") {
		t.Fatalf("permanent error: %v", err)
	}
	if len(f.calls) != 1 {
		t.Errorf("a permanent error was retried: %v", f.calls)
	}

	f = &fakeAdmin{vias: []string{"n1"}, members: func(string) ([]cluster.MemberInfo, error) {
		return []cluster.MemberInfo{{ID: "n4", Status: cluster.StatusActive}}, nil
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	err := waitPlaced(ctx, f, "n4", func(context.Context) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "n4 holds replicas") || !strings.Contains(err.Error(), "0 replicas") {
		t.Fatalf("waitPlaced without replicas: %v, want the step and the last state", err)
	}
}
