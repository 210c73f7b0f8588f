package api

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// stubKV answers Put by key: "block" waits for "release"; "poor" fails
// with an InsufficientCredits detail; "hang" waits for its context; any
// other key succeeds. It records the transport method each call came in on
// (the Pipeline stream's, or the unary method's).
type stubKV struct {
	rpc.UnimplementedKVServer
	release chan struct{}
	once    sync.Once

	mu       sync.Mutex
	via      []string
	deadline time.Duration // time left when "hang" arrived
}

func (s *stubKV) Put(ctx context.Context, r *rpc.PutRequest) (*rpc.PutResponse, error) {
	m, _ := grpc.Method(ctx)
	s.mu.Lock()
	s.via = append(s.via, m)
	s.mu.Unlock()
	switch string(r.GetKey()) {
	case "block":
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	case "release":
		s.once.Do(func() { close(s.release) })
	case "poor":
		st, _ := status.New(codes.FailedPrecondition, "insufficient credits").WithDetails(&rpc.InsufficientCredits{Balance: 3, Required: 7})
		return nil, st.Err()
	case "hang":
		d, _ := ctx.Deadline()
		s.mu.Lock()
		s.deadline = time.Until(d)
		s.mu.Unlock()
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return &rpc.PutResponse{Index: 42}, nil
}

func (s *stubKV) vias() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.via...)
}

// stubCluster routes every slot to one shard led by the node at addr.
type stubCluster struct {
	rpc.UnimplementedClusterServer
	addr string
}

func (s *stubCluster) ClusterMap(context.Context, *rpc.ClusterMapRequest) (*rpc.ClusterMapResponse, error) {
	slots := make([]uint32, shard.NumSlots)
	return &rpc.ClusterMapResponse{MapVersion: 1, NumShards: 1, Slots: slots, NodeId: "n1",
		Shards: []*rpc.ShardInfo{{Id: 0, Replicas: []string{"n1"}, LeaderId: "n1"}},
		Nodes:  []*rpc.NodeInfo{{Id: "n1", GrpcAddr: s.addr}}}, nil
}

type pipeRig struct {
	kv   *stubKV
	pipe *pipelineServer // nil without the Pipeline service
	c    *client.Client
	// intercepted counts calls through the pipeline's interceptor, by method.
	mu          sync.Mutex
	intercepted map[string]int
}

func newPipeRig(t *testing.T, withPipeline bool) *pipeRig {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &pipeRig{kv: &stubKV{release: make(chan struct{})}, intercepted: map[string]int{}}
	s := grpc.NewServer()
	rpc.RegisterKVServer(s, r.kv)
	rpc.RegisterClusterServer(s, &stubCluster{addr: ln.Addr().String()})
	if withPipeline {
		count := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			r.mu.Lock()
			r.intercepted[info.FullMethod]++
			r.mu.Unlock()
			return h(ctx, req)
		}
		r.pipe = newPipelineServer(count, 16, pipelineService{&rpc.KV_ServiceDesc, r.kv})
		rpc.RegisterPipelineServer(s, r.pipe)
		t.Cleanup(r.pipe.close) // after s.Stop: joins the pipeline's goroutines
	}
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	r.c, err = client.New(context.Background(), client.Config{Endpoints: []string{ln.Addr().String()}, AttemptTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.c.Close() })
	return r
}

