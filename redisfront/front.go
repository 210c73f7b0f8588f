package redisfront

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/swarmkv/swarmkv/api"
	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/internal/retry"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/resp"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// The RESP front (seed 002): every node with Config.RedisAddr serves the
// Redis protocol (RESP2, and RESP3 after HELLO 3; commands read by
// resp.Reader within bounds: conn.go). A command's keys route by
// keys.RedisRoutingKey; all keys of one command, and of one MULTI/EXEC
// block with its WATCHed keys, must be in one shard, else the reply is
// Redis Cluster's CROSSSLOT error.
// The front runs the command on the shard leader: on this node when it
// leads the shard (api.RedisLocal, api/redis.go), otherwise through the
// leader's internal Redis gRPC service (api/redis_service.go), following
// NotLeader hints with the routing client. KEYS and SCAN fan out over
// every shard.
//
// Threads: the accept loop (serve) and one goroutine per connection, which
// runs the connection's commands in order, one at a time (conn.go), all
// joined by Close, which closes the listener and every connection.

// redisVersion is the Redis version the front reports (HELLO, INFO): the
// command semantics and error texts follow Redis 7.2.
const redisVersion = "7.2.4"

// Front is a node's RESP front: a listener and its connections.
type Front struct {
	n      Node
	cfg    cluster.Config // the node's, read once at Start
	log    *slog.Logger
	peer   *tls.Config // the node's own identity for forwarded calls; nil without TLS
	ln     net.Listener
	ctx    context.Context
	cancel context.CancelFunc
	served chan struct{} // closed when the serve loop returned
	conns  sync.WaitGroup
	ids    atomic.Int64
	attack attackLog

	mu struct {
		sync.Mutex
		open   map[net.Conn]struct{} // open connections, closed by Close
		closed bool
	}

	cl struct {
		sync.Mutex
		c *client.Client // routes to other nodes; made on first use
	}
}

// redisConn is one client connection's state.
type redisConn struct {
	id    int64
	proto int
	name  string

	multi   bool
	dirty   bool // a command failed to queue: EXEC aborts
	queued  []fsm.RedisArgv
	qbytes  int // resp.CommandSize of the queued commands
	txShard shard.ID
	txSet   bool // txShard is set (by a queued command or a WATCH)

	watches []fsm.RedisWatch

	auth redisAuth // auth.go
}

func (c *redisConn) resetTx() {
	c.multi, c.dirty, c.queued, c.qbytes = false, false, nil, 0
	c.unwatch()
}

func (c *redisConn) unwatch() {
	c.watches = nil
	c.txSet = false
}

// Start binds addr and serves RESP for node n until Close.
func Start(n Node, addr string) (*Front, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("redisfront: listen %s: %w", addr, err)
	}
	f := &Front{n: n, cfg: n.Config(), log: n.Logger(), peer: n.PeerTLS(), served: make(chan struct{})}
	// Limits (cluster/limits.go): connections per IP, a deadline on each
	// write (under TLS), an idle timeout on reads and bounds on each
	// command (conn.go).
	ln = writeTimeoutListener{Listener: n.LimitConns(ln, "redis"), timeout: f.cfg.RedisWriteTimeout}
	if tc := n.ServerTLS(); tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	f.ln = ln
	f.mu.open = map[net.Conn]struct{}{}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	go f.serve()
	return f, nil
}

// Addr is the bound address.
func (f *Front) Addr() string { return f.ln.Addr().String() }

// Close stops accepting, cancels running commands, closes every
// connection and waits for their goroutines. Call it once.
func (f *Front) Close() {
	f.cancel()
	_ = f.ln.Close()
	<-f.served
	f.mu.Lock()
	f.mu.closed = true
	for nc := range f.mu.open {
		_ = nc.Close()
	}
	f.mu.Unlock()
	f.conns.Wait()
	f.cl.Lock()
	if f.cl.c != nil {
		_ = f.cl.c.Close()
	}
	f.cl.Unlock()
}

