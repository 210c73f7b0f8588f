package api

import (
	"bytes"
	"testing"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/rpc"
)

func TestValidateWatch(t *testing.T) {
	uid := bytes.Repeat([]byte{7}, 32)
	for _, tc := range []struct {
		req *rpc.WatchRequest
		ok  bool
	}{
		{&rpc.WatchRequest{RoutingKey: []byte("alice")}, true},
		{&rpc.WatchRequest{RoutingKey: []byte("alice"), KeyPrefix: []byte("cfg/"), AfterRevision: 9}, true},
		{&rpc.WatchRequest{}, false}, // no routing key
		{&rpc.WatchRequest{RoutingKey: []byte("a"), List: true, AfterRevision: 3}, false},
		{&rpc.WatchRequest{RoutingKey: []byte("a"), List: true, AfterMove: 3}, false},
		{&rpc.WatchRequest{Table: rpc.WatchTable_WATCH_TABLE_RUNNERS}, true},
		{&rpc.WatchRequest{Table: rpc.WatchTable_WATCH_TABLE_BOTS, RoutingKey: []byte("alice")}, false},
		{&rpc.WatchRequest{Table: rpc.WatchTable_WATCH_TABLE_POOLS, KeyPrefix: []byte("x")}, false},
		{&rpc.WatchRequest{Table: rpc.WatchTable_WATCH_TABLE_AGENTS, RoutingKey: uid}, true},
		{&rpc.WatchRequest{Table: rpc.WatchTable_WATCH_TABLE_AGENTS, RoutingKey: []byte("short")}, false},
		{&rpc.WatchRequest{Table: 99, RoutingKey: []byte("a")}, false},
		{&rpc.WatchRequest{RoutingKey: []byte("a"), ProgressMs: 4000_000}, false},
	} {
		sel, err := ValidateWatch(tc.req)
		if (err == nil) != tc.ok {
			t.Errorf("%v: err %v, want ok %v", tc.req, err, tc.ok)
		}
		if err == nil && tc.req.GetTable() == rpc.WatchTable_WATCH_TABLE_KV {
			k := keys.KV(tc.req.GetRoutingKey(), append(bytes.Clone(tc.req.GetKeyPrefix()), 'z'))
			if !bytes.HasPrefix(k, sel.prefix) || string(sel.name(k)) != string(tc.req.GetKeyPrefix())+"z" {
				t.Errorf("%v: prefix %q name %q", tc.req, sel.prefix, sel.name(k))
			}
		}
	}
}

func FuzzValidateWatch(f *testing.F) {
	f.Add([]byte("alice"), int32(0), []byte("p/"), uint64(0), uint64(0), false, uint32(0))
	f.Add([]byte("pools"), int32(3), []byte(nil), uint64(5), uint64(0), true, uint32(10))
	f.Add(bytes.Repeat([]byte{1}, 32), int32(4), []byte(nil), uint64(0), uint64(2), false, uint32(0))
	f.Fuzz(func(t *testing.T, rk []byte, table int32, prefix []byte, after, move uint64, list bool, prog uint32) {
		req := &rpc.WatchRequest{RoutingKey: rk, Table: rpc.WatchTable(table), KeyPrefix: prefix,
			AfterRevision: after, AfterMove: move, List: list, ProgressMs: prog}
		sel, err := ValidateWatch(req)
		if err != nil {
			return
		}
		if len(sel.rk) == 0 || len(sel.prefix) == 0 || sel.prefix[0] == 0 {
			t.Fatalf("accepted %v: routing key %q prefix %q", req, sel.rk, sel.prefix)
		}
		if list && (after != 0 || move != 0) {
			t.Fatalf("accepted a listing with a start: %v", req)
		}
		_ = sel.name(sel.prefix) // never panics, even on a bare prefix
	})
}
