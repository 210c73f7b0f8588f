package fsm

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// TestScanPage: a page ends at its item limit or before its key and value
// bytes would pass maxBytes, always holds at least one item, and more
// says whether keys follow; continuing after the last key yields exactly
// the rest.
func TestScanPage(t *testing.T) {
	f := mustOpen(t, testConfig(1, t.TempDir()), nil)
	big := strings.Repeat("v", 3000)
	var muts []Mutation
	for i := range 5 {
		muts = append(muts, put(fmt.Sprintf("k%d", i), big))
	}
	muts = append(muts, put("k5", strings.Repeat("w", 10000)), put("k6", "s"), put("k7", "s"))
	res := f.ApplyBatch([]*raft.Log{cmdLog(1, mustEncode(t, batchCmd(nil, muts...)))})
	if r := res[0].(*Result); r.Err != nil {
		t.Fatal(r.Err)
	}

	type page struct {
		keys []string
		more bool
	}
	read := func(limit, maxBytes int) []page {
		var out []page
		start := []byte("k")
		for range 20 {
			kvs, more, err := f.ScanPage(start, []byte("l"), limit, maxBytes)
			if err != nil {
				t.Fatal(err)
			}
			var p page
			size := 0
			for _, kv := range kvs {
				p.keys = append(p.keys, string(kv.Key))
				size += len(kv.Key) + len(kv.Value)
			}
			if len(kvs) > 1 && maxBytes > 0 && size > maxBytes {
				t.Errorf("page %v holds %d bytes, over %d", p.keys, size, maxBytes)
			}
			p.more = more
			out = append(out, p)
			if !more {
				return out
			}
			start = append(bytes.Clone(kvs[len(kvs)-1].Key), 0)
		}
		t.Fatal("scan does not end")
		return nil
	}
	got := fmt.Sprint(read(3, 0))
	if want := "[{[k0 k1 k2] true} {[k3 k4 k5] true} {[k6 k7] false}]"; got != want {
		t.Errorf("limit 3: pages %s, want %s", got, want)
	}
	// 7000 bytes: two 3000-byte values per page; the 10000-byte value
	// alone on its page (over the bound, but a page holds one item).
	got = fmt.Sprint(read(100, 7000))
	if want := "[{[k0 k1] true} {[k2 k3] true} {[k4] true} {[k5] true} {[k6 k7] false}]"; got != want {
		t.Errorf("7000 bytes: pages %s, want %s", got, want)
	}
	if kvs, more, err := f.ScanPage([]byte("x"), []byte("y"), 3, 100); err != nil || len(kvs) != 0 || more {
		t.Errorf("empty range: %d items, more %v, err %v", len(kvs), more, err)
	}
}

// TestRedisKeysBoundedDBSize: KEYS answers at most ReplyLimits.MaxKeys
// keys and MaxBytes bytes, else the error that points to SCAN;
// swarmkv.dbsize counts every key; a SCAN page ends at MaxBytes.
func TestRedisKeysBoundedDBSize(t *testing.T) {
	cfg := testConfig(1, t.TempDir())
	cfg.Reply = ReplyLimits{MaxKeys: 5, MaxBytes: 3000}
	h := &redisHarness{t: t, f: mustOpen(t, cfg, nil)}
	for i := range 6 {
		h.expect("+OK\r\n", "set", "k"+strconv.Itoa(i), "v")
	}
	h.expect(":6\r\n", "swarmkv.dbsize")
	h.expect("-ERR KEYS result exceeds 5 keys; use SCAN\r\n", "keys", "*")
	h.expect("-ERR KEYS result exceeds 5 keys; use SCAN\r\n", "keys", "k*")
	if v := h.doValue("keys", "k[0-4]"); len(v.Elems) != 5 {
		t.Errorf("KEYS k[0-4]: %d keys, want 5", len(v.Elems))
	}
	// Four keys of 1000 bytes: over 4000 bytes of reply.
	for _, c := range "abcd" {
		h.expect("+OK\r\n", "set", string(c)+strings.Repeat("x", 999), "v")
	}
	h.expect(":10\r\n", "swarmkv.dbsize")
	h.expect("-ERR KEYS result exceeds 3000 bytes; use SCAN\r\n", "keys", "[abcd]*")
	// SCAN with a COUNT that would take every key stops once its page
	// holds 3000 bytes: the four long keys need two pages.
	pages, total := 0, 0
	for cursor := "0"; ; {
		v := h.doValue("swarmkv.scan", cursor, "MATCH", "[abcd]*", "COUNT", "1000")
		pages++
		total += len(v.Elems[1].Elems)
		if cursor = v.Elems[0].String(); cursor == "0" || pages > 10 {
			break
		}
	}
	if pages != 2 || total != 4 {
		t.Errorf("SCAN of the long keys: %d pages, %d keys; want 2 pages, 4 keys", pages, total)
	}
}
