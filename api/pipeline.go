package api

import (
	"context"
	"errors"
	"io"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/swarmkv/swarmkv/rpc"
)

// pipelineServer serves rpc.Pipeline (rpc/pipeline.proto): unary calls of
// the client-facing services sent as items of one stream. Each item runs
// on its own goroutine (from a pool of reused ones) through the method's generated handler and the
// node's unary interceptors, exactly as the unary call would; results go
// back in batches, in completion order.
type pipelineServer struct {
	rpc.UnimplementedPipelineServer
	methods   map[string]pipelineMethod
	intercept grpc.UnaryServerInterceptor
	// maxInFlight bounds the items of one stream running at once (the
	// node's streams-per-connection limit: one stream must not get more
	// than a connection could). The stream is not read further meanwhile,
	// so HTTP/2 flow control holds the client back.
	maxInFlight int
	stopping    chan struct{} // closed when the node shuts down
	stopOnce    sync.Once
	// counted, if set, is told each message's direction and item count
	// (metrics).
	counted func(direction string, items int)
	// workers runs the items, and the streams' receivers; close joins them.
	workers *workerPool
	// beforeLoop, if set (tests only), runs on each stream after its
	// receiver started and before the first call is taken.
	beforeLoop func()
}

// workerPool runs functions on goroutines that outlive one call: a worker
// that finished waits up to idle for the next function before it exits.
// A call then starts on a stack that earlier calls already grew (a Put
// needs about 16 KiB: the shard hash alone has a 4 KiB frame), where a
// goroutine per call starts at 8 KiB and grows, copying its stack, on
// every call; the profile of a 100-client put load showed 4-5 % of the
// node's CPU in that copying. There is no bound here: the callers bound
// what runs at once. close makes idle workers exit at once and waits for
// every goroutine the pool started.
//
// The most recently idle worker gets the next function (LIFO), so under a
// steady load the same few workers run and the rest time out. A FIFO
// hand-off (one unbuffered channel) gave every waiting worker a function
// in turn: after a burst of 1,000 clients, any later load of more than
// 1,000 calls a second kept all 1,000 workers and their grown stacks
// alive (17 MiB of stacks on a node, docs/performance-log.md, round 15).
type workerPool struct {
	idle time.Duration
	// mu guards waiting and closed, and orders wg.Add before close's
	// wg.Wait: no goroutine starts after closed is set.
	mu      sync.Mutex
	waiting []chan func() // idle workers' hand-offs, the most recent last
	closed  bool
	wg      sync.WaitGroup
	workers atomic.Int64 // goroutines started and not yet returned
}

func newWorkerPool(idle time.Duration) *workerPool {
	return &workerPool{idle: idle}
}

// submit runs f on the most recently idle worker, or on a new one when
// none waits; after close, on the caller's goroutine.
func (w *workerPool) submit(f func()) {
	w.mu.Lock()
	if n := len(w.waiting); n > 0 {
		ch := w.waiting[n-1]
		w.waiting = w.waiting[:n-1]
		w.mu.Unlock()
		ch <- f // buffered: the worker, taken off waiting, receives it
		return
	}
	w.mu.Unlock()
	if !w.start(func() { w.worker(f) }) {
		f()
	}
}

// start runs f on a new goroutine that close joins; false (f not run)
// after close.
func (w *workerPool) start(f func()) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	w.wg.Add(1)
	w.workers.Add(1)
	go func() {
		defer w.wg.Done()
		defer w.workers.Add(-1)
		f()
	}()
	return true
}