// handle runs one command (argv not empty) and returns its reply; quit
// asks to close the connection after it.
func (f *Front) handle(st *redisConn, argv [][]byte) (v resp.Value, quit bool) {
	if v, answered := f.authGate(st, argv); answered {
		return v, false
	}
	ctx, cancel := context.WithTimeout(f.forwardCreds(f.ctx, st), f.cfg.RequestTimeout)
	defer cancel()
	return f.dispatch(ctx, st, argv)
}

func errReply(s string) resp.Value { return resp.Error(s) }

// dispatch runs one command of a connection and returns its reply; quit
// asks to close the connection after the reply.
func (f *Front) dispatch(ctx context.Context, st *redisConn, argv [][]byte) (v resp.Value, quit bool) {
	name := strings.ToLower(string(argv[0]))
	arity := func(n int) bool { // Redis's arity convention
		return (n > 0 && len(argv) == n) || (n < 0 && len(argv) >= -n)
	}
	switch name {
	case "quit":
		return resp.OK, true
	case "multi":
		switch {
		case !arity(1):
			return resp.WrongArgs(name), false
		case st.multi:
			return errReply("ERR MULTI calls can not be nested"), false
		}
		st.multi = true
		return resp.OK, false
	case "exec":
		if !arity(1) {
			return resp.WrongArgs(name), false
		}
		if !st.multi {
			return errReply("ERR EXEC without MULTI"), false
		}
		return f.exec(ctx, st), false
	case "discard":
		if !arity(1) {
			return resp.WrongArgs(name), false
		}
		if !st.multi {
			return errReply("ERR DISCARD without MULTI"), false
		}
		st.resetTx()
		return resp.OK, false
	case "watch":
		if !arity(-2) {
			return resp.WrongArgs(name), false
		}
		if st.multi {
			return errReply("ERR WATCH inside MULTI is not allowed"), false
		}
		return f.watch(ctx, st, argv[1:]), false
	case "unwatch":
		if !arity(1) {
			return resp.WrongArgs(name), false
		}
		if !st.multi {
			st.unwatch()
		}
		return resp.OK, false
	}
	if h, ok := redisConnCmds[name]; ok {
		if st.multi && name != "ping" && name != "echo" {
			st.dirty = true
			return errReply("ERR swarmkv: " + strings.ToUpper(name) + " inside MULTI is not supported"), false
		}
		if !arity(h.arity) {
			if st.multi {
				st.dirty = true
			}
			return resp.WrongArgs(name), false
		}
		if !st.multi {
			return h.run(f, ctx, st, argv), false
		}
	}
	return f.command(ctx, st, argv), false
}

// command runs or queues a state machine command.
func (f *Front) command(ctx context.Context, st *redisConn, argv [][]byte) resp.Value {
	c := fsm.LookupRedis(argv[0])
	if c == nil || c.Internal {
		st.dirty = st.dirty || st.multi
		return resp.UnknownCommand(argv)
	}
	if v := fsm.CheckRedis(argv, f.cfg.Limits.MaxValueSize); v != nil {
		st.dirty = st.dirty || st.multi
		return *v
	}
	id, has, errv := f.shardOfKeys(fsm.RedisKeys(argv))
	if errv != nil {
		st.dirty = st.dirty || st.multi
		return *errv
	}
	if st.multi {
		if has {
			if st.txSet && st.txShard != id {
				st.dirty = true
				return errReply(resp.ErrCrossSlot)
			}
			st.txShard, st.txSet = id, true
		}
		return f.queue(st, argv)
	}
	if !has { // PING and ECHO are answered by the connection commands
		return errReply("ERR swarmkv: command without keys")
	}
	return f.run(ctx, &api.RedisRequest{Shard: id, Cmds: []fsm.RedisArgv{argv}})
}

