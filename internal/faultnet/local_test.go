package faultnet

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func TestLocalRules(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewLocal(1)
	wln := l.Listen(ln)
	defer wln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := wln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	var d net.Dialer
	dial := l.Dialer(d.DialContext)
	ctx := context.Background()

	c, err := dial(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv := <-accepted
	if _, err := c.Write([]byte("hi")); err != nil {
		t.Fatalf("write without faults: %v", err)
	}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(srv, buf); err != nil || string(buf) != "hi" {
		t.Fatalf("read %q %v", buf, err)
	}

	// Blocking the peer closes both wrapped ends and refuses new dials.
	l.Set(Faults{Block: []string{"127.0.0.1"}})
	if _, err := dial(ctx, "tcp", ln.Addr().String()); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("dial to a blocked peer: %v", err)
	}
	if _, err := c.Write([]byte("x")); err == nil {
		t.Fatal("write on a connection to a blocked peer succeeded")
	}
	if _, err := srv.Read(buf); err == nil {
		t.Fatal("accepted end of a blocked peer still open")
	}

	// Unblocked: dials work again; drop rate 1 kills the next write.
	l.Set(Faults{DropRate: 1})
	c, err = dial(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial after unblocking: %v", err)
	}
	<-accepted
	if _, err := c.Write([]byte("x")); !errors.Is(err, ErrDropped) {
		t.Fatalf("write with drop rate 1: %v", err)
	}

	l.Set(Faults{Delay: Duration(20 * time.Millisecond)})
	c, err = dial(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	<-accepted
	start := time.Now()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 20*time.Millisecond {
		t.Errorf("delayed write took %v, want at least 20ms", el)
	}
	st := l.Stats()
	if st.RefusedDials != 1 || st.Drops != 1 || st.DelayedWrites != 1 || st.FaultClosed < 2 {
		t.Errorf("stats %+v", st)
	}
	if f := l.Faults(); time.Duration(f.Delay) != 20*time.Millisecond || f.DropRate != 0 || len(f.Block) != 0 {
		t.Errorf("faults %+v", f)
	}
}

func TestParseFaults(t *testing.T) {
	f, err := ParseFaults([]byte(`{"delay":"50ms","drop_rate":0.01,"block":["172.29.71.13","::1"]}`))
	if err != nil || time.Duration(f.Delay) != 50*time.Millisecond || f.DropRate != 0.01 || len(f.Block) != 2 {
		t.Fatalf("%+v %v", f, err)
	}
	for _, bad := range []string{
		``, `{`, `[]`, `{"delay":50}`, `{"delay":"-1s"}`, `{"delay":"2m"}`, `{"drop_rate":1.5}`,
		`{"drop_rate":-0.1}`, `{"block":["n3"]}`, `{"extra":1}`, `{} {}`,
		`{"block":[` + strings.Repeat(`"1.2.3.4",`, 64) + `"1.2.3.4"]}`,
	} {
		if _, err := ParseFaults([]byte(bad)); err == nil {
			t.Errorf("ParseFaults(%q) accepted", bad)
		}
	}
}

func FuzzParseFaults(f *testing.F) {
	f.Add([]byte(`{"delay":"50ms","drop_rate":0.01,"block":["172.29.71.13"]}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"delay":"1h"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		fs, err := ParseFaults(body)
		if err != nil {
			return
		}
		if d := time.Duration(fs.Delay); d < 0 || d > maxFaultDelay || !(fs.DropRate >= 0 && fs.DropRate <= 1) || len(fs.Block) > maxFaultBlock {
			t.Fatalf("accepted out-of-range faults %+v", fs)
		}
		l := NewLocal(1)
		l.Set(fs)
		if got := l.Faults(); len(got.Block) != len(fs.Block) {
			t.Fatalf("Set/Faults lost blocks: %+v", got)
		}
	})
}