func (w *workerPool) worker(f func()) {
	ch := make(chan func(), 1)
	t := time.NewTimer(w.idle)
	defer t.Stop()
	for {
		f()
		w.mu.Lock()
		if w.closed {
			w.mu.Unlock()
			return
		}
		w.waiting = append(w.waiting, ch)
		w.mu.Unlock()
		t.Reset(w.idle)
		var ok bool
		select {
		case f, ok = <-ch:
		case <-t.C:
			w.mu.Lock()
			i := slices.Index(w.waiting, ch)
			if i >= 0 {
				w.waiting = slices.Delete(w.waiting, i, i+1)
			}
			w.mu.Unlock()
			if i >= 0 {
				return
			}
			f, ok = <-ch // a submit took this worker as the timer fired
		}
		if !ok {
			return // closed by close
		}
	}
}

// close stops the idle workers and waits for every goroutine of the pool.
// Idempotent.
func (w *workerPool) close() {
	w.mu.Lock()
	idle := w.waiting
	w.waiting, w.closed = nil, true
	w.mu.Unlock()
	for _, ch := range idle {
		close(ch)
	}
	w.wg.Wait()
}

type pipelineMethod struct {
	impl    any
	handler func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error)
}

// pipelineService is a service whose unary methods may be pipelined.
type pipelineService struct {
	desc *grpc.ServiceDesc
	impl any
}

const (
	// maxPipelineMethod bounds the method name echoed in an error.
	maxPipelineMethod = 128
	// maxResultBatchBytes: results are packed into one message up to about
	// this many response bytes (a single larger result goes alone).
	maxResultBatchBytes = 1 << 20
	maxResultBatch      = 512
)

func newPipelineServer(intercept grpc.UnaryServerInterceptor, maxInFlight int, services ...pipelineService) *pipelineServer {
	p := &pipelineServer{methods: map[string]pipelineMethod{}, intercept: intercept,
		maxInFlight: max(maxInFlight, 1), stopping: make(chan struct{}), workers: newWorkerPool(time.Second)}
	for _, s := range services {
		for _, m := range s.desc.Methods {
			p.methods["/"+s.desc.ServiceName+"/"+m.MethodName] = pipelineMethod{impl: s.impl, handler: m.Handler}
		}
	}
	return p
}

// stop makes every stream stop taking calls, finish the ones running, send
// their results and end with OK: the client knows that calls it sent
// without a result were not executed.
func (p *pipelineServer) stop() { p.stopOnce.Do(func() { close(p.stopping) }) }

func (p *pipelineServer) isStopping() bool {
	select {
	case <-p.stopping:
		return true
	default:
		return false
	}
}

// close waits for every goroutine the pipeline started: the items' workers
// and the streams' receivers. Call it after stop and after the gRPC server
// stopped (a receiver returns once its stream is gone). Idempotent.
func (p *pipelineServer) close() { p.workers.close() }

func (p *pipelineServer) count(direction string, items int) {
	if p.counted != nil {
		p.counted(direction, items)
	}
}

func (p *pipelineServer) Calls(stream rpc.Pipeline_CallsServer) error {
	if p.isStopping() {
		return nil // the node is stopping: no call was taken
	}
	ctx := stream.Context()
	batches := make(chan *rpc.PipelineCalls)
	recvErr := make(chan error, 1)
	receiving := p.workers.start(func() {
		for {
			in, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case batches <- in:
			case <-ctx.Done():
				return
			}
		}
	})
	if !receiving {
		return nil // the node is stopping: no call was taken
	}

	// Every item holds a slot until its result is queued, so out never
	// holds more than maxInFlight results and a finished item never waits.
	out := make(chan *rpc.PipelineResult, p.maxInFlight)
	slots := make(chan struct{}, p.maxInFlight)
	sent := make(chan error, 1)
	go func() { sent <- p.sendResults(stream, out) }()

	if p.beforeLoop != nil {
		p.beforeLoop()
	}
	var wg sync.WaitGroup
	var err error
