package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/internal/fsutil"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/shard"
)

// The meta group is a small Raft group (id MetaGroup on the shared Raft
// port) on up to 5 nodes. Its state machine is the same Pebble FSM as a
// shard's; the cluster state (State, as JSON) is one value in it, changed
// only by the meta leader with a guarded batch (compare the old document,
// write the new), so concurrent changes never overwrite each other.

// Group ids on the Raft port (transport.Mux) besides the shards' (a shard's
// group id is its shard.ID).
const (
	// MetaGroup is the group id reserved for the cluster's meta Raft group.
	MetaGroup uint32 = 0xFFFFFFFF
	// ReadCheckGroup is the group of the nodes' batched leadership checks
	// (transport.LeaderChecker).
	ReadCheckGroup uint32 = 0xFFFFFFFE
	// NoticeGroup is the group of the quiet groups' notices
	// (transport.Noticer).
	NoticeGroup uint32 = 0xFFFFFFFD
)

// metaShardID is the meta group's id where a shard.ID is expected (replica,
// state machine meta table).
const metaShardID = shard.ID(MetaGroup)

// metaCommitTimeout caps the meta group's Raft commit timeout (see
// Config.CommitTimeout): its followers apply a cluster-state change within
// 50-100ms of its commit even when nothing follows it.
const metaCommitTimeout = 50 * time.Millisecond

// metaStateKey is where the cluster state lives in the meta state machine.
var metaStateKey = keys.KV([]byte("swarmkv"), []byte("cluster/state"))

// incarnationFile holds the data dir's incarnation (NodeAddrs.Incarnation).
const incarnationFile = "incarnation"

// loadIncarnation reads the data dir's incarnation, making one on first use.
func loadIncarnation(dir string) (string, error) {
	p := filepath.Join(dir, incarnationFile)
	b, err := os.ReadFile(p)
	if err == nil {
		inc := strings.TrimSpace(string(b))
		if len(inc) != 32 {
			return "", fmt.Errorf("cluster: %s: malformed incarnation %q", p, inc)
		}
		return inc, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	var r [16]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	inc := hex.EncodeToString(r[:])
	if err := fsutil.WriteFileDurable(dir, incarnationFile, []byte(inc+"\n")); err != nil {
		return "", err
	}
	return inc, nil
}

// openMeta opens the local meta replica (bootstrapping it with st's meta
// voters when bootstrap is set and it has no Raft state).
func (n *Node) openMeta(st *State, bootstrap bool) error {
	n.mu.RLock()
	open := n.mu.meta != nil
	n.mu.RUnlock()
	if open {
		return nil
	}
	var servers []raft.Server
	for _, v := range st.MetaVoters {
		a, ok := st.Node(v)
		if !ok {
			return fmt.Errorf("cluster: meta voter %s has no address", v)
		}
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(v), Address: raft.ServerAddress(a.RaftAddr)})
	}
	layer, err := n.mux.Layer(MetaGroup, 0)
	if err != nil {
		return err
	}
	rc := n.cfg.replicaConfig(metaShardID)
	rc.Dir, rc.Layer, rc.Cache, rc.Checker = n.metaDir(), layer, n.cache, n.checker
	if rc.Quiet != nil {
		rc.Quiet.Notify = n.noticer.Notify
	}
	rc.Voters, rc.Bootstrap, rc.OnReady, rc.OnLeader = servers, bootstrap, n.metaReady, n.onLeader(metaShardID)
	r, err := replica.Open(rc)
	if err != nil {
		layer.Close()
		return fmt.Errorf("cluster: meta group: %w", err)
	}
	n.mu.Lock()
	n.mu.meta = r
	n.mu.Unlock()
	return nil
}

func (n *Node) metaDir() string { return filepath.Join(n.cfg.DataDir, "meta") }

// metaReplica returns the local meta replica or nil.
func (n *Node) metaReplica() *replica.Replica {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.mu.meta
}

