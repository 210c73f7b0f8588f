package cluster

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"lukechampine.com/blake3"

	"github.com/swarmkv/swarmkv/auth/authn"
	"github.com/swarmkv/swarmkv/cluster/events"
	"github.com/swarmkv/swarmkv/cluster/gossip"
	"github.com/swarmkv/swarmkv/cluster/metrics"
	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/cluster/reconcile"
	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/cluster/shardmove"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/internal/fsutil"
	"github.com/swarmkv/swarmkv/internal/linelog"
	"github.com/swarmkv/swarmkv/internal/lograte"
	"github.com/swarmkv/swarmkv/internal/retry"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
	"github.com/swarmkv/swarmkv/transport"
)

// Node is one swarmkv process: gossip membership, one Raft replica per
// local shard (sharing one Raft port through a Mux) and the gRPC API. It
// binds the admin HTTP listener, which package admin serves.
//
// Threads: New starts the gRPC server, the Mux accept loop, the
// memberlist agent, a join loop (until a seed answers) and, before the
// cluster is bootstrapped, a bootstrap loop. Close stops them in reverse
// order and joins every goroutine.
type Node struct {
	cfg   Config
	log   *slog.Logger
	addrs NodeAddrs

	mux     *transport.Mux
	ml      *memberlist.Memberlist
	members gossip.Members
	metrics *metrics.Registry
	cache   *pebble.Cache
	grpcSrv *grpc.Server
	// svcStop and svcClose are the Stop and Close of the Services New
	// was given (Close runs them around the gRPC server's stop).
	svcStop, svcClose []func()
	grpcLn            net.Listener
	tls               *transport.NodeTLS // the node's TLS identity; nil without Config.TLS
	// secret is the cluster secret of Config.Auth without TLS
	// (authn.LoadClusterSecret); nil otherwise.
	secret []byte
	authn  *authn.Authenticator // identifies callers (auth.go)
	// httpLn is the admin HTTP listener, bound here (its address is
	// gossiped) and served by package admin, which takes it
	// (HTTPListener); nil once taken or without Config.HTTPAddr.
	httpLn struct {
		sync.Mutex
		ln net.Listener
	}

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	inc   string           // the data dir's incarnation
	peers *transport.Peers // gRPC connections to other nodes (Admin calls)
	// checker confirms the local leaders' read rounds with the peer nodes,
	// all groups at once (transport/readcheck.go).
	checker *transport.LeaderChecker
	// noticer carries the quiet groups' notices (transport/notice.go).
	noticer *transport.Noticer
	kick    chan struct{}
	// mover runs the slot moves of elastic shards and the shard policy
	// (package cluster/shardmove; moves.go).
	mover *shardmove.Mover
	// recon is the reconciler (package cluster/reconcile; reconcile.go).
	recon *reconcile.Reconciler
	// events are the node's recent cluster events (events.go).
	events *events.Ring

	// version is the node's memory of its cluster's protocol versions
	// (version.go).
	version versionState

	// adoptMu serializes bootstrap, admission and the sync loop's changes
	// to the local replicas; metaMu serializes metaUpdate calls.
	adoptMu sync.Mutex
	metaMu  sync.Mutex

	mu struct {
		sync.RWMutex
		state    *State
		smap     *shard.Map
		replicas map[shard.ID]*replica.Replica
		meta     *replica.Replica // the local meta group replica, if any
		refused  error            // set when the cluster state says this data dir is stale
	}
	closeOnce sync.Once
	closeErr  error
}

