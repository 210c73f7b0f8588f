package transport

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// noticeGroup as the node uses it (cluster.NoticeGroup).
const noticeGroup uint32 = 0xFFFFFFFD

func TestNoticeFrames(t *testing.T) {
	for _, n := range []Notice{
		{Kind: NoticeQuiet, Group: 7, Term: 3, Index: 1 << 40, From: "n1"},
		{Kind: NoticeWake, Group: metaGroup, Term: 1<<64 - 1, From: string(bytes.Repeat([]byte{'x'}, 255))},
	} {
		frame, err := appendNoticeRequest(nil, "n2", n)
		if err != nil {
			t.Fatal(err)
		}
		body, err := readNoticeFrame(bufio.NewReader(bytes.NewReader(frame)), maxNoticeFrame)
		if err != nil {
			t.Fatal(err)
		}
		to, got, err := parseNoticeRequest(body)
		if err != nil || to != "n2" || got != n {
			t.Fatalf("request round trip: %q %+v %v, want %+v", to, got, err, n)
		}
	}
	for _, r := range []NoticeReply{{}, {Done: true, LastIndex: 42}, {LastIndex: 1<<64 - 1}} {
		frame := appendNoticeResponse(nil, r)
		body, err := readNoticeFrame(bufio.NewReader(bytes.NewReader(frame)), noticeResponseLen)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := parseNoticeResponse(body); err != nil || got != r {
			t.Fatalf("response round trip: %+v %v, want %+v", got, err, r)
		}
	}

	good, _ := appendNoticeRequest(nil, "n2", Notice{Kind: NoticeWake, Group: 1, From: "n1"})
	body := good[4:]
	for name, b := range map[string][]byte{
		"empty":         {},
		"version 1":     append([]byte{readCheckVersion}, body[1:]...),
		"kind":          append([]byte{noticeVersion, 9}, body[2:]...),
		"no to":         {noticeVersion, byte(NoticeWake), 0},
		"short to":      {noticeVersion, byte(NoticeWake), 5, 'n'},
		"no from":       {noticeVersion, byte(NoticeWake), 2, 'n', '2', 0},
		"short fields":  body[:len(body)-1],
		"trailing byte": append(body[:len(body):len(body)], 0),
	} {
		if _, _, err := parseNoticeRequest(b); !errors.Is(err, errNoticeFrame) {
			t.Errorf("request %s: err %v", name, err)
		}
	}
	for name, b := range map[string][]byte{
		"short":   {noticeVersion, 1},
		"long":    append(appendNoticeResponse(nil, NoticeReply{})[4:], 0),
		"version": {readCheckVersion, 1, 0, 0, 0, 0, 0, 0, 0, 0},
		"status":  {noticeVersion, 2, 0, 0, 0, 0, 0, 0, 0, 0},
	} {
		if _, err := parseNoticeResponse(b); !errors.Is(err, errNoticeFrame) {
			t.Errorf("response %s: err %v", name, err)
		}
	}
	for _, n := range []uint32{0, maxNoticeFrame + 1} {
		hdr := []byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
		if _, err := readNoticeFrame(bufio.NewReader(bytes.NewReader(hdr)), maxNoticeFrame); !errors.Is(err, errNoticeFrame) {
			t.Errorf("frame length %d: err %v", n, err)
		}
	}
	for _, bad := range []struct {
		to string
		n  Notice
	}{
		{"", Notice{Kind: NoticeWake, From: "n1"}},
		{"n2", Notice{Kind: NoticeWake}},
		{"n2", Notice{Kind: 0, From: "n1"}},
		{string(bytes.Repeat([]byte{'x'}, 256)), Notice{Kind: NoticeWake, From: "n1"}},
	} {
		if _, err := appendNoticeRequest(nil, bad.to, bad.n); err == nil {
			t.Errorf("request to %q %+v accepted", bad.to, bad.n)
		}
	}
}

// noticeNode is a mux on loopback with a noticer that records what it is
// told and answers with its fields.
type noticeNode struct {
	id  string
	mux *Mux
	n   *Noticer

	mu   sync.Mutex
	got  []Notice
	last uint64
}

func newNoticeNode(t *testing.T, id string) *noticeNode {
	nn := &noticeNode{id: id, mux: newTestMux(t, MuxConfig{})}
	nn.n = NewNoticer(newTestLayer(t, nn.mux, noticeGroup), id, func(n Notice) NoticeReply {
		nn.mu.Lock()
		defer nn.mu.Unlock()
		nn.got = append(nn.got, n)
		return NoticeReply{Done: n.Group != 13, LastIndex: nn.last}
	}, testLogger(t))
	t.Cleanup(nn.n.Close)
	return nn
}

func (nn *noticeNode) server() raft.Server {
	return raft.Server{ID: raft.ServerID(nn.id), Address: raft.ServerAddress(nn.mux.Addr().String())}
}

