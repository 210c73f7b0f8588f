package api

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestWatchMemoryBudget: one identity holds at most a quarter of the
// node's watch memory and the node at most all of it; a reservation over
// the share waits (and gives up with its context) until bytes come back;
// one larger than the share goes alone; released bytes serve the waiter.
func TestWatchMemoryBudget(t *testing.T) {
	m := newWatchMemory(16 << 20) // 4 MiB per identity
	ctx := context.Background()
	held := func(who string, n int64) func() {
		t.Helper()
		rel, err := m.reserve(ctx, who, n)
		if err != nil {
			t.Fatalf("reserve %s %d: %v", who, n, err)
		}
		return rel
	}
	blocked := func(who string, n int64) bool {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		rel, err := m.reserve(c, who, n)
		if err == nil {
			rel()
			return false
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("reserve %s %d: %v", who, n, err)
		}
		return true
	}
	a1 := held("alice", 3<<20)
	if !blocked("alice", 2<<20) {
		t.Fatal("alice reserved past her quarter")
	}
	if blocked("bob", 2<<20) {
		t.Fatal("bob waits for alice's share")
	}
	a2 := held("alice", 1<<20) // exactly her quarter
	a1()
	if !blocked("alice", 64<<20) {
		t.Fatal("a message larger than a share went beside others of its identity")
	}
	a2()
	big := held("alice", 64<<20) // larger than a share: alone, clamped
	if !blocked("alice", 1) {
		t.Fatal("alice reserved beside a share-sized message")
	}
	big()
	// The node: four identities fill it, a fifth waits.
	var rels []func()
	for _, who := range []string{"a", "b", "c", "d"} {
		rels = append(rels, held(who, 4<<20))
	}
	if !blocked("e", 1) {
		t.Fatal("a fifth identity reserved past the node's budget")
	}
	done := make(chan error, 1)
	go func() {
		rel, err := m.reserve(ctx, "e", 1<<20)
		if err == nil {
			rel()
		}
		done <- err
	}()
	rels[0]()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiter was not served when bytes came back")
	}
	for _, r := range rels[1:] {
		r()
		r() // idempotent
	}
	if len(m.idents) != 0 {
		t.Fatalf("identities left after every release: %d", len(m.idents))
	}
}
