package transport

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestCheckFrames(t *testing.T) {
	pairs := []groupTerm{{0, 1}, {7, 1 << 40}, {metaGroup, 3}}
	frame, err := appendCheckRequest(nil, "n2", pairs)
	if err != nil {
		t.Fatal(err)
	}
	body, err := readCheckFrame(bufio.NewReader(bytes.NewReader(frame)))
	if err != nil {
		t.Fatal(err)
	}
	id, got, err := parseCheckRequest(body)
	if err != nil || id != "n2" || !slices.Equal(got, pairs) {
		t.Fatalf("round trip: %q %v %v", id, got, err)
	}
	if a, err := parseCheckResponse([]byte{readCheckVersion, 1, 0, 1}, 3); err != nil || !slices.Equal(a, []bool{true, false, true}) {
		t.Fatalf("response: %v %v", a, err)
	}

	for name, b := range map[string][]byte{
		"empty":         {},
		"version":       {2, 2, 'n', '2', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
		"no id":         {readCheckVersion, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
		"short id":      {readCheckVersion, 5, 'n'},
		"no pairs":      {readCheckVersion, 2, 'n', '2'},
		"partial pair":  {readCheckVersion, 2, 'n', '2', 0, 0, 0, 1, 0},
		"trailing byte": append(body[:len(body):len(body)], 0),
	} {
		if _, _, err := parseCheckRequest(b); !errors.Is(err, errCheckFrame) {
			t.Errorf("request %s: err %v", name, err)
		}
	}
	for name, b := range map[string][]byte{
		"short":   {readCheckVersion, 1},
		"long":    {readCheckVersion, 1, 1, 1, 1},
		"version": {9, 1, 1, 1},
		"answer":  {readCheckVersion, 1, 2, 1},
	} {
		if _, err := parseCheckResponse(b, 3); !errors.Is(err, errCheckFrame) {
			t.Errorf("response %s: err %v", name, err)
		}
	}
	for _, n := range []uint32{0, maxCheckFrame + 1} {
		hdr := []byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
		if _, err := readCheckFrame(bufio.NewReader(bytes.NewReader(hdr))); !errors.Is(err, errCheckFrame) {
			t.Errorf("frame length %d: err %v", n, err)
		}
	}
	if _, err := appendCheckRequest(nil, "", pairs); err == nil {
		t.Error("empty id accepted")
	}
	if _, err := appendCheckRequest(nil, "n2", make([]groupTerm, maxChecksPerFrame+1)); err == nil {
		t.Error("oversized request accepted")
	}
}

// fakeTerms is a node's replicas as the checker reads them.
type fakeTerms struct {
	mu    sync.Mutex
	terms map[uint32]uint64 // group -> current term; absent: no replica
}

type fakeReplica struct {
	f     *fakeTerms
	group uint32
}

func (r fakeReplica) State() raft.RaftState { return raft.Follower }
func (r fakeReplica) CurrentTerm() uint64 {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	return r.f.terms[r.group]
}

func (f *fakeTerms) lookup(group uint32) TermReader {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.terms[group]; !ok {
		return nil
	}
	return fakeReplica{f, group}
}

func (f *fakeTerms) set(group uint32, term uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.terms[group] = term
}

// checkNode is one node of TestLeaderCheckerConfirm: a mux on loopback
// and a checker over fake replicas.
type checkNode struct {
	id      string
	mux     *Mux
	checker *LeaderChecker
	terms   *fakeTerms
}

func newCheckNodes(t *testing.T, ids ...string) []*checkNode {
	var nodes []*checkNode
	for _, id := range ids {
		m := newTestMux(t, MuxConfig{})
		f := &fakeTerms{terms: map[uint32]uint64{}}
		c := NewLeaderChecker(newTestLayer(t, m, readCheckGroup), id, f.lookup, testLogger(t))
		t.Cleanup(c.Close)
		nodes = append(nodes, &checkNode{id: id, mux: m, checker: c, terms: f})
	}
	return nodes
}

func voters(nodes ...*checkNode) raft.Configuration {
	var cfg raft.Configuration
	for _, n := range nodes {
		cfg.Servers = append(cfg.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(n.id), Address: raft.ServerAddress(n.mux.Addr().String())})
	}
	return cfg
}

func TestLeaderCheckerConfirm(t *testing.T) {
	nodes := newCheckNodes(t, "n1", "n2", "n3")
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	cfg := voters(n1, n2, n3)
	const g = 5
	for _, n := range nodes {
		n.terms.set(g, 7)
	}

	impostor := voters(n1, n2, n3)
	impostor.Servers[1].ID = "n9" // n2's address
	impostor.Servers[2].ID = "n8"
	withLearners := voters(n1, n2, n3)
	withLearners.Servers[1].Suffrage = raft.Nonvoter
	withLearners.Servers[2].Suffrage = raft.Nonvoter
	// n1 asks one peer of three voters, the next in ring order (n2); a
	// round not confirmed falls back to VerifyLeader in the replica.
	for _, c := range []struct {
		name   string
		n2, n3 uint64 // the peers' terms of group g
		asker  *checkNode
		group  uint32
		term   uint64
		cfg    raft.Configuration
		want   bool
	}{
		{"peers at the term", 7, 7, n1, g, 7, cfg, true},
		{"asked peer at an older term", 6, 9, n1, g, 7, cfg, true},
		{"asked peer past the term (deposed)", 8, 7, n1, g, 7, cfg, false},
		{"older leader's term, asked by n1", 7, 7, n1, g, 6, cfg, false},
		{"older leader's term, asked by n3", 7, 7, n3, g, 6, cfg, false},
		{"group the peers do not hold", 7, 7, n1, g + 1, 7, cfg, false},
		{"other nodes at the voters' addresses", 7, 7, n1, g, 7, impostor, false},
		{"single voter", 9, 9, n1, g, 7, voters(n1), true},
		{"sole voter with non-voters", 9, 9, n1, g, 7, withLearners, true},
		{"asker outside the configuration, both voters at the term", 7, 7, n1, g, 7, voters(n2, n3), true},
		{"asker outside the configuration, one voter past the term", 7, 9, n1, g, 7, voters(n2, n3), false},
	} {
		n2.terms.set(g, c.n2)
		n3.terms.set(g, c.n3)
		if got := c.asker.checker.Confirm(c.group, c.term, c.cfg); got != c.want {
			t.Errorf("%s: confirmed %v, want %v", c.name, got, c.want)
		}
	}
	n2.terms.set(g, 7)
	n3.terms.set(g, 7)

	// Many groups at once: every answer goes to its own group.
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		grp := uint32(100 + i)
		want := i%3 != 0
		term := uint64(10)
		if !want {
			term = 9 // the peers are at 10
		}
		for _, n := range nodes {
			n.terms.set(grp, 10)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := n1.checker.Confirm(grp, term, cfg); got != want {
				errs <- fmt.Errorf("group %d term %d: confirmed %v, want %v", grp, term, got, want)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// A peer that is down: rounds are not confirmed until the checker
	// asks the other peer first (checkPeerPenalty).
	n2.checker.Close()
	deadline := time.Now().Add(10 * time.Second)
	for !n1.checker.Confirm(g, 7, cfg) {
		if time.Now().After(deadline) {
			t.Fatal("n2 down: never confirmed by n3")
		}
	}
	if p := n1.checker.order(cfg.Servers[1:]); p[0].id != "n3" {
		t.Fatalf("n2 down: asks %s first", p[0].id)
	}
}

// FuzzParseCheckRequest: a leadership-check request frame either decodes
// into an id and 1..maxChecksPerFrame pairs that encode back to the same
// bytes, or is refused; never a panic.
func FuzzParseCheckRequest(f *testing.F) {
	good, _ := appendCheckRequest(nil, "n1", []groupTerm{{1, 2}, {metaGroup, 9}})
	f.Add(good[4:])
	f.Add([]byte{readCheckVersion, 1, 'x'})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		id, pairs, err := parseCheckRequest(b)
		if err != nil {
			return
		}
		again, err := appendCheckRequest(nil, id, pairs)
		if err != nil || !bytes.Equal(again[4:], b) {
			t.Fatalf("accepted %x: re-encodes to %x (%v)", b, again, err)
		}
	})
}

// FuzzParseCheckResponse: a response either answers exactly n pairs or is
// refused.
func FuzzParseCheckResponse(f *testing.F) {
	f.Add([]byte{readCheckVersion, 1, 0}, 2)
	f.Add([]byte{readCheckVersion}, 0)
	f.Add([]byte{}, 1)
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		if n < 0 || n > maxChecksPerFrame {
			return
		}
		a, err := parseCheckResponse(b, n)
		if err == nil && len(a) != n {
			t.Fatalf("%x for %d pairs: %d answers", b, n, len(a))
		}
	})
}