// New starts a node. It returns once every listener is bound and the
// replicas recorded in the data dir are open (a data dir `swarmnode
// restore` seeded is restored first: restore.go); bootstrapping a new
// cluster continues in the background (see Ready). The node's gRPC server serves
// the Admin service and whatever services adds (package api's client
// services, through server.New), registered before it serves.
func New(cfg Config, services ...func(*Node) Services) (_ *Node, err error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Testing.Faults != nil {
		cfg.Testing.Dial = cfg.Testing.Faults.Dialer(cfg.Testing.Dial)
		wrap := cfg.Testing.WrapRaftListener
		cfg.Testing.WrapRaftListener = func(ln net.Listener) net.Listener {
			if wrap != nil {
				ln = wrap(ln)
			}
			return cfg.Testing.Faults.Listen(ln)
		}
	}
	n := &Node{cfg: cfg, log: cfg.Logger.With("node", cfg.ID), kick: make(chan struct{}, 1), events: events.NewRing(events.DefaultCapacity)}
	n.mover = n.newMover()
	n.recon = n.newReconciler()
	n.cfg.Logger = n.log // every component logs with the node attribute
	n.mu.replicas = make(map[shard.ID]*replica.Replica)
	n.ctx, n.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if err := fsutil.PrivateDir(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("cluster: data dir: %w", err)
	}
	st, err := loadState(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if st != nil {
		if err := n.checkOwnVersion(st); err != nil { // version.go
			return nil, fmt.Errorf("%w (%s)", err, stateFile)
		}
	}
	if n.inc, err = loadIncarnation(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("cluster: data dir: %w", err)
	}
	pcfg := transport.PeersConfig{DialOptions: []grpc.DialOption{rpc.Keepalive()}}
	if cfg.TLS.Enabled() {
		if n.tls, err = transport.LoadNodeTLS(cfg.TLS, cfg.ID, n.log); err != nil {
			return nil, err
		}
		pcfg.Creds = credentials.NewTLS(n.tls.PeerConfig())
	}
	if n.secret, err = loadClusterSecret(cfg); err != nil {
		return nil, err
	}
	if n.secret != nil {
		pcfg.Unary = transport.NodeCredUnary(n.secret, cfg.ID)
		pcfg.Stream = transport.NodeCredStream(n.secret, cfg.ID)
	}
	n.authn = n.newAuthn()
	n.peers = transport.NewPeers(pcfg)
	n.cache = pebble.NewCache(cfg.cacheCapacity())
	if n.cfg.logStore, err = openLogStore(n.cfg, n.cache); err != nil { // shared by every replica; closed after them
		return nil, err
	}

	raftLn, err := net.Listen("tcp", cfg.RaftAddr)
	if err != nil {
		return nil, fmt.Errorf("cluster: raft listen %s: %w", cfg.RaftAddr, err)
	}
	if cfg.Testing.WrapRaftListener != nil {
		raftLn = cfg.Testing.WrapRaftListener(raftLn)
	}
	raftLn = n.limitRaftConns(raftLn) // limits.go
	n.addrs.ID = cfg.ID
	n.addrs.RaftAddr = advertised(cfg.RaftAdvertise, raftLn.Addr())
	mcfg := transport.MuxConfig{Listener: raftLn, Advertise: n.addrs.RaftAddr, Dial: cfg.Testing.Dial,
		Logger: lograte.New(n.log, lograte.Every), HandshakeTimeout: cfg.RaftHandshakeTimeout,
		LocalID: cfg.ID, Secret: n.secret, AllowPeer: n.raftPeerAllowed, Incarnations: n.incarnationMode}
	if n.tls != nil {
		mcfg.ServerTLS, mcfg.ClientTLS = n.tls.ServerConfig(true), n.tls.PeerConfig()
	}
	n.mux, err = transport.NewMux(mcfg)
	if err != nil {
		raftLn.Close()
		return nil, err
	}
	ckLayer, err := n.mux.Layer(ReadCheckGroup, 0)
	if err != nil {
		return nil, err
	}
	n.checker = transport.NewLeaderChecker(ckLayer, cfg.ID, n.raftOf, n.log)
	noticeLayer, err := n.mux.Layer(NoticeGroup, 0)
	if err != nil {
		return nil, err
	}
	n.noticer = transport.NewNoticer(noticeLayer, cfg.ID, n.notice, n.log)

	n.grpcLn, err = net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return nil, fmt.Errorf("cluster: grpc listen %s: %w", cfg.GRPCAddr, err)
	}
	n.addrs.GRPCAddr = advertised(cfg.GRPCAdvertise, n.grpcLn.Addr())
	n.grpcLn = n.LimitConns(n.grpcLn, "grpc") // limits.go
	if cfg.HTTPAddr != "" {
		ln, err := net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			return nil, fmt.Errorf("cluster: http listen %s: %w", cfg.HTTPAddr, err)
		}
		n.addrs.HTTPAddr = ln.Addr().String()
		n.httpLn.ln = n.LimitConns(ln, "http") // limits.go
	}

	if st == nil { // a data dir `swarmnode restore` seeded (restore.go)
		if st, err = n.restoreSeed(); err != nil {
			return nil, err
		}
	} else {
		n.removeSeed() // consumed by an earlier start that stopped before removing it
	}
	if st != nil {
		if err := n.adoptState(st); err != nil {
			return nil, err
		}
	}

	n.ml, err = gossip.New(gossip.Config{
		Name: cfg.ID, Bind: cfg.GossipAddr, Advertise: cfg.GossipAdvertise, Profile: cfg.GossipProfile,
		Keys: cfg.GossipKeys, Members: &n.members, LocalMeta: n.localMeta, Accept: n.acceptVersions, OnLiveness: n.onLiveness,
		Log: n.log, Logger: log.New(linelog.Writer{Logger: n.log.With("component", "gossip")}, "", 0),
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: gossip on %s: %w", cfg.GossipAddr, err)
	}
	ln := n.ml.LocalNode()
	n.addrs.GossipAddr = net.JoinHostPort(ln.Addr.String(), fmt.Sprint(ln.Port))

	n.metrics = metrics.New(n.scrape)
	unary := []grpc.UnaryServerInterceptor{n.deadlineUnary, n.metrics.UnaryServerInterceptor()}
	stream := []grpc.StreamServerInterceptor{n.metrics.StreamServerInterceptor()}
	svcs := make([]Services, len(services))
	for i, f := range services {
		svcs[i] = f(n)
		if svcs[i].Unary != nil {
			unary = append(unary, svcs[i].Unary)
		}
		if svcs[i].Stream != nil {
			stream = append(stream, svcs[i].Stream)
		}
	}
	if n.authn.On() && len(services) == 0 {
		// Nothing guards the calls (the auth interceptors are package
		// api's): refuse every one rather than serve the Admin service open.
		unary = append(unary, refuseUnguarded)
		stream = append(stream, refuseUnguardedStream)
	}
	n.grpcSrv = grpc.NewServer(append(n.GRPCServerOptions(),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
		grpc.MaxRecvMsgSize(n.maxRequestBytes()),
		grpc.MaxSendMsgSize(n.maxRequestBytes()+cfg.MaxScanPage*(cfg.Limits.MaxKeySize+cfg.Limits.MaxValueSize)),
	)...)
	rpc.RegisterAdminServer(n.grpcSrv, &adminServer{node: n})
	rpc.RegisterConsoleServer(n.grpcSrv, &consoleServer{node: n})
	chain := chainUnary(unary...)
	for _, s := range svcs {
		if s.Register != nil {
			s.Register(n.grpcSrv, chain)
		}
		if s.Stop != nil {
			n.svcStop = append(n.svcStop, s.Stop)
		}
		if s.Close != nil {
			n.svcClose = append(n.svcClose, s.Close)
		}
	}
	n.metrics.InitializeMetrics(n.grpcSrv)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := n.grpcSrv.Serve(n.grpcLn); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			n.log.Error("grpc server stopped", "err", err)
		}
	}()
	if len(cfg.Join) > 0 {
		n.wg.Add(1)
		go n.joinLoop()
	}
	if st == nil && cfg.BootstrapExpect > 0 {
		n.wg.Add(1)
		go n.bootstrapLoop()
	}
	// The first sync runs at once: a replica reopened from cluster.json
	// may be of a group removed while the node was down, its shard id
	// reused since (placeLocal replaces it); until then it may talk to the
	// new group's replicas.
	n.kickSync()
	n.wg.Add(4)
	go n.syncLoop()
	go func() { defer n.wg.Done(); n.recon.Run(n.ctx) }()
	go func() { defer n.wg.Done(); n.mover.RunMover(n.ctx) }()
	go func() { defer n.wg.Done(); n.mover.RunPolicy(n.ctx) }()
	n.mu.RLock()
	st = n.mu.state
	n.mu.RUnlock()
	n.log.Info("node started", "raft", n.addrs.RaftAddr, "grpc", n.addrs.GRPCAddr,
		"http", n.addrs.HTTPAddr, "gossip", n.addrs.GossipAddr, "data_dir", cfg.DataDir,
		"bootstrapped", st != nil && st.Bootstrapped, "tls", n.tls != nil, "gossip_encrypted", len(cfg.GossipKeys) > 0, "auth", n.authn.On())
	return n, nil
}