func TestNoticerExchange(t *testing.T) {
	a, b := newNoticeNode(t, "n1"), newNoticeNode(t, "n2")
	b.last = 99
	ctx := ctxT(t, 10*time.Second)
	want := Notice{Kind: NoticeQuiet, Group: 5, Term: 2, Index: 99, From: "n1"}
	for i := 0; i < 3; i++ { // the connection is reused
		r, err := a.n.Notify(ctx, b.server(), want)
		if err != nil || !r.Done || r.LastIndex != 99 {
			t.Fatalf("notify: %+v %v", r, err)
		}
	}
	if r, err := a.n.Notify(ctx, b.server(), Notice{Kind: NoticeWake, Group: 13, From: "n1"}); err != nil || r.Done {
		t.Fatalf("refused notice: %+v %v", r, err)
	}
	// Addressed to another node at b's address: refused without asking b.
	other := b.server()
	other.ID = "n9"
	if r, err := a.n.Notify(ctx, other, want); err != nil || r.Done {
		t.Fatalf("notice for n9 at n2's address: %+v %v", r, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.got) != 4 || b.got[0] != want {
		t.Fatalf("n2 was told %+v", b.got)
	}
}

// TestNotifyVersion1Peer: a peer that does not know notice frames (a node
// of an earlier version: no notice Layer on its Mux, or a peer that takes
// the stream and never answers) is reported as not quiet-capable, within
// noticeTimeout, and at once for noticeIncapableFor after that.
func TestNotifyVersion1Peer(t *testing.T) {
	a := newNoticeNode(t, "n1")
	ctx := ctxT(t, 10*time.Second)
	n := Notice{Kind: NoticeQuiet, Group: 1, Term: 1, From: "n1"}

	t.Run("no notice layer", func(t *testing.T) {
		v1 := newTestMux(t, MuxConfig{})
		to := raft.Server{ID: "v1a", Address: raft.ServerAddress(v1.Addr().String())}
		if _, err := a.n.Notify(ctx, to, n); !errors.Is(err, ErrNotQuietCapable) {
			t.Fatalf("err %v, want ErrNotQuietCapable", err)
		}
	})

	t.Run("never answers", func(t *testing.T) {
		v1 := newTestMux(t, MuxConfig{})
		l := newTestLayer(t, v1, noticeGroup)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // reads and discards, never writes
			defer wg.Done()
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, c)
		}()
		t.Cleanup(func() { l.Close(); wg.Wait() })
		to := raft.Server{ID: "v1b", Address: raft.ServerAddress(v1.Addr().String())}
		start := time.Now()
		_, err := a.n.Notify(ctx, to, n)
		if took := time.Since(start); !errors.Is(err, ErrNotQuietCapable) || took < noticeTimeout/2 || took > 3*noticeTimeout {
			t.Fatalf("err %v after %v, want ErrNotQuietCapable after about %v", err, took, noticeTimeout)
		}
		start = time.Now()
		if _, err := a.n.Notify(ctx, to, n); !errors.Is(err, ErrNotQuietCapable) || time.Since(start) > noticeTimeout/4 {
			t.Fatalf("again: err %v after %v, want ErrNotQuietCapable at once", err, time.Since(start))
		}
	})
}

// FuzzParseNoticeRequest: a notice request either decodes into a
// notice that encodes back to the same bytes, or is refused.
func FuzzParseNoticeRequest(f *testing.F) {
	good, _ := appendNoticeRequest(nil, "n2", Notice{Kind: NoticeQuiet, Group: 3, Term: 4, Index: 5, From: "n1"})
	f.Add(good[4:])
	f.Add([]byte{noticeVersion, byte(NoticeWake), 1, 'x'})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		to, n, err := parseNoticeRequest(b)
		if err != nil {
			return
		}
		again, err := appendNoticeRequest(nil, to, n)
		if err != nil || !bytes.Equal(again[4:], b) {
			t.Fatalf("accepted %x: re-encodes to %x (%v)", b, again, err)
		}
	})
}

// FuzzParseNoticeResponse: a response either decodes into a reply that
// encodes back to the same bytes, or is refused.
func FuzzParseNoticeResponse(f *testing.F) {
	f.Add(appendNoticeResponse(nil, NoticeReply{Done: true, LastIndex: 7})[4:])
	f.Add([]byte{noticeVersion, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseNoticeResponse(b)
		if err != nil {
			return
		}
		if again := appendNoticeResponse(nil, r); !bytes.Equal(again[4:], b) {
			t.Fatalf("accepted %x: re-encodes to %x", b, again)
		}
	})
}

// TestNoticerMembersOnly: the notice stream passes the Raft port's node
// check like every group's (MuxConfig.AllowPeer behind the cluster-secret
// preface): a node the acceptor does not allow never reaches its handler,
// and a wrong secret neither.
func TestNoticerMembersOnly(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	var mu sync.Mutex
	var told []string
	newNode := func(id string, secret []byte, allow func(string) error) (*Mux, *Noticer) {
		m := newTestMux(t, MuxConfig{Secret: secret, LocalID: id, AllowPeer: allow})
		n := NewNoticer(newTestLayer(t, m, noticeGroup), id, func(n Notice) NoticeReply {
			mu.Lock()
			defer mu.Unlock()
			told = append(told, n.From)
			return NoticeReply{Done: true}
		}, testLogger(t))
		t.Cleanup(n.Close)
		return m, n
	}
	members := func(id string) error {
		if id == "n1" || id == "n2" {
			return nil
		}
		return fmt.Errorf("node %q is not a member", id)
	}
	m2, _ := newNode("n2", secret, members)
	_, n1 := newNode("n1", secret, members)
	_, n4 := newNode("n4", secret, members)                          // removed
	_, n5 := newNode("n1", []byte(strings.Repeat("x", 32)), members) // claims n1 without the secret
	to := raft.Server{ID: "n2", Address: raft.ServerAddress(m2.Addr().String())}
	ctx := ctxT(t, 10*time.Second)
	if r, err := n1.Notify(ctx, to, Notice{Kind: NoticeWake, Group: 1, From: "n1"}); err != nil || !r.Done {
		t.Fatalf("member: %+v %v", r, err)
	}
	for name, n := range map[string]*Noticer{"removed node": n4, "wrong secret": n5} {
		if r, err := n.Notify(ctx, to, Notice{Kind: NoticeWake, Group: 1, From: "n4"}); err == nil {
			t.Errorf("%s: answered %+v", name, r)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(told) != 1 || told[0] != "n1" {
		t.Fatalf("n2's handler was told by %v, want n1 only", told)
	}
}
