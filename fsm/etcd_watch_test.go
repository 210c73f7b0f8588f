package fsm

import (
	"errors"
	"fmt"
	"testing"

	"github.com/swarmkv/swarmkv/keys"
)

func (h *etcdHarness) history(from int64, maxBytes int) (*EtcdHistoryPage, error) {
	var p *EtcdHistoryPage
	err := h.f.Read(keys.EtcdRoutingKey("default"), func(v View) error {
		var err error
		p, err = v.EtcdHistory("default", from, maxBytes)
		return err
	})
	return p, err
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestEtcdHistory: the events of a namespace read back in revision order
// with their records and the records before; pages end at whole
// revisions; a compacted start is ErrEtcdCompacted with the compacted
// revision; a start past the current revision reads nothing.
func TestEtcdHistory(t *testing.T) {
	h := newEtcdHarness(t)
	h.put("a", "1") // 2
	h.put("a", "2") // 3
	// 4: a txn of two puts, one revision, two events in write order.
	if res := h.txn(EtcdTxn{Success: []EtcdOp{{Kind: EtcdPut, Key: []byte("b"), Value: []byte("x")}, {Kind: EtcdPut, Key: []byte("c"), Value: []byte("y")}}}); res.Err != nil {
		t.Fatal(res.Err)
	}
	h.del("a", "") // 5
	p, err := h.history(1, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var got string
	for _, e := range p.Events {
		prev := "-"
		if e.Prev != nil {
			prev = fmt.Sprintf("%s@%d", e.Prev.Value, e.Prev.ModRevision)
		}
		got += fmt.Sprintf("%v %s=%s m%d c%d v%d prev %s; ", e.Delete, e.KV.Key, e.KV.Value, e.KV.ModRevision, e.KV.CreateRevision, e.KV.Version, prev)
	}
	want := "false a=1 m2 c2 v1 prev -; false a=2 m3 c2 v2 prev 1@2; false b=x m4 c4 v1 prev -; false c=y m4 c4 v1 prev -; true a= m5 c0 v0 prev 2@3; "
	if got != want || p.Next != 6 || p.Current != 5 {
		t.Fatalf("history:\n got %s next %d cur %d\nwant %s", got, p.Next, p.Current, want)
	}
	// A page of 1 byte holds one whole revision: the txn's two events.
	if p, err := h.history(4, 1); err != nil || len(p.Events) != 2 || p.Next != 5 {
		t.Fatalf("one-byte page from 4: %+v %v", p, err)
	}
	if p, err := h.history(9, 1<<20); err != nil || len(p.Events) != 0 || p.Next != 9 || p.Current != 5 {
		t.Fatalf("future start: %+v %v", p, err)
	}
	if res := h.apply(&Command{Op: OpEtcdCompact, EtcdCompact: &EtcdCompact{NS: "default", Revision: 3}}); res.Err != nil {
		t.Fatal(res.Err)
	}
	if p, err := h.history(3, 1<<20); !errors.Is(err, ErrEtcdCompacted) || p.Compacted != 3 {
		t.Fatalf("from the compacted revision: %+v %v", p, err)
	}
	if p, err := h.history(4, 1<<20); err != nil || len(p.Events) != 3 {
		t.Fatalf("from after the compacted revision: %+v %v", p, err)
	}
}

// TestEtcdChangedWakes: the channel of a namespace is closed by a commit
// that wrote it, not by one that wrote another namespace or wrote nothing;
// Close closes every channel, then and later.
func TestEtcdChangedWakes(t *testing.T) {
	h := newEtcdHarness(t)
	c := h.f.EtcdChanged("default")
	other := h.f.EtcdChanged("other")
	if closed(c) {
		t.Fatal("closed before any write")
	}
	h.txn(EtcdTxn{NS: "other", Success: []EtcdOp{{Kind: EtcdPut, Key: []byte("k"), Value: []byte("v")}}})
	if closed(c) || !closed(other) {
		t.Fatal("a write of another namespace woke the wrong waiter")
	}
	// A txn that writes nothing takes no revision and wakes nobody.
	h.txn(EtcdTxn{Success: []EtcdOp{{Kind: EtcdDelete, Key: []byte("absent")}}})
	if closed(c) {
		t.Fatal("a delete of nothing woke the namespace's waiter")
	}
	h.put("a", "1")
	if !closed(c) {
		t.Fatal("a put did not wake the namespace's waiter")
	}
	c = h.f.EtcdChanged("default")
	if closed(c) {
		t.Fatal("a fresh channel is closed")
	}
	if err := h.f.Close(); err != nil {
		t.Fatal(err)
	}
	if !closed(c) || !closed(h.f.EtcdChanged("default")) {
		t.Fatal("Close left a waiter asleep")
	}
}
