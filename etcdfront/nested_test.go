package etcdfront_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/etcdfront"
	"github.com/swarmkv/swarmkv/fsm"
)

// TestEtcdClientNestedTxn: a txn with txns in its branches through the
// official client (clientv3.OpTxn): one revision, nested compares against
// the state before the txn (etcd), nested responses; etcd's ops budget
// (a nested txn has what its parent left), duplicate keys across
// branches, and the depth bound.
func TestEtcdClientNestedTxn(t *testing.T) {
	s := startNode(t, etcdfront.Config{})
	c := newClient(t, s.EtcdAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	firstPut(t, ctx, c, "a", "old") // 2

	r, err := c.Txn(ctx).Then(
		clientv3.OpPut("a", "new"),
		clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value("a"), "=", "old")},
			[]clientv3.Op{clientv3.OpPut("b", "then"), clientv3.OpGet("a")},
			[]clientv3.Op{clientv3.OpPut("b", "else")}),
	).Commit()
	if err != nil || !r.Succeeded || r.Header.Revision != 3 {
		t.Fatalf("nested txn: %+v %v", r, err)
	}
	n := r.Responses[1].GetResponseTxn()
	if n == nil || !n.Succeeded || string(n.Responses[1].GetResponseRange().Kvs[0].Value) != "new" {
		t.Fatalf("nested response: %+v", n)
	}
	if g, err := c.Get(ctx, "b"); err != nil || string(g.Kvs[0].Value) != "then" || g.Kvs[0].ModRevision != 3 {
		t.Fatalf("get b: %+v %v", g, err)
	}

	// etcd's budget: 64 ops at the top leave 64 to a nested txn.
	ops := func(n int, prefix string) []clientv3.Op {
		out := make([]clientv3.Op, n)
		for i := range out {
			out[i] = clientv3.OpPut(fmt.Sprintf("%s%d", prefix, i), "v")
		}
		return out
	}
	half := etcdfront.DefaultMaxTxnOps / 2
	if _, err := c.Txn(ctx).Then(append(ops(half-1, "t"), clientv3.OpTxn(nil, ops(half, "n"), nil))...).Commit(); err != nil {
		t.Fatalf("nested txn within the budget: %v", err)
	}
	if _, err := c.Txn(ctx).Then(append(ops(half-1, "t"), clientv3.OpTxn(nil, ops(half+1, "n"), nil))...).Commit(); !errors.Is(err, rpctypes.ErrTooManyOps) {
		t.Fatalf("nested txn over the budget: %v, want ErrTooManyOps", err)
	}
	// Duplicate keys across branches: two nested txns put one key;
	// a nested txn's then and else may.
	if _, err := c.Txn(ctx).Then(clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpPut("x", "1")}, nil),
		clientv3.OpTxn(nil, nil, []clientv3.Op{clientv3.OpPut("x", "2")})).Commit(); !errors.Is(err, rpctypes.ErrDuplicateKey) {
		t.Fatalf("two nested puts of one key: %v, want ErrDuplicateKey", err)
	}
	if _, err := c.Txn(ctx).Then(clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpPut("x", "1")}, []clientv3.Op{clientv3.OpPut("x", "2")})).Commit(); err != nil {
		t.Fatalf("then and else put one key: %v", err)
	}
	// The depth bound.
	deep := clientv3.OpPut("d", "1")
	for range fsm.MaxEtcdTxnDepth {
		deep = clientv3.OpTxn(nil, []clientv3.Op{deep}, nil)
	}
	if _, err := c.Txn(ctx).Then(deep).Commit(); err != nil {
		t.Fatalf("txns nested %d deep: %v", fsm.MaxEtcdTxnDepth, err)
	}
	if _, err := c.Txn(ctx).Then(clientv3.OpTxn(nil, []clientv3.Op{deep}, nil)).Commit(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("txns nested %d deep: %v, want InvalidArgument", fsm.MaxEtcdTxnDepth+1, err)
	}
}