func advertised(adv string, a net.Addr) string {
	if adv != "" {
		return adv
	}
	return a.String()
}

// maxRequestBytes bounds a gRPC request: a full batch plus framing.
func (n *Node) maxRequestBytes() int {
	l := n.cfg.Limits
	kv := l.MaxValueSize + l.MaxKeySize + 64<<10 + min(l.MaxBatchOps, 64)*(l.MaxKeySize)
	// A forwarded RESP command or MULTI block: its protobuf is at most
	// its RESP size plus 2 bytes a command, and the watches.
	c := &n.cfg
	redis := max(c.RedisMaxCommandBytes, c.RedisMaxMultiBytes+2*c.RedisMaxMultiCommands) +
		fsm.MaxRedisWatches*(keys.MaxRedisKeyLen+32) + 64<<10
	return max(kv, redis)
}

// Addrs returns the node's bound (or advertised) addresses.
func (n *Node) Addrs() NodeAddrs { return n.addrs }

// ID returns the node id.
func (n *Node) ID() string { return n.cfg.ID }

func (n *Node) localMeta() gossip.Meta {
	m := gossip.Meta{
		Version: n.announcedVersion(), ID: n.cfg.ID, Raft: n.addrs.RaftAddr, GRPC: n.addrs.GRPCAddr,
		HTTP: n.addrs.HTTPAddr, Shards: n.cfg.Shards, Expect: n.cfg.BootstrapExpect, Inc: n.inc,
		Policy: policyText(n.cfg.bootstrapPolicy()), Zone: n.cfg.Zone, Host: n.cfg.Host,
	}
	lo, hi := n.cfg.protocolRange()
	if hi > 1 { // a binary before version ranges announces "v" alone
		m.Min, m.Max = lo, hi
	}
	n.mu.RLock()
	if n.mu.state != nil {
		m.Cluster = n.mu.state.ClusterID
	}
	n.mu.RUnlock()
	return m
}

