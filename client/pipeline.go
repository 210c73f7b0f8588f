package client

import (
	"context"
	"errors"
	"io"
	"runtime"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/swarmkv/swarmkv/rpc"
)

// pipe is a node's connection as the stores use it: a
// grpc.ClientConnInterface that sends unary calls as items of one
// rpc.Pipeline stream (rpc/pipeline.proto). A sender goroutine packs every
// call queued since its last send into one message, so a lone caller's
// call goes out at once and many concurrent callers share messages; a
// receiver goroutine hands each result to its caller. The node runs the
// items as the unary calls they stand for.
//
// Failure semantics match unary calls: a result carries the call's own
// status; a stream that breaks fails its unanswered calls with the
// stream's error (their outcome is unknown); a stream the node ends
// cleanly (shutting down) fails them with a retryable Unavailable, since the
// node answers every call it took before it ends the stream. A node
// without the Pipeline service gets unary calls from then on.
type pipe struct {
	cc     *grpc.ClientConn
	ctx    context.Context // ends when the pipe is closed
	cancel context.CancelFunc
	wake   chan struct{} // cap 1: the queue is not empty

	mu struct {
		sync.Mutex
		queue   []*pipeCall
		pending map[uint64]*pipeCall // sent, no result yet
		nextID  uint64
		stream  *pipeStream // nil: open one for the next batch
		unary   bool        // the node has no Pipeline service
		closed  bool
	}
}

type pipeStream struct {
	rpc.Pipeline_CallsClient
	cancel context.CancelFunc
}

type pipeCall struct {
	id        uint64
	method    string
	req       []byte
	deadline  time.Time // zero: none
	stream    *pipeStream
	abandoned bool // the caller gave up while the call was queued

	done   chan struct{} // closed when result or err is set
	result *rpc.PipelineResult
	err    error
	unary  bool // not sent: the node has no Pipeline service
}

const (
	// Calls with a larger request go as unary calls, and a message holds
	// at most maxPipeBytes of requests, well under the smallest request
	// size limit a node can be configured with.
	maxPipedRequest = 16 << 10
	maxPipeBytes    = 48 << 10
	maxPipeCalls    = 256
	// pipeCallOverhead approximates the framing of one call in a message.
	pipeCallOverhead = 48
	maxPipeRecv      = 256 << 20
)

func newPipe(cc *grpc.ClientConn) *pipe {
	p := &pipe{cc: cc, wake: make(chan struct{}, 1)}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.mu.pending = map[uint64]*pipeCall{}
	go p.sendLoop()
	return p
}

// close fails every call not answered yet and ends the stream. The
// grpc.ClientConn is closed by its owner.
func (p *pipe) close() {
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return
	}
	p.mu.closed = true
	err := grpcstatus.Error(codes.Canceled, "swarmkv: client closed")
	for _, c := range p.mu.queue {
		p.finish(c, nil, err)
	}
	p.mu.queue = nil
	for id, c := range p.mu.pending {
		delete(p.mu.pending, id)
		p.finish(c, nil, err)
	}
	p.mu.Unlock()
	p.cancel()
}

// finish completes c once (p.mu held).
func (p *pipe) finish(c *pipeCall, r *rpc.PipelineResult, err error) {
	select {
	case <-c.done:
	default:
		c.result, c.err = r, err
		close(c.done)
	}
}

// NewStream is not pipelined.
func (p *pipe) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return p.cc.NewStream(ctx, desc, method, opts...)
}

// Invoke sends a unary call through the pipeline (see pipe).
func (p *pipe) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	req, ok := args.(proto.Message)
	out, ok2 := reply.(proto.Message)
	if !pipeable(opts) || !ok || !ok2 {
		return p.cc.Invoke(ctx, method, args, reply, opts...)
	}
	b, err := proto.Marshal(req)
	if err != nil || len(b) > maxPipedRequest {
		return p.cc.Invoke(ctx, method, args, reply)
	}
	c := &pipeCall{method: method, req: b, done: make(chan struct{})}
	c.deadline, _ = ctx.Deadline()
	if err := p.enqueue(c); err != nil {
		if errors.Is(err, errPipeUnary) {
			return p.cc.Invoke(ctx, method, args, reply)
		}
		return err
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		select {
		case <-c.done: // answered meanwhile
		default:
			p.abandon(c)
			return grpcstatus.FromContextError(ctx.Err()).Err()
		}
	}
	switch {
	case c.unary:
		return p.cc.Invoke(ctx, method, args, reply)
	case c.err != nil:
		return c.err
	case c.result.GetCode() != uint32(codes.OK):
		return grpcstatus.ErrorProto(&status.Status{Code: int32(c.result.GetCode()), Message: c.result.GetMessage(), Details: c.result.GetDetails()})
	}
	if err := proto.Unmarshal(c.result.GetResponse(), out); err != nil {
		return grpcstatus.Errorf(codes.Internal, "swarmkv: decoding the response of %s: %v", method, err)
	}
	return nil
}

// pipeable: the call has no options other than the generated code's
// grpc.StaticMethod (options such as grpc.Header need a unary call).
func pipeable(opts []grpc.CallOption) bool {
	for _, o := range opts {
		if _, ok := o.(grpc.StaticMethodCallOption); !ok {
			return false
		}
	}
	return true
}