// queue adds argv to st's MULTI block within the block's bounds
// (Config.RedisMaxMultiCommands, RedisMaxMultiBytes). Over one the block
// is dropped at once (its memory freed) and EXEC aborts; so does a block
// that already failed, which keeps nothing more.
func (f *Front) queue(st *redisConn, argv [][]byte) resp.Value {
	if st.dirty {
		return resp.Queued // EXEC aborts: nothing to keep
	}
	size := resp.CommandSize(argv)
	var msg string
	switch cfg := &f.cfg; {
	case len(st.queued) >= cfg.RedisMaxMultiCommands:
		msg = fmt.Sprintf("ERR swarmkv: transaction too long (more than %d commands)", cfg.RedisMaxMultiCommands)
	case st.qbytes+size > cfg.RedisMaxMultiBytes:
		msg = fmt.Sprintf("ERR swarmkv: transaction too big (more than %d bytes)", cfg.RedisMaxMultiBytes)
	}
	if msg != "" {
		st.dirty, st.queued, st.qbytes = true, nil, 0
		return errReply(msg)
	}
	cp := make(fsm.RedisArgv, len(argv))
	for i, a := range argv {
		cp[i] = bytes.Clone(a)
	}
	st.queued = append(st.queued, cp)
	st.qbytes += size
	return resp.Queued
}

// shardOfKeys returns the one shard of ks (has false when ks is empty),
// or the CROSSSLOT error reply.
func (f *Front) shardOfKeys(ks [][]byte) (id shard.ID, has bool, errv *resp.Value) {
	smap := f.n.ShardMap()
	if len(ks) == 0 {
		return 0, false, nil
	}
	if smap == nil {
		v := errReply("CLUSTERDOWN swarmkv: cluster not bootstrapped yet")
		return 0, false, &v
	}
	for i, k := range ks {
		s := smap.ShardOf(keys.RedisRoutingKey(k))
		if i > 0 && s != id {
			v := errReply(resp.ErrCrossSlot)
			return 0, false, &v
		}
		id = s
	}
	return id, true, nil
}

// watch records the current version of each key; EXEC sends them as
// guards.
func (f *Front) watch(ctx context.Context, st *redisConn, ks [][]byte) resp.Value {
	for _, k := range ks {
		if len(k) > keys.MaxRedisKeyLen {
			return errReply(fmt.Sprintf("ERR key of %d bytes over swarmkv's limit of %d", len(k), keys.MaxRedisKeyLen))
		}
	}
	id, _, errv := f.shardOfKeys(ks)
	if errv != nil {
		return *errv
	}
	if st.txSet && st.txShard != id {
		return errReply(resp.ErrCrossSlot)
	}
	if len(st.watches)+len(ks) > fsm.MaxRedisWatches {
		return errReply("ERR swarmkv: too many watched keys")
	}
	argv := append(fsm.RedisArgv{[]byte("swarmkv.versions")}, ks...)
	v := f.run(ctx, &api.RedisRequest{Shard: id, Cmds: []fsm.RedisArgv{argv}})
	if v.IsError() {
		return v
	}
	if len(v.Elems) != len(ks) {
		return errReply("ERR swarmkv: bad versions reply")
	}
	for i, k := range ks {
		st.watches = append(st.watches, fsm.RedisWatch{Key: bytes.Clone(k), Version: uint64(v.Elems[i].Int)})
	}
	st.txShard, st.txSet = id, true
	return resp.OK
}

// exec runs the queued block: one Raft command on the block's shard.
func (f *Front) exec(ctx context.Context, st *redisConn) resp.Value {
	defer st.resetTx()
	if st.dirty {
		return errReply(resp.ErrExecAbort)
	}
	if !st.txSet { // only PING and ECHO, nothing watched: nothing to replicate
		out := make([]resp.Value, len(st.queued))
		for i, argv := range st.queued {
			out[i] = resp.Simple("PONG")
			if len(argv) == 2 {
				out[i] = resp.BulkBytes(argv[1])
			}
		}
		return resp.Array(out...)
	}
	return f.run(ctx, &api.RedisRequest{Shard: st.txShard, Cmds: st.queued, Multi: true, Watches: st.watches})
}