// joinLoop joins the seed addresses, retrying until one answers.
func (n *Node) joinLoop() {
	defer n.wg.Done()
	retry.Do(n.ctx, retry.Options{Initial: 200 * time.Millisecond, Max: 5 * time.Second,
		Notify: func(err error, in time.Duration) {
			n.log.Warn("gossip join failed, retrying", "seeds", n.cfg.Join, "err", err, "in", in)
		}},
		func() error {
			joined, err := n.ml.Join(n.cfg.Join)
			if joined > 0 {
				n.log.Info("joined gossip", "seeds", n.cfg.Join, "contacted", joined)
				return nil
			}
			return cmp.Or(err, errors.New("no seed answered"))
		})
}

// aliveMembers returns the metadata of live gossip members that passed the
// protocol check, this node included, sorted by id.
func (n *Node) aliveMembers() []gossip.Meta {
	out := n.members.Alive()
	if !slices.ContainsFunc(out, func(m gossip.Meta) bool { return m.ID == n.cfg.ID }) {
		out = append(out, n.localMeta())
		slices.SortFunc(out, func(a, b gossip.Meta) int { return strings.Compare(a.ID, b.ID) })
	}
	return out
}

// bootstrapLoop waits until BootstrapExpect nodes agree through gossip,
// then records the placement and bootstraps the local replicas.
func (n *Node) bootstrapLoop() {
	defer n.wg.Done()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastWhy := ""
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
		n.mu.RLock()
		done := n.mu.state != nil
		n.mu.RUnlock()
		if done {
			return // admitted by the sync loop
		}
		st, why := n.planBootstrap()
		if st == nil {
			if why != lastWhy {
				n.log.Info("waiting to bootstrap", "reason", why)
				lastWhy = why
			}
			continue
		}
		if err := saveState(n.cfg.DataDir, st); err != nil {
			n.log.Error("cannot record cluster state", "err", err)
			continue
		}
		n.adoptMu.Lock()
		err := n.adoptState(st)
		n.adoptMu.Unlock()
		if err != nil {
			n.log.Error("bootstrap failed", "err", err)
			return
		}
		n.ml.UpdateNode(5 * time.Second)
		n.log.Info("cluster bootstrapped", "cluster", st.ClusterID, "nodes", len(st.Nodes), "shards", st.NumShards)
		return
	}
}