var errPipeUnary = errors.New("unary")

func (p *pipe) enqueue(c *pipeCall) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.mu.closed:
		return grpcstatus.Error(codes.Canceled, "swarmkv: client closed")
	case p.mu.unary:
		return errPipeUnary
	}
	p.mu.nextID++
	c.id = p.mu.nextID
	p.mu.queue = append(p.mu.queue, c)
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return nil
}

// abandon drops a call its caller no longer waits for. A call still queued
// is never sent; one already sent runs on, its result is dropped.
func (p *pipe) abandon(c *pipeCall) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.abandoned = true
	delete(p.mu.pending, c.id)
}

func (p *pipe) sendLoop() {
	for {
		select {
		case <-p.wake:
		case <-p.ctx.Done():
			return
		}
		// Let callers made runnable together (by one batch of results)
		// queue their next calls before this message is cut.
		runtime.Gosched()
		for p.sendQueued() {
		}
	}
}

// sendQueued sends one message of queued calls; false when none were queued.
func (p *pipe) sendQueued() bool {
	p.mu.Lock()
	n, size := 0, 0
	for n < len(p.mu.queue) && n < maxPipeCalls {
		size += len(p.mu.queue[n].req) + len(p.mu.queue[n].method) + pipeCallOverhead
		if n > 0 && size > maxPipeBytes {
			break
		}
		n++
	}
	batch := p.mu.queue[:n:n]
	p.mu.queue = p.mu.queue[n:]
	if len(p.mu.queue) == 0 {
		p.mu.queue = nil
	}
	s, unary := p.mu.stream, p.mu.unary
	p.mu.Unlock()
	if n == 0 {
		return false
	}
	if unary {
		p.failBatch(batch, nil, true)
		return true
	}
	if s == nil {
		var err error
		if s, err = p.open(); err != nil {
			p.failBatch(batch, err, false)
			return true
		}
	}
	msg := &rpc.PipelineCalls{Calls: make([]*rpc.PipelineCall, 0, len(batch))}
	now := time.Now()
	p.mu.Lock()
	for _, c := range batch {
		if c.abandoned {
			continue
		}
		var t int64
		if !c.deadline.IsZero() {
			if t = c.deadline.Sub(now).Microseconds(); t <= 0 {
				p.finish(c, nil, grpcstatus.Error(codes.DeadlineExceeded, context.DeadlineExceeded.Error()))
				continue
			}
		}
		c.stream = s
		p.mu.pending[c.id] = c
		msg.Calls = append(msg.Calls, &rpc.PipelineCall{Id: c.id, Method: c.method, Request: c.req, TimeoutUs: t})
	}
	p.mu.Unlock()
	if len(msg.Calls) > 0 {
		// On failure the stream has ended; its receiver fails the calls
		// with the stream's status.
		_ = s.Send(msg)
	}
	return true
}

// failBatch completes calls that were never sent.
func (p *pipe) failBatch(batch []*pipeCall, err error, unary bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range batch {
		c.unary = unary
		p.finish(c, nil, err)
	}
}

// open starts a stream and its receiver.
func (p *pipe) open() (*pipeStream, error) {
	ctx, cancel := context.WithCancel(p.ctx)
	cs, err := rpc.NewPipelineClient(p.cc).Calls(ctx, grpc.MaxCallRecvMsgSize(maxPipeRecv))
	if err != nil {
		cancel()
		return nil, err
	}
	s := &pipeStream{Pipeline_CallsClient: cs, cancel: cancel}
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		cancel()
		return nil, grpcstatus.Error(codes.Canceled, "swarmkv: client closed")
	}
	p.mu.stream = s
	p.mu.Unlock()
	go p.recvLoop(s)
	return s, nil
}

func (p *pipe) recvLoop(s *pipeStream) {
	for {
		msg, err := s.Recv()
		if err != nil {
			p.ended(s, err)
			return
		}
		p.mu.Lock()
		for _, r := range msg.GetResults() {
			if c := p.mu.pending[r.GetId()]; c != nil && c.stream == s {
				delete(p.mu.pending, r.GetId())
				p.finish(c, r, nil)
			}
		}
		p.mu.Unlock()
	}
}

// ended fails the calls a stream left unanswered.
func (p *pipe) ended(s *pipeStream, err error) {
	defer s.cancel()
	unary := grpcstatus.Code(err) == codes.Unimplemented
	if errors.Is(err, io.EOF) {
		// The node ended the stream after answering every call it took:
		// the rest were not executed.
		detail, _ := anypb.New(&rpc.RetryInfo{})
		err = grpcstatus.ErrorProto(&status.Status{Code: int32(codes.Unavailable),
			Message: "swarmkv: node closed the pipeline (shutting down)", Details: []*anypb.Any{detail}})
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.stream == s {
		p.mu.stream = nil
	}
	if unary {
		p.mu.unary = true
	}
	for id, c := range p.mu.pending {
		if c.stream == s {
			delete(p.mu.pending, id)
			c.unary = unary
			p.finish(c, nil, err)
		}
	}
}