// run executes a request on its shard's leader: locally when this node
// leads the shard, else through the routing client. Cluster failures
// become error replies: TRYAGAIN / CLUSTERDOWN when nothing was done
// (clients retry those), ERR when a write's outcome is unknown.
//
// A request refused because a slot of its keys moved (nothing executed, a
// MULTI/EXEC block refused whole before any write) is sent again to the
// slot's new owner once the node's map names it (follow); the Go client
// does the same for a forwarded request. The Redis client sees no error
// unless the map does not catch up before the command's timeout.
func (f *Front) run(ctx context.Context, req *api.RedisRequest) resp.Value {
	var v resp.Value
	var err error
	for {
		v, err = api.RedisLocal(ctx, f.n, req)
		var me *fsm.MovedError
		if !errors.As(err, &me) {
			break
		}
		if errv := f.follow(ctx, req, me); errv != nil {
			return *errv
		}
	}
	switch {
	case err == nil:
		return v
	case errors.Is(err, fsm.ErrInvalidCommand):
		return errReply("ERR " + err.Error())
	case !errors.Is(err, cluster.ErrNotLeader) && !errors.Is(err, cluster.ErrLeaderNotReady):
		return clusterErrReply(err)
	}
	// Not the leader here, or lost leadership before proposing: route
	// like any other node.
	c, err := f.client(ctx)
	if err != nil {
		return errReply("CLUSTERDOWN swarmkv: " + oneLine(err))
	}
	p := &rpc.RedisExecRequest{Shard: uint32(req.Shard), Cmds: make([]*rpc.RedisArgv, len(req.Cmds)), Multi: req.Multi}
	for i, a := range req.Cmds {
		p.Cmds[i] = &rpc.RedisArgv{Args: a}
	}
	for _, w := range req.Watches {
		p.Watches = append(p.Watches, &rpc.RedisWatch{Key: w.Key, Version: w.Version})
	}
	if req.Slots != nil {
		p.Slots, _ = req.Slots.MarshalBinary()
	}
	idempotent := !req.Multi && !fsm.LookupRedis(req.Cmds[0][0]).Write
	v, err = c.RedisExecRequest(ctx, p, idempotent)
	if err != nil {
		return clusterErrReply(err)
	}
	return v
}

// follow re-addresses req, refused as moved (me), to the shard that owns
// its keys under the node's map once that map reaches me.MapVersion (the
// node follows the meta group's map within about half a second), and
// returns nil to send it again: at once when the shard changed, after a
// pause when the map still names req's shard (a move not yet published,
// or one the refusing shard knows nothing of). It returns the error reply
// when ctx ends first (TRYAGAIN: clients retry it), or CROSSSLOT when the
// move split the request's keys over two shards.
func (f *Front) follow(ctx context.Context, req *api.RedisRequest, me *fsm.MovedError) *resp.Value {
	b := followBackoff.Backoff()
	for {
		if smap := f.n.ShardMap(); smap != nil && smap.Version >= me.MapVersion {
			id, _, ok := api.RedisShardOf(smap, req.Keys())
			if !ok {
				v := errReply(resp.ErrCrossSlot)
				return &v
			}
			if id != req.Shard {
				req.Shard = id
				return nil
			}
			if b.Wait(ctx) {
				return nil
			}
		} else if b.Wait(ctx) {
			continue
		}
		v := clusterErrReply(fmt.Errorf("%w: the node's shard map did not name the new owner in time: %w", me, ctx.Err()))
		return &v
	}
}

// followBackoff draws follow's pauses.
var followBackoff = retry.Options{Initial: 10 * time.Millisecond, Max: 200 * time.Millisecond}