// metaReady runs when the local meta replica becomes a ready leader: if the
// meta state machine holds no cluster state yet (a new cluster), it commits
// the state this node bootstrapped with (every bootstrap node computed the
// same one).
func (n *Node) metaReady(r *replica.Replica) {
	ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
	defer cancel()
	if _, err := r.FSM().Get(metaStateKey); !errors.Is(err, fsm.ErrNotFound) {
		return
	}
	n.mu.RLock()
	st := n.mu.state
	n.mu.RUnlock()
	if st == nil {
		return
	}
	init := st.Clone()
	init.Bootstrapped = false
	init.Epoch = 1
	b, err := json.Marshal(init)
	if err != nil {
		n.log.Error("meta: encode initial state", "err", err)
		return
	}
	res, err := r.Propose(ctx, &fsm.Command{Op: fsm.OpBatch, Batch: &fsm.Batch{
		Guards:    []fsm.Guard{{Kind: fsm.GuardAbsent, Key: metaStateKey}},
		Mutations: []fsm.Mutation{{Kind: fsm.MutPut, Key: metaStateKey, Value: b}},
	}})
	if err != nil {
		n.log.Warn("meta: cannot commit initial cluster state", "err", err)
		return
	}
	if res.Succeeded {
		n.log.Info("meta: initial cluster state committed", "cluster", init.ClusterID, "nodes", len(init.Nodes))
	}
}

// errMetaNotLeader: the local node does not lead the meta group.
var errMetaNotLeader = errors.New("cluster: not the meta group leader")

// metaRead returns the committed cluster state, read linearizably on the
// local meta replica, which must be the meta leader.
func (n *Node) metaRead(ctx context.Context) (*State, []byte, error) {
	r := n.metaReplica()
	if r == nil {
		return nil, nil, errMetaNotLeader
	}
	if err := r.ReadBarrier(ctx); err != nil {
		if errors.Is(err, ErrNotLeader) {
			return nil, nil, errMetaNotLeader
		}
		return nil, nil, err
	}
	b, err := r.FSM().Get(metaStateKey)
	if errors.Is(err, fsm.ErrNotFound) {
		return nil, nil, fmt.Errorf("%w: meta group has no cluster state yet", ErrLeaderNotReady)
	}
	if err != nil {
		return nil, nil, err
	}
	st, err := decodeState(b)
	return st, b, err
}

func decodeState(b []byte) (*State, error) {
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("cluster: meta state: %w", err)
	}
	if st.FormatVersion != stateFormat {
		return nil, fmt.Errorf("cluster: meta state: format version %d, want %d", st.FormatVersion, stateFormat)
	}
	if _, err := st.Map(); err != nil {
		return nil, fmt.Errorf("cluster: meta state: %w", err)
	}
	return &st, nil
}

// errNoChange, returned by a metaUpdate function, leaves the state as is
// (placement.SetPlacement returns it too).
var errNoChange = placement.ErrNoChange

// metaUpdate applies fn to a copy of the committed state and commits the
// result, guarded by the old document; fn runs again on a fresh copy if
// another change committed in between. It returns the state after the call.
func (n *Node) metaUpdate(ctx context.Context, fn func(*State) error) (*State, error) {
	n.metaMu.Lock()
	defer n.metaMu.Unlock()
	for attempt := 0; ; attempt++ {
		cur, old, err := n.metaRead(ctx)
		if err != nil {
			return nil, err
		}
		next := cur.Clone()
		if err := fn(next); errors.Is(err, errNoChange) {
			return cur, nil
		} else if err != nil {
			return nil, err
		}
		next.Epoch = cur.Epoch + 1
		next.Bootstrapped = false
		b, err := json.Marshal(next)
		if err != nil {
			return nil, err
		}
		res, err := n.metaReplica().Propose(ctx, &fsm.Command{Op: fsm.OpBatch, Batch: &fsm.Batch{
			Guards:    []fsm.Guard{{Kind: fsm.GuardEquals, Key: metaStateKey, Value: old}},
			Mutations: []fsm.Mutation{{Kind: fsm.MutPut, Key: metaStateKey, Value: b}},
		}})
		if err != nil {
			return nil, err
		}
		if res.Succeeded {
			n.kickSync()
			return next, nil
		}
		if attempt >= 5 {
			return nil, fmt.Errorf("cluster: meta state kept changing under update")
		}
	}
}