loop:
	for {
		select {
		case in := <-batches:
			// A batch and the stop can both be ready (select picks either
			// at random): stop wins, and the batch is not executed, as the
			// client assumes of calls the ended stream did not answer.
			if p.isStopping() {
				break loop
			}
			p.count("calls", len(in.GetCalls()))
			for _, call := range in.GetCalls() {
				select {
				case slots <- struct{}{}:
				case <-ctx.Done():
					err = ctx.Err()
					break loop
				}
				wg.Add(1)
				p.workers.submit(func() {
					defer wg.Done()
					out <- p.run(ctx, call)
					<-slots
				})
			}
		case err = <-recvErr:
			break loop
		case <-p.stopping:
			break loop
		}
	}
	wg.Wait()
	close(out)
	serr := <-sent
	if err == nil || errors.Is(err, io.EOF) {
		return serr
	}
	return err
}

// sendResults sends the results from out, each message carrying every
// result that is ready, until out is closed. After a failed send it keeps
// draining out (the results are dropped: the stream is gone).
func (p *pipelineServer) sendResults(stream rpc.Pipeline_CallsServer, out <-chan *rpc.PipelineResult) error {
	var err error
	msg := &rpc.PipelineResults{}
	for r := range out {
		// Let the other calls finished by the same event (one Raft commit
		// answers many) queue their results before this message is cut.
		runtime.Gosched()
		msg.Results = append(msg.Results[:0], r)
		size := len(r.GetResponse())
	more:
		for len(msg.Results) < maxResultBatch && size < maxResultBatchBytes {
			select {
			case r, ok := <-out:
				if !ok {
					break more
				}
				msg.Results = append(msg.Results, r)
				size += len(r.GetResponse())
			default:
				break more
			}
		}
		if err == nil {
			p.count("results", len(msg.Results))
			err = stream.Send(msg)
		}
	}
	return err
}

// run executes one call and returns its result (never nil).
func (p *pipelineServer) run(ctx context.Context, call *rpc.PipelineCall) *rpc.PipelineResult {
	res := &rpc.PipelineResult{Id: call.GetId()}
	resp, err := p.call(ctx, call)
	if err == nil {
		var b []byte
		if b, err = proto.Marshal(resp.(proto.Message)); err == nil {
			res.Response = b
			return res
		}
		err = status.Errorf(codes.Internal, "swarmkv: encoding the response of %s: %v", call.GetMethod(), err)
	}
	st, ok := status.FromError(err)
	if !ok {
		st = status.FromContextError(err)
	}
	sp := st.Proto()
	res.Code, res.Message, res.Details = uint32(sp.GetCode()), sp.GetMessage(), sp.GetDetails()
	return res
}

// validatePipelineCall checks what the pipeline adds to a unary call: a
// method that may be pipelined and a timeout that is not negative.
func (p *pipelineServer) validatePipelineCall(call *rpc.PipelineCall) (pipelineMethod, error) {
	m, ok := p.methods[call.GetMethod()]
	if !ok {
		name := call.GetMethod()
		if len(name) > maxPipelineMethod {
			name = name[:maxPipelineMethod] + "..."
		}
		return m, status.Errorf(codes.Unimplemented, "swarmkv: method %q cannot be pipelined", name)
	}
	if call.GetTimeoutUs() < 0 {
		return m, status.Errorf(codes.InvalidArgument, "swarmkv: pipeline call timeout %dus is negative", call.GetTimeoutUs())
	}
	return m, nil
}

func (p *pipelineServer) call(ctx context.Context, call *rpc.PipelineCall) (any, error) {
	m, err := p.validatePipelineCall(call)
	if err != nil {
		return nil, err
	}
	if t := call.GetTimeoutUs(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(min(t, int64(time.Hour/time.Microsecond)))*time.Microsecond)
		defer cancel()
	}
	dec := func(v any) error {
		if err := proto.Unmarshal(call.GetRequest(), v.(proto.Message)); err != nil {
			return status.Errorf(codes.InvalidArgument, "swarmkv: decoding a %s request: %v", call.GetMethod(), err)
		}
		return nil
	}
	return m.handler(m.impl, ctx, dec, p.intercept)
}