// client returns the routing client, connecting on first use.
func (f *Front) client(ctx context.Context) (*client.Client, error) {
	f.cl.Lock()
	defer f.cl.Unlock()
	if f.cl.c != nil {
		return f.cl.c, nil
	}
	cfg := client.Config{Endpoints: []string{f.n.Addrs().GRPCAddr}, Logger: f.log}
	if f.peer != nil {
		cfg.TLS = f.peer // the node's own identity: full access
	}
	c, err := client.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	f.cl.c = c
	return c, nil
}

// clusterErrReply maps a cluster or client error to an error reply.
func clusterErrReply(err error) resp.Value {
	msg := oneLine(err)
	var nl *client.NotLeaderError
	var cm *client.MovedError
	var fm *fsm.MovedError
	switch {
	case errors.Is(err, cluster.ErrOutcomeUnknown), errors.Is(err, client.ErrOutcomeUnknown):
		return errReply("ERR swarmkv: outcome unknown (leadership changed): " + msg)
	case errors.Is(err, cluster.ErrNotLeader), errors.Is(err, cluster.ErrLeaderNotReady), errors.Is(err, client.ErrUnavailable),
		errors.As(err, &nl), errors.As(err, &cm), errors.As(err, &fm),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, cluster.ErrNotBootstrapped):
		return errReply("TRYAGAIN swarmkv: " + msg)
	case errors.Is(err, cluster.ErrClosed), errors.Is(err, context.Canceled), errors.Is(err, client.ErrClosed):
		return errReply("ERR swarmkv: shutting down")
	}
	return errReply("ERR swarmkv: " + msg)
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }

// ---- connection and server commands, answered by the front ----

type redisConnCmd struct {
	arity int
	run   func(f *Front, ctx context.Context, st *redisConn, argv [][]byte) resp.Value
}

var redisConnCmds map[string]redisConnCmd

func init() {
	redisConnCmds = map[string]redisConnCmd{
		"ping": {-1, cmdPing},
		"echo": {2, func(_ *Front, _ context.Context, _ *redisConn, a [][]byte) resp.Value {
			return resp.BulkBytes(a[1])
		}},
		"hello":   {-1, cmdHello},
		"select":  {2, cmdSelect},
		"client":  {-2, cmdClient},
		"command": {-1, cmdCommand},
		"info":    {-1, cmdInfo},
		"config":  {-2, cmdConfig},
		"keys":    {2, cmdKeys},
		"scan":    {-2, cmdScan},
		"dbsize":  {1, cmdDBSize},
	}
}

func cmdPing(_ *Front, _ context.Context, _ *redisConn, a [][]byte) resp.Value {
	switch len(a) {
	case 1:
		return resp.Simple("PONG")
	case 2:
		return resp.BulkBytes(a[1])
	}
	return resp.WrongArgs("ping")
}

func cmdHello(f *Front, _ context.Context, st *redisConn, a [][]byte) resp.Value {
	proto := st.proto
	if len(a) > 1 {
		n, err := strconv.ParseInt(string(a[1]), 10, 64)
		if err != nil {
			return errReply("ERR Protocol version is not an integer or out of range")
		}
		if n < 2 || n > 3 {
			return errReply("NOPROTO unsupported protocol version")
		}
		proto = int(n)
		for i := 2; i < len(a); i++ {
			switch opt := strings.ToLower(string(a[i])); {
			case opt == "auth" && i+2 < len(a):
				i += 2 // no users or passwords: the default user accepts any
			case opt == "setname" && i+1 < len(a):
				if !validClientName(a[i+1]) {
					return errReply("ERR Client names cannot contain spaces, newlines or special characters.")
				}
				st.name = string(a[i+1])
				i++
			default:
				return errReply("ERR Syntax error in HELLO option '" + string(a[i]) + "'")
			}
		}
	}
	st.proto = proto
	return resp.Map(
		resp.Bulk("server"), resp.Bulk("redis"),
		resp.Bulk("version"), resp.Bulk(redisVersion),
		resp.Bulk("proto"), resp.Int(int64(proto)),
		resp.Bulk("id"), resp.Int(st.id),
		resp.Bulk("mode"), resp.Bulk("standalone"),
		resp.Bulk("role"), resp.Bulk("master"),
		resp.Bulk("modules"), resp.Array(),
	)
}

