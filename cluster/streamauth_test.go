package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
	"github.com/swarmkv/swarmkv/transport"
)

// auditCapture is a slog.Handler that keeps the audit records (attribute
// audit=true) of every logger derived from it, and passes every record on
// to next.
type auditCapture struct {
	next slog.Handler
	mu   *sync.Mutex
	recs *[]map[string]string
}

func newAuditCapture(next slog.Handler) *auditCapture {
	return &auditCapture{next: next, mu: &sync.Mutex{}, recs: &[]map[string]string{}}
}

func (h *auditCapture) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.next.Enabled(ctx, l)
}

func (h *auditCapture) Handle(ctx context.Context, r slog.Record) error {
	rec := map[string]string{}
	r.Attrs(func(a slog.Attr) bool {
		rec[a.Key] = a.Value.String()
		return true
	})
	if rec["audit"] == "true" {
		h.mu.Lock()
		*h.recs = append(*h.recs, rec)
		h.mu.Unlock()
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *auditCapture) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.next = h.next.WithAttrs(as)
	return &c
}

func (h *auditCapture) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	return &c
}

// find returns the audit records of who calling what.
func (h *auditCapture) find(who, what string) []map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]string
	for _, r := range *h.recs {
		if r["who"] == who && r["what"] == what {
			out = append(out, r)
		}
	}
	return out
}

// streamPairs opens one of the node-to-node streams that carry a shard's
// records (Admin.BackupShard, Admin.ExportSlots of the shard's slots, live)
// and counts the records it receives before the stream ends.
func streamPairs(ctx context.Context, admin rpc.AdminClient, method string, id shard.ID, slots string) (int, error) {
	var recv func() (int, error)
	switch method {
	case rpc.Admin_BackupShard_FullMethodName:
		s, err := admin.BackupShard(ctx, &rpc.BackupShardRequest{Shard: uint32(id)})
		if err != nil {
			return 0, err
		}
		recv = func() (int, error) {
			c, err := s.Recv()
			return len(c.GetPairs()), err
		}
	case rpc.Admin_ExportSlots_FullMethodName:
		s, err := admin.ExportSlots(ctx, &rpc.ExportSlotsRequest{Shard: uint32(id), Live: true, Slots: slots})
		if err != nil {
			return 0, err
		}
		recv = func() (int, error) {
			c, err := s.Recv()
			return len(c.GetPairs()), err
		}
	default:
		return 0, fmt.Errorf("no stream %s", method)
	}
	total := 0
	for {
		n, err := recv()
		total += n
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// TestNonMemberCertificateStreamsNothing (issue 37 item 3): a node
// certificate of the cluster CA for a node that was never admitted (n9,
// issued after the cluster formed) is refused on the node-to-node streams
// that carry whole shards, Admin.BackupShard and Admin.ExportSlots, as on
// unary calls: PermissionDenied "not a member", and not one record. A
// member's certificate streams the records; a client certificate, even an
// admin's, does not. The denials and the member's grants are audit-logged.
// Behind the guard, the handlers' own check (checkNodeStream) refuses a
// stream whose context carries no caller.
func TestNonMemberCertificateStreamsNothing(t *testing.T) {
	ca := newTestCA(t)
	var audit *auditCapture
	tc := newTestCluster(t, 1, 1, func(c *Config) {
		c.TLS = ca.node(c.ID)
		audit = newAuditCapture(testLogger(t).Handler())
		c.Logger = slog.New(audit).With("test_node", c.ID)
	})
	ctx := ctxT(t, 60*time.Second)
	n1 := tc.nodes[0]
	c, err := tlsClient(t, tc, client.Config{TLS: ca.client("ops", "kv:write")})
	if err != nil {
		t.Fatal(err)
	}
	const records = 20
	for i := range records {
		if err := putUntilKnown(ctx, c, []byte(fmt.Sprintf("user-%d", i)), []byte("k"), []byte("secret value")); err != nil {
			t.Fatal(err)
		}
	}
	smap := n1.smapNow()
	id := smap.Shards()[0]
	var slots shard.SlotSet
	for _, s := range smap.SlotsOf(id) {
		slots.Add(s)
	}

	dial := func(nodeID string) rpc.AdminClient {
		t.Helper()
		files := tc.cfgs[0].TLS
		if nodeID != "n1" {
			files = ca.node(nodeID) // freshly issued: valid, never admitted
		}
		nt, err := transport.LoadNodeTLS(files, nodeID, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		cc, err := grpc.NewClient(n1.Addrs().GRPCAddr, grpc.WithTransportCredentials(credentials.NewTLS(nt.PeerConfig())))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return rpc.NewAdminClient(cc)
	}
	member, stranger := dial("n1"), dial("n9")
	cc, err := grpc.NewClient(n1.Addrs().GRPCAddr, grpc.WithTransportCredentials(credentials.NewTLS(ca.client("ops", "admin", "*:write"))))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	operator := rpc.NewAdminClient(cc) // a client certificate: no node, whatever its roles

	for _, method := range []string{rpc.Admin_BackupShard_FullMethodName, rpc.Admin_ExportSlots_FullMethodName} {
		got, err := streamPairs(ctx, stranger, method, id, slots.String())
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "not a member") || got != 0 {
			t.Errorf("%s as never-admitted n9: %d records, %v; want PermissionDenied (not a member) and none", method, got, err)
		}
		if recs := audit.find("node:n9", method); len(recs) == 0 || recs[0]["allowed"] != "false" {
			t.Errorf("%s as n9: audit records %v, want a denial", method, recs)
		}
		got, err = streamPairs(ctx, operator, method, id, slots.String())
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "needs node") || got != 0 {
			t.Errorf("%s as client cert:ops (admin): %d records, %v; want PermissionDenied (needs node) and none", method, got, err)
		}
		if recs := audit.find("cert:ops", method); len(recs) == 0 || recs[0]["allowed"] != "false" {
			t.Errorf("%s as cert:ops: audit records %v, want a denial", method, recs)
		}
		// The member's certificate streams the shard (the test's control:
		// the stream itself works).
		got, err = streamPairs(ctx, member, method, id, slots.String())
		if err != nil || got < records {
			t.Errorf("%s as member n1: %d records, %v; want at least %d", method, got, err, records)
		}
		if recs := audit.find("node:n1", method); len(recs) == 0 || recs[0]["allowed"] != "true" {
			t.Errorf("%s as n1: audit records %v, want a grant", method, recs)
		}
	}
	if err := n1.checkNodeStream(ctx, rpc.Admin_BackupShard_FullMethodName); status.Code(err) != codes.PermissionDenied {
		t.Errorf("checkNodeStream without a caller: %v, want PermissionDenied", err)
	}
}
