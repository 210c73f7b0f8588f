package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/shard"
)

func viewPut(rk, k, v string) Mutation {
	return Mutation{Kind: MutPut, Key: keys.KV([]byte(rk), []byte(k)), Value: []byte(v)}
}

// TestViewSeesOneState: writes applied while a Read's fn runs (from
// another goroutine, as raft applies) are not seen by its View, for point
// reads and scans alike; the next Read sees them.
func TestViewSeesOneState(t *testing.T) {
	r := newReplica(t, 1, nil)
	rk := "user-1"
	r.must(batchCmd(nil, viewPut(rk, "a", "1"), viewPut(rk, "b", "1")))
	prefix := keys.KVPrefix([]byte(rk), nil)
	err := r.f.Read([]byte(rk), func(v View) error {
		if got, err := v.Get(keys.KV([]byte(rk), []byte("a"))); err != nil || string(got) != "1" {
			return fmt.Errorf("a before the write: %q, %v", got, err)
		}
		done := make(chan struct{})
		go func() { // the applier's goroutine
			defer close(done)
			r.must(batchCmd(nil, viewPut(rk, "a", "2"), viewPut(rk, "b", "2"), viewPut(rk, "c", "2")))
		}()
		<-done
		if got, err := v.Get(keys.KV([]byte(rk), []byte("b"))); err != nil || string(got) != "1" {
			return fmt.Errorf("b after the write: %q, %v, want the view's 1", got, err)
		}
		if got, err := v.Get(keys.KV([]byte(rk), []byte("c"))); !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("c after the write: %q, %v, want ErrNotFound", got, err)
		}
		kvs, more, err := v.ScanPage(prefix, keys.PrefixEnd(prefix), 0, 0)
		if err != nil || more || len(kvs) != 2 || string(kvs[0].Value) != "1" || string(kvs[1].Value) != "1" {
			return fmt.Errorf("scan after the write: %d items %v (more %v), want a=1 b=1", len(kvs), err, more)
		}
		if n, err := v.Count(prefix, keys.PrefixEnd(prefix)); err != nil || n != 2 {
			return fmt.Errorf("count after the write: %d, %v, want 2", n, err)
		}
		if rev, err := v.ScanReverse(prefix, keys.PrefixEnd(prefix), 0, 0); err != nil || len(rev) != 2 || !bytes.Equal(rev[0].Key, kvs[1].Key) {
			return fmt.Errorf("reverse scan after the write: %d items, %v", len(rev), err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.f.Read([]byte(rk), func(v View) error {
		n, err := v.Count(prefix, keys.PrefixEnd(prefix))
		if err == nil && n != 3 {
			err = fmt.Errorf("next view counts %d keys, want 3", n)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.f.ReadKey([]byte(rk), []byte{metaPrefix, 'a'}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ReadKey of a meta key: %v, want ErrNotFound", err)
	}
}

// TestReadFences: a read of a slot the shard does not own is refused
// before fn runs; a freeze of the slot applied while fn runs turns its
// answer into the moved error; a shard-addressed read (nil routing key)
// is not fenced, and its View leaves the frozen slot's keys out.
func TestReadFences(t *testing.T) {
	rk := []byte("user-1")
	slot := shard.SlotOf(rk)
	r := newReplica(t, 1, nil)
	r.must(batchCmd(nil, viewPut(string(rk), "a", "1")))

	called := false
	err := r.f.Read(rk, func(v View) error {
		called = true
		r.must(freezeCmd(7, shard.SlotSetOf(slot), 2, 5)) // as raft would, meanwhile
		_, err := v.Get(keys.KV(rk, []byte("a")))
		return err
	})
	if me := movedErr(t, err); me.Target != 2 || me.MapVersion != 5 || !called {
		t.Fatalf("read frozen during fn: %+v (fn called %v)", me, called)
	}
	if _, err := r.f.ReadKey(rk, keys.KV(rk, []byte("a"))); movedErr(t, err) == nil {
		t.Fatal("ReadKey of a frozen slot answered")
	}
	called = false
	err = r.f.Read(rk, func(View) error { called = true; return nil })
	if movedErr(t, err); called {
		t.Fatal("fn ran for a slot not owned")
	}
	err = r.f.Read(nil, func(v View) error {
		kvs, err := v.Scan(keys.TablePrefix(keys.TableKV), nil, 0)
		if err != nil || len(kvs) != 1 {
			return fmt.Errorf("shard-addressed scan: %d keys, %v", len(kvs), err)
		}
		if ok, err := v.OwnsKey(kvs[0].Key, kvs[0].Value); ok || err != nil {
			return fmt.Errorf("OwnsKey of a frozen key: %v, %v", ok, err)
		}
		if err := v.CheckRoutingKey(rk); err == nil {
			return errors.New("CheckRoutingKey of a frozen slot passed")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkGet compares a point read of a routed key: the handlers' old
// path (check the slot, Get, check again), Read with View.Get (one Pebble
// iterator), the same over a Pebble snapshot, and ReadKey (the DB
// directly, fenced the same way). The shard
// owns half the slots, so the checks do their work.
func BenchmarkGet(b *testing.B) {
	rk := []byte("user-1")
	var half shard.SlotSet
	for s := 0; s < shard.NumSlots; s += 2 {
		half.Add(shard.Slot(s))
	}
	half.Add(shard.SlotOf(rk))
	r := newReplica(b, 1, &half)
	r.must(batchCmd(nil, viewPut(string(rk), "a", "some value of 32 bytes, or so.")))
	key := keys.KV(rk, []byte("a"))
	b.Run("fence", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := r.f.CheckRoutingKey(rk); err != nil {
				b.Fatal(err)
			}
			if _, err := r.f.Get(key); err != nil {
				b.Fatal(err)
			}
			if err := r.f.CheckRoutingKey(rk); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Read", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var v []byte
			if err := r.f.Read(rk, func(view View) (err error) {
				v, err = view.Get(key)
				return err
			}); err != nil || v == nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("snapshot", func(b *testing.B) { // what View is not: a Pebble snapshot per read
		b.ReportAllocs()
		for b.Loop() {
			if err := r.f.CheckRoutingKey(rk); err != nil {
				b.Fatal(err)
			}
			snap := r.f.db.NewSnapshot()
			if _, found, err := readerGetter(snap)(key); err != nil || !found {
				b.Fatal(err)
			}
			if err := snap.Close(); err != nil {
				b.Fatal(err)
			}
			if err := r.f.CheckRoutingKey(rk); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ReadKey", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.f.ReadKey(rk, key); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestReadRedisFenced: ReadRedis answers a read of owned keys, refuses a
// key of a frozen slot with the move's *MovedError (for a multi-key
// command too, whichever key it is), and a listing leaves the frozen
// slot's keys out. (The check after the read is CheckRoutingKey, as in
// Read: TestReadFences lands a freeze during a read.)
func TestReadRedisFenced(t *testing.T) {
	h := newRedisHarness(t)
	h.do("SET", "kept", "1")
	h.do("SET", "moving", "2")
	if v, err := h.f.ReadRedis(argv("GET", "moving")); err != nil || string(v.Append(nil, 2)) != "$1\r\n2\r\n" {
		t.Fatalf("GET before the freeze: %q, %v", v.Append(nil, 2), err)
	}
	slot := shard.SlotOf(keys.RedisRoutingKey([]byte("moving")))
	if shard.SlotOf(keys.RedisRoutingKey([]byte("kept"))) == slot {
		t.Fatal("the two keys share a slot")
	}
	if res := h.apply(freezeCmd(9, shard.SlotSetOf(slot), 3, 4)); res.Err != nil {
		t.Fatal(res.Err)
	}
	for _, cmd := range []RedisArgv{argv("GET", "moving"), argv("MGET", "kept", "moving"), argv("EXISTS", "moving", "kept", "kept")} {
		_, err := h.f.ReadRedis(cmd)
		if me := movedErr(t, err); me.Target != 3 || me.MapVersion != 4 {
			t.Fatalf("%q: %+v", cmd, me)
		}
	}
	if v, err := h.f.ReadRedis(argv("GET", "kept")); err != nil || string(v.Append(nil, 2)) != "$1\r\n1\r\n" {
		t.Fatalf("GET of an owned key: %q, %v", v.Append(nil, 2), err)
	}
	if v, err := h.f.ReadRedis(argv("KEYS", "*")); err != nil || string(v.Append(nil, 2)) != "*1\r\n$4\r\nkept\r\n" {
		t.Fatalf("KEYS: %q, %v", v.Append(nil, 2), err)
	}
}