func validClientName(b []byte) bool {
	for _, c := range b {
		if c < '!' || c > '~' {
			return false
		}
	}
	return true
}

func cmdSelect(_ *Front, _ context.Context, _ *redisConn, a [][]byte) resp.Value {
	n, err := strconv.ParseInt(string(a[1]), 10, 64)
	if err != nil {
		return errReply(resp.ErrNotInteger)
	}
	if n != 0 {
		return errReply("ERR DB index is out of range")
	}
	return resp.OK
}

func cmdClient(_ *Front, _ context.Context, st *redisConn, a [][]byte) resp.Value {
	sub := strings.ToLower(string(a[1]))
	switch {
	case sub == "setname" && len(a) == 3:
		if !validClientName(a[2]) {
			return errReply("ERR Client names cannot contain spaces, newlines or special characters.")
		}
		st.name = string(a[2])
		return resp.OK
	case sub == "getname" && len(a) == 2:
		if st.name == "" {
			return resp.Null
		}
		return resp.Bulk(st.name)
	case sub == "id" && len(a) == 2:
		return resp.Int(st.id)
	case sub == "setinfo" && len(a) == 4:
		switch strings.ToLower(string(a[2])) {
		case "lib-name", "lib-ver":
			return resp.OK
		}
		return errReply("ERR Unrecognized option '" + string(a[2]) + "'")
	case sub == "info" && len(a) == 2:
		return resp.Bulk(fmt.Sprintf("id=%d name=%s db=0 resp=%d\n", st.id, st.name, st.proto))
	case sub == "setname" || sub == "getname" || sub == "id" || sub == "setinfo" || sub == "info":
		return resp.WrongArgs("client|" + sub)
	}
	return errReply("ERR unknown subcommand '" + string(a[1]) + "'. Try CLIENT HELP.")
}

// cmdCommand answers enough of COMMAND for clients to start: COMMAND and
// COMMAND DOCS with nothing, COMMAND COUNT, COMMAND INFO with nulls.
func cmdCommand(_ *Front, _ context.Context, _ *redisConn, a [][]byte) resp.Value {
	if len(a) == 1 {
		return resp.Array()
	}
	switch strings.ToLower(string(a[1])) {
	case "count":
		return resp.Int(int64(len(redisConnCmds) + 40))
	case "docs":
		return resp.Map()
	case "info":
		out := make([]resp.Value, len(a)-2)
		for i := range out {
			out[i] = resp.NullArray
		}
		return resp.Array(out...)
	}
	return errReply("ERR unknown subcommand '" + string(a[1]) + "'. Try COMMAND HELP.")
}

func cmdInfo(f *Front, _ context.Context, _ *redisConn, _ [][]byte) resp.Value {
	_, port, _ := net.SplitHostPort(f.Addr())
	var b strings.Builder
	b.WriteString("# Server\r\n")
	fmt.Fprintf(&b, "redis_version:%s\r\nredis_mode:standalone\r\nserver_name:swarmkv\r\n", redisVersion)
	fmt.Fprintf(&b, "swarmkv_node:%s\r\nos:%s\r\narch_bits:64\r\nprocess_id:%d\r\ntcp_port:%s\r\n", f.cfg.ID, runtime.GOOS, os.Getpid(), port)
	b.WriteString("\r\n# Replication\r\nrole:master\r\n")
	return resp.Bulk(b.String())
}