// planBootstrap returns the cluster state to bootstrap with, or nil and the
// reason it cannot yet.
func (n *Node) planBootstrap() (*State, string) {
	members := n.aliveMembers()
	for _, m := range members {
		if m.Shards != n.cfg.Shards || m.Expect != n.cfg.BootstrapExpect {
			return nil, fmt.Sprintf("node %s has --shards %d --bootstrap-expect %d, this node %d and %d", m.ID, m.Shards, m.Expect, n.cfg.Shards, n.cfg.BootstrapExpect)
		}
		if want := policyText(n.cfg.bootstrapPolicy()); m.Policy != want {
			return nil, fmt.Sprintf("node %s has the shard policy %q (--nodes-per-shard, --max-shard-size, --max-shard-load), this node %q", m.ID, m.Policy, want)
		}
	}
	if len(members) < n.cfg.BootstrapExpect {
		return nil, fmt.Sprintf("%d of %d expected nodes known", len(members), n.cfg.BootstrapExpect)
	}
	all := members
	members = members[:n.cfg.BootstrapExpect]
	ids := make([]string, len(members))
	nodes := make([]NodeAddrs, len(members))
	var incs []string
	self := false
	for i, m := range members {
		ids[i] = m.ID
		nodes[i] = NodeAddrs{ID: m.ID, RaftAddr: m.Raft, GRPCAddr: m.GRPC, HTTPAddr: m.HTTP, Incarnation: m.Inc, Status: StatusActive}
		incs = append(incs, m.Inc)
		self = self || m.ID == n.cfg.ID
	}
	if !self {
		return nil, "this node is not among the first nodes by id; it must join the cluster instead"
	}
	// The highest protocol version every bootstrapping node speaks.
	vlo, vhi := 0, 0
	for i, m := range members {
		lo, hi := m.Range()
		if i == 0 || lo > vlo {
			vlo = lo
		}
		if i == 0 || hi < vhi {
			vhi = hi
		}
	}
	if vlo > vhi {
		return nil, fmt.Sprintf("the bootstrapping nodes speak no common protocol version (the highest lowest is %d, the lowest highest %d)", vlo, vhi)
	}
	shards := n.cfg.BootstrapShards()
	smap, err := shard.DefaultMap(shards)
	if err != nil {
		return nil, err.Error()
	}
	// The cluster id covers the members' data dir incarnations: a cluster
	// bootstrapped again from wiped data dirs with the same node ids is
	// another cluster, and nodes of the old one are refused.
	h := blake3.Sum256([]byte(fmt.Sprintf("%s/%s/%d", strings.Join(ids, ","), strings.Join(incs, ","), shards)))
	st := &State{
		FormatVersion:     stateFormat,
		ClusterID:         hex.EncodeToString(h[:8]),
		ReplicationFactor: n.cfg.ReplicationFactor,
		MetaVoters:        ids[:placement.MetaVoterTarget(len(ids))],
		MapVersion:        smap.Version,
		NumShards:         smap.NumShards,
		Slots:             smap.Slots[:],
		Shards:            placement.Place(ids, shards, n.cfg.ReplicationFactor),
		Nodes:             nodes,
	}
	policy := n.cfg.bootstrapPolicy()
	st.Policy = &policy
	st.ProtocolVersion = vhi
	// Peers that bootstrapped before this node saw them all computed the
	// same plan (same members, same shard count, hence the same cluster
	// id): join that bootstrap. A different cluster id means another
	// cluster, which a node never joins by bootstrapping.
	for _, m := range all {
		if m.Cluster != "" && m.Cluster != st.ClusterID {
			return nil, fmt.Sprintf("node %s already belongs to cluster %s; a new node joins it through membership changes, not bootstrap", m.ID, m.Cluster)
		}
	}
	return st, ""
}