// Calls of one client travel on one stream and run concurrently: "block"
// returns only after "release", sent after it, has run.
func TestPipelineRunsCallsConcurrently(t *testing.T) {
	r := newPipeRig(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	blocked := make(chan error, 1)
	go func() { blocked <- r.c.Put(ctx, []byte("u"), []byte("block"), []byte("v")) }()
	for len(r.kv.vias()) == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := r.c.Put(ctx, []byte("u"), []byte("release"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	for _, m := range r.kv.vias() {
		if m != rpc.Pipeline_Calls_FullMethodName {
			t.Fatalf("call arrived on %s, want the pipeline", m)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.intercepted[rpc.KV_Put_FullMethodName] != 2 {
		t.Fatalf("interceptor saw %v, want 2 Puts", r.intercepted)
	}
}

// A pipelined call's error keeps its code and typed details, and the
// caller's deadline reaches the handler.
func TestPipelineErrorsAndDeadlines(t *testing.T) {
	r := newPipeRig(t, true)
	ctx := context.Background()
	var ic *client.InsufficientCreditsError
	if err := r.c.Put(ctx, []byte("u"), []byte("poor"), []byte("v")); !errors.As(err, &ic) || ic.Balance != 3 || ic.Required != 7 {
		t.Fatalf("poor: %v, want InsufficientCreditsError{3, 7}", err)
	}
	hctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := r.c.Put(hctx, []byte("u"), []byte("hang"), []byte("v"))
	if !errors.Is(err, client.ErrOutcomeUnknown) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hang: %v, want outcome unknown after the deadline", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("hang returned after %v", el)
	}
	r.kv.mu.Lock()
	left := r.kv.deadline
	r.kv.mu.Unlock()
	if left <= 0 || left > 300*time.Millisecond {
		t.Fatalf("handler's deadline was %v away, want the caller's (<= 300ms)", left)
	}
}

// A node without the Pipeline service gets unary calls.
func TestPipelineFallsBackToUnary(t *testing.T) {
	r := newPipeRig(t, false)
	for i := range 3 {
		if err := r.c.Put(context.Background(), []byte("u"), []byte("k"), []byte("v")); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	for _, m := range r.kv.vias() {
		if m != rpc.KV_Put_FullMethodName {
			t.Fatalf("call arrived on %s, want unary Put", m)
		}
	}
}

// When the node stops, a stream answers the calls it took before it ends;
// later calls are refused as not executed (retryable Unavailable).
func TestPipelineStopAnswersTakenCalls(t *testing.T) {
	r := newPipeRig(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	blocked := make(chan error, 1)
	go func() { blocked <- r.c.Put(ctx, []byte("u"), []byte("block"), []byte("v")) }()
	for len(r.kv.vias()) == 0 {
		time.Sleep(time.Millisecond)
	}
	r.pipe.stop()
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-blocked:
		t.Fatalf("the stream ended before its call was answered: %v", err)
	default:
	}
	close(r.kv.release)
	if err := <-blocked; err != nil {
		t.Fatalf("call taken before stop: %v", err)
	}
	// A call refused as not executed is retried until the deadline; one
	// whose outcome were unknown would fail at the first attempt.
	sctx, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer scancel()
	start := time.Now()
	err := r.c.Put(sctx, []byte("u"), []byte("k"), []byte("v"))
	if el := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || el < 250*time.Millisecond {
		t.Fatalf("put after stop: %v after %v, want retries (not executed) until the deadline", err, el)
	}
	if n := len(r.kv.vias()); n != 1 {
		t.Fatalf("%d calls reached the handler, want 1", n)
	}
}

// The pipeline's own checks: unknown methods, negative timeouts and
// undecodable requests are refused without reaching a handler.
func TestPipelineValidatesCalls(t *testing.T) {
	kv := &stubKV{release: make(chan struct{})}
	p := newPipelineServer(nil, 4, pipelineService{&rpc.KV_ServiceDesc, kv})
	put, _ := proto.Marshal(&rpc.PutRequest{Key: []byte("k")})
	for _, tc := range []struct {
		call *rpc.PipelineCall
		code codes.Code
	}{
		{&rpc.PipelineCall{Id: 1, Method: "/swarmkv.v1.Admin/Join", Request: put}, codes.Unimplemented},
		{&rpc.PipelineCall{Id: 2, Method: "/swarmkv.v1.Pipeline/Calls"}, codes.Unimplemented},
		{&rpc.PipelineCall{Id: 3, Method: strings.Repeat("x", 10000)}, codes.Unimplemented},
		{&rpc.PipelineCall{Id: 4, Method: rpc.KV_Put_FullMethodName, Request: put, TimeoutUs: -1}, codes.InvalidArgument},
		{&rpc.PipelineCall{Id: 5, Method: rpc.KV_Put_FullMethodName, Request: []byte{0xff, 0xff}}, codes.InvalidArgument},
		{&rpc.PipelineCall{Id: 6, Method: rpc.KV_Put_FullMethodName, Request: put, TimeoutUs: 1e6}, codes.OK},
	} {
		res := p.run(context.Background(), tc.call)
		if res.GetId() != tc.call.GetId() || codes.Code(res.GetCode()) != tc.code {
			t.Errorf("call %d: id %d code %v (%s), want %v", tc.call.GetId(), res.GetId(), codes.Code(res.GetCode()), res.GetMessage(), tc.code)
		}
		if len(res.GetMessage()) > 2*maxPipelineMethod+100 {
			t.Errorf("call %d: message of %d bytes", tc.call.GetId(), len(res.GetMessage()))
		}
	}
	if n := len(kv.vias()); n != 1 {
		t.Fatalf("%d calls reached the handler, want 1", n)
	}
}

// FuzzPipelineCall: any call either reaches its handler with a request
// that decoded, or is refused with InvalidArgument or Unimplemented; the
// result always carries the call's id; never a panic.
func FuzzPipelineCall(f *testing.F) {
	put, _ := proto.Marshal(&rpc.PutRequest{RoutingKey: []byte("u"), Key: []byte("k"), Value: []byte("v")})
	f.Add(uint64(1), rpc.KV_Put_FullMethodName, put, int64(0))
	f.Add(uint64(2), rpc.KV_Get_FullMethodName, []byte{}, int64(1000))
	f.Add(uint64(3), "/swarmkv.v1.KV/Nope", []byte{1, 2}, int64(-5))
	f.Add(uint64(4), "", []byte{0x0a, 0xff}, int64(1<<62))
	kv := &stubKV{release: make(chan struct{})}
	p := newPipelineServer(nil, 4, pipelineService{&rpc.KV_ServiceDesc, kv})
	f.Fuzz(func(t *testing.T, id uint64, method string, req []byte, timeout int64) {
		if strings.Contains(string(req), "hang") || strings.Contains(string(req), "block") {
			return // stub keys that wait
		}
		res := p.run(context.Background(), &rpc.PipelineCall{Id: id, Method: method, Request: req, TimeoutUs: timeout})
		if res.GetId() != id {
			t.Fatalf("result id %d, want %d", res.GetId(), id)
		}
		switch code := codes.Code(res.GetCode()); code {
		case codes.OK, codes.InvalidArgument, codes.Unimplemented, codes.FailedPrecondition:
		default:
			t.Fatalf("code %v: %s", code, res.GetMessage())
		}
	})
}

// fakeCallsStream is a Pipeline.Calls stream with no network: Recv hands
// out the batches queued in in (telling took), then io.EOF once in is
// closed.
type fakeCallsStream struct {
	grpc.ServerStream
	ctx  context.Context
	in   chan *rpc.PipelineCalls
	took chan struct{}
	mu   sync.Mutex
	out  []*rpc.PipelineResults
}

func newFakeCallsStream(ctx context.Context, calls ...*rpc.PipelineCall) *fakeCallsStream {
	s := &fakeCallsStream{ctx: ctx, in: make(chan *rpc.PipelineCalls, 1), took: make(chan struct{}, 1)}
	s.in <- &rpc.PipelineCalls{Calls: calls}
	close(s.in)
	return s
}

func (f *fakeCallsStream) Context() context.Context { return f.ctx }
func (f *fakeCallsStream) Recv() (*rpc.PipelineCalls, error) {
	select {
	case c, ok := <-f.in:
		if !ok {
			return nil, io.EOF
		}
		f.took <- struct{}{}
		return c, nil
	case <-f.ctx.Done():
		return nil, f.ctx.Err()
	}
}
func (f *fakeCallsStream) Send(r *rpc.PipelineResults) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.out = append(f.out, r)
	return nil
}

func (f *fakeCallsStream) answered() (n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.out {
		n += len(r.GetResults())
	}
	return n
}

// A pipeline told to stop executes no call it receives afterwards: the
// client takes a call the ended stream did not answer as not executed and
// sends it again, so an executed one would run twice. Two cases: a stream
// opened after the stop, and a batch that arrives together with the stop
// on a running stream (Go's select picks among ready cases at random: such
// a batch was executed about every other time, which made
// TestPipelineStopAnswersTakenCalls fail once in 30 runs).
func TestPipelineStoppedTakesNoCall(t *testing.T) {
	put, _ := proto.Marshal(&rpc.PutRequest{Key: []byte("k")})
	call := &rpc.PipelineCall{Id: 1, Method: rpc.KV_Put_FullMethodName, Request: put}
	for _, tc := range []struct {
		name string
		// stopFirst: stop before the stream opens; otherwise stop once its
		// receiver holds the batch, then let the receiver offer it.
		stopFirst bool
	}{{"opened after stop", true}, {"batch with stop", false}} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range 30 {
				kv := &stubKV{release: make(chan struct{})}
				p := newPipelineServer(nil, 4, pipelineService{&rpc.KV_ServiceDesc, kv})
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				s := newFakeCallsStream(ctx, call)
				if tc.stopFirst {
					p.stop()
					p.beforeLoop = func() { t.Error("a stream opened after stop reached its loop") }
				} else {
					p.beforeLoop = func() {
						<-s.took
						p.stop()
						time.Sleep(5 * time.Millisecond) // the receiver now offers the batch
					}
				}
				err := p.Calls(s)
				cancel()
				p.close()
				if err != nil {
					t.Fatalf("run %d: Calls = %v, want nil (ended cleanly)", i, err)
				}
				if n, a := len(kv.vias()), s.answered(); n != 0 || a != 0 {
					t.Fatalf("run %d: %d calls executed, %d answered after stop, want none", i, n, a)
				}
			}
		})
	}
}