// cmdConfig answers CONFIG GET for the few parameters tools read
// (redis-benchmark reads save and appendonly).
func cmdConfig(_ *Front, _ context.Context, _ *redisConn, a [][]byte) resp.Value {
	if strings.ToLower(string(a[1])) != "get" {
		return errReply("ERR swarmkv: CONFIG " + strings.ToUpper(string(a[1])) + " is not supported")
	}
	if len(a) < 3 {
		return resp.WrongArgs("config|get")
	}
	params := [][2]string{{"appendonly", "no"}, {"databases", "1"}, {"save", ""}}
	var out []resp.Value
	for _, p := range params {
		for _, pat := range a[2:] {
			if resp.Match(bytes.ToLower(pat), []byte(p[0])) {
				out = append(out, resp.Bulk(p[0]), resp.Bulk(p[1]))
				break
			}
		}
	}
	return resp.Map(out...)
}

// shardMap returns the node's shard map (its Shards own slots, in
// increasing order; ids may have holes after merges), or the error reply.
func (f *Front) shardMap() (*shard.Map, *resp.Value) {
	smap := f.n.ShardMap()
	if smap == nil {
		v := errReply("CLUSTERDOWN swarmkv: cluster not bootstrapped yet")
		return nil, &v
	}
	return smap, nil
}

// fanOut runs argv on every shard of the node's map in parallel and
// returns the replies in shard order, or the first error reply. Each leg
// names the slots the map gives its shard (api.RedisRequest.Slots): a
// shard that no longer owns them all (the map is behind a slot move: the
// node follows the meta group within about half a second) answers
// api.StaleSlotsReply, and the fan-out runs again once the node's map
// changed (withFreshMap), so it never answers for part of the keyspace. It
// answers that TRYAGAIN reply if ctx ends first.
func (f *Front) fanOut(ctx context.Context, argv fsm.RedisArgv) ([]resp.Value, *resp.Value) {
	var out []resp.Value
	errv := f.withFreshMap(ctx, func(smap *shard.Map) *resp.Value {
		ids := smap.Shards()
		out = make([]resp.Value, len(ids))
		var wg sync.WaitGroup
		for i, id := range ids {
			slots := shard.SlotSetOf(smap.SlotsOf(id)...)
			wg.Add(1)
			go func() {
				defer wg.Done()
				out[i] = f.run(ctx, &api.RedisRequest{Shard: id, Cmds: []fsm.RedisArgv{argv}, Slots: &slots})
			}()
		}
		wg.Wait()
		var stale *resp.Value
		for i := range out {
			switch {
			case api.IsStaleSlots(out[i]):
				stale = &out[i]
			case out[i].IsError():
				return &out[i]
			}
		}
		return stale
	})
	if errv != nil {
		return nil, errv
	}
	return out, nil
}

// withFreshMap runs try on the node's shard map and answers the error reply
// try returns (nil when it succeeded). When that reply is
// api.StaleSlotsReply (a shard no longer owns the slots the map gave it:
// the map is behind a slot move), it waits, pausing by followBackoff, for a
// newer map and runs try again on it; it answers the stale reply if ctx
// ends first, and the CLUSTERDOWN reply while the node has no map.
func (f *Front) withFreshMap(ctx context.Context, try func(smap *shard.Map) *resp.Value) *resp.Value {
	b := followBackoff.Backoff()
	for {
		smap, errv := f.shardMap()
		if errv != nil {
			return errv
		}
		errv = try(smap)
		if errv == nil || !api.IsStaleSlots(*errv) {
			return errv
		}
		if !f.awaitNewerMap(ctx, b, smap.Version) {
			return errv
		}
	}
}

// awaitNewerMap waits, pausing by b, until the node's map is newer than
// version; false when ctx ends first.
func (f *Front) awaitNewerMap(ctx context.Context, b *retry.Backoff, version uint64) bool {
	for {
		if m := f.n.ShardMap(); m != nil && m.Version > version {
			return true
		}
		if !b.Wait(ctx) {
			return false
		}
	}
}