// adoptState installs st (at bootstrap, or at start from cluster.json),
// opens the meta replica and the shard replicas it places here
// (bootstrapping them if st is not yet marked bootstrapped) and marks it.
// The caller holds adoptMu (or is New, before any loop runs).
func (n *Node) adoptState(st *State) error {
	smap, err := st.Map()
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.mu.state = st
	n.mu.smap = smap
	n.mu.Unlock()
	n.noteVersion(st.ActiveVersion()) // version.go
	if slices.Contains(st.MetaVoters, n.cfg.ID) || slices.Contains(st.MetaLearners, n.cfg.ID) {
		if err := n.openMeta(st, !st.Bootstrapped); err != nil {
			return err
		}
	}
	for _, p := range st.Shards {
		if !p.Holds(n.cfg.ID) {
			continue
		}
		if err := n.openShard(st, p, !st.Bootstrapped); err != nil {
			return err
		}
	}
	if !st.Bootstrapped {
		// st is published (n.mu.state) and the meta replica's leader
		// hook may be reading it (metaReady clones it): mark a copy and
		// publish that, never write a published state (the race detector
		// caught the write in CI).
		done := st.Clone()
		done.Bootstrapped = true
		if err := saveState(n.cfg.DataDir, done); err != nil {
			return err
		}
		n.mu.Lock()
		if n.mu.state == st {
			n.mu.state = done
		}
		n.mu.Unlock()
	}
	return nil
}

// openShard opens the local replica of p's shard. With bootstrap set, or
// when p is a new group a split made (p.New) and this node is one of its
// voters, a replica without Raft state is bootstrapped with p's voters;
// otherwise it waits for its leader to add it and send it the log. A
// group a split made starts owning no slot (p.StartsEmpty). A local
// replica folder of an older incarnation of the shard id (a dead group's)
// is deleted first (replica.Config.Incarnation).
func (n *Node) openShard(st *State, p Placement, bootstrap bool) error {
	bootstrap = bootstrap || (p.New && slices.Contains(p.Voters, n.cfg.ID))
	var servers []raft.Server
	for _, v := range p.Voters {
		a, ok := st.Node(v)
		if !ok {
			return fmt.Errorf("cluster: %s: shard %d voter %s has no address", stateFile, p.Shard, v)
		}
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(v), Address: raft.ServerAddress(a.RaftAddr)})
	}
	layer, err := n.mux.Layer(uint32(p.Shard), p.Incarnation)
	if err != nil {
		return err
	}
	rc := n.cfg.replicaConfig(p.Shard)
	rc.Dir, rc.Layer, rc.Cache, rc.Checker = n.shardDir(p.Shard), layer, n.cache, n.checker
	if rc.Quiet != nil {
		rc.Quiet.Notify = n.noticer.Notify
	}
	rc.Voters, rc.Bootstrap, rc.Incarnation = servers, bootstrap, p.Incarnation
	if p.StartsEmpty {
		rc.InitialSlots = &shard.SlotSet{}
	}
	// The leader of the pools shard ensures the default pool (seed 004).
	rc.OnReady, rc.OnLeader = n.shardReady, n.onLeader(p.Shard)
	rc.Admit = n.CheckCommand // the protocol version gate, for every proposer
	rc.Leases = &replica.LeaseConfig{MaxLeases: n.cfg.MaxLeasesPerShard, MaxKeysPerLease: n.cfg.MaxKeysPerLease, CheckpointInterval: n.cfg.LeaseCheckpointInterval}
	r, err := replica.Open(rc)
	if err != nil {
		layer.Close()
		return err
	}
	n.mu.Lock()
	n.mu.replicas[p.Shard] = r
	n.mu.Unlock()
	return nil
}

// raftOf returns the Raft instance of the local replica of a group (a
// shard, or MetaGroup), nil if the node has none.
func (n *Node) raftOf(group uint32) transport.TermReader {
	n.mu.RLock()
	defer n.mu.RUnlock()
	r := n.mu.replicas[shard.ID(group)]
	if group == MetaGroup {
		r = n.mu.meta
	}
	if r == nil {
		return nil // not a typed nil
	}
	return r.Raft()
}