// cmdKeys merges the shards' KEYS replies. Each shard refuses a reply over
// the reply limits (fsm.ReplyLimits); the merged reply is held to the same
// limits, so a KEYS answers at most MaxKeysReply keys and MaxPageBytes
// bytes or the error that points to SCAN.
func cmdKeys(f *Front, ctx context.Context, _ *redisConn, a [][]byte) resp.Value {
	replies, errv := f.fanOut(ctx, fsm.RedisArgv{[]byte("keys"), a[1]})
	if errv != nil {
		return *errv
	}
	lim := f.cfg.ReplyLimits()
	var all []resp.Value
	size := 0
	for _, r := range replies {
		for _, k := range r.Elems {
			size += fsm.BulkSize(len(k.Str))
			if len(all) >= lim.MaxKeys || size > lim.MaxBytes {
				return errReply(fsm.KeysTooMany(lim, len(all) >= lim.MaxKeys))
			}
			all = append(all, k)
		}
	}
	return resp.Array(all...)
}

// cmdDBSize sums the shards' key counts (swarmkv.dbsize counts without
// listing keys).
func cmdDBSize(f *Front, ctx context.Context, _ *redisConn, _ [][]byte) resp.Value {
	replies, errv := f.fanOut(ctx, fsm.RedisArgv{[]byte("swarmkv.dbsize")})
	if errv != nil {
		return *errv
	}
	n := int64(0)
	for _, r := range replies {
		if r.Kind != resp.KindInt {
			return errReply("ERR swarmkv: bad dbsize reply")
		}
		n += r.Int
	}
	return resp.Int(n)
}

// SCAN cursors: the shard in the top 8 bits, the shard's own cursor (a
// creation index, below 2^56) in the rest. 0 starts at shard 0 and ends
// the iteration.
const scanShardShift = 56

func cmdScan(f *Front, ctx context.Context, _ *redisConn, a [][]byte) resp.Value {
	cursor, err := strconv.ParseUint(string(a[1]), 10, 64)
	if err != nil {
		return errReply(resp.ErrInvalidCursor)
	}
	if _, errv := fsm.ParseScanOptions(a[2:]); errv != nil {
		return *errv
	}
	argv := append(fsm.RedisArgv{[]byte("swarmkv.scan"), []byte(strconv.FormatUint(cursor&(1<<scanShardShift-1), 10))}, a[2:]...)
	var (
		v   resp.Value
		ids []shard.ID
		id  int
		pos int
	)
	// Like a fan-out's leg, the step names the slots the node's map gives
	// its shard, and runs again once the map changed if the shard no
	// longer owns them all (withFreshMap).
	if errv := f.withFreshMap(ctx, func(smap *shard.Map) *resp.Value {
		ids = smap.Shards()
		id = int(cursor >> scanShardShift)
		if cursor == 0 && len(ids) > 0 {
			id = int(ids[0])
		}
		var found bool
		if pos, found = slices.BinarySearch(ids, shard.ID(id)); !found {
			e := errReply(resp.ErrInvalidCursor)
			return &e
		}
		slots := shard.SlotSetOf(smap.SlotsOf(shard.ID(id))...)
		v = f.run(ctx, &api.RedisRequest{Shard: shard.ID(id), Cmds: []fsm.RedisArgv{argv}, Slots: &slots})
		if api.IsStaleSlots(v) {
			return &v
		}
		return nil
	}); errv != nil {
		return *errv
	}
	if v.IsError() {
		return v
	}
	if len(v.Elems) != 2 {
		return errReply("ERR swarmkv: bad scan reply")
	}
	next, err := strconv.ParseUint(v.Elems[0].String(), 10, 64)
	if err != nil || next >= 1<<scanShardShift {
		return errReply("ERR swarmkv: bad scan cursor from shard")
	}
	switch {
	case next != 0:
		next |= uint64(id) << scanShardShift
	case pos+1 < len(ids):
		next = uint64(ids[pos+1]) << scanShardShift
	}
	return resp.Array(resp.Bulk(strconv.FormatUint(next, 10)), v.Elems[1])
}