// Ready returns nil when the node can serve: the cluster is bootstrapped
// and every local replica knows a leader; otherwise the reason.
func (n *Node) Ready() error {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.mu.refused != nil {
		return n.mu.refused
	}
	if n.mu.state == nil {
		if n.cfg.BootstrapExpect == 0 {
			return fmt.Errorf("waiting to be admitted: run `swarmnode join %s` against a member of the cluster", n.cfg.ID)
		}
		return errors.New("cluster not bootstrapped yet")
	}
	var missing []string
	for id, r := range n.mu.replicas {
		if r.Leader() == "" {
			missing = append(missing, fmt.Sprint(id))
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("no leader for shard(s) %s", strings.Join(missing, ","))
	}
	return nil
}

// replicaFor resolves a routing key to its shard and the local replica (nil
// when this node holds none).
func (n *Node) replicaFor(routingKey []byte) (shard.ID, *replica.Replica, error) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.mu.smap == nil {
		return 0, nil, errNotBootstrapped
	}
	id := n.mu.smap.ShardOf(routingKey)
	return id, n.mu.replicas[id], nil
}

var errNotBootstrapped = errors.New("cluster: not bootstrapped yet")

// nodeAddrs returns the addresses of node id: gossip first (fresh), then
// the state file.
func (n *Node) nodeAddrs(id string) (NodeAddrs, bool) {
	if id == "" {
		return NodeAddrs{}, false
	}
	if id == n.cfg.ID {
		return n.addrs, true
	}
	if m, ok := n.members.Get(id); ok {
		return NodeAddrs{ID: id, RaftAddr: m.Meta.Raft, GRPCAddr: m.Meta.GRPC, HTTPAddr: m.Meta.HTTP}, true
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.mu.state != nil {
		return n.mu.state.Node(id)
	}
	return NodeAddrs{}, false
}

// Close shuts the node down: stops serving clients, leaves gossip, closes
// every replica (Raft, log store, state machine), then the Raft port.
// Idempotent; returns after every goroutine the node started has exited.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		if n.grpcSrv != nil {
			for _, f := range n.svcStop { // e.g. pipeline streams end once their calls are answered
				f()
			}
			stopped := make(chan struct{})
			go func() { n.grpcSrv.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(3 * time.Second):
				n.grpcSrv.Stop()
				<-stopped
			}
			for _, f := range n.svcClose {
				f()
			}
		} else if n.grpcLn != nil {
			n.grpcLn.Close()
		}
		if ln := n.takeHTTPListener(); ln != nil { // never served (package admin serves it)
			ln.Close()
		}
		n.cancel()
		n.wg.Wait()
		if n.ml != nil {
			n.ml.Leave(time.Second)
			n.ml.Shutdown()
		}
		n.mu.Lock()
		replicas := n.mu.replicas
		n.mu.replicas = map[shard.ID]*replica.Replica{}
		if n.mu.meta != nil {
			replicas[metaShardID] = n.mu.meta
			n.mu.meta = nil
		}
		n.mu.Unlock()
		if n.peers != nil {
			n.peers.Close()
		}
		if n.checker != nil { // reads in flight fall back to VerifyLeader
			n.checker.Close()
		}
		if n.noticer != nil { // quiet notices in flight fail; groups stay as they are
			n.noticer.Close()
		}
		var wg sync.WaitGroup
		var emu sync.Mutex
		for _, r := range replicas {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := r.Close(); err != nil {
					emu.Lock()
					n.closeErr = errors.Join(n.closeErr, err)
					emu.Unlock()
				}
			}()
		}
		wg.Wait()
		if n.cfg.logStore != nil { // after every replica (Replica.Close leaves it open)
			n.closeErr = errors.Join(n.closeErr, n.cfg.logStore.Close())
		}
		if n.mux != nil {
			n.mux.Close()
		}
		if n.cache != nil {
			n.cache.Unref()
		}
		n.log.Info("node stopped")
	})
	return n.closeErr
}
