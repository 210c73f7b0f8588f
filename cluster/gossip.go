package cluster

import (
	"encoding/json"
	"fmt"
	"log"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/swarmkv/swarmkv/internal/linelog"
)

// gossipMeta is what a node announces in memberlist's node metadata
// (at most memberlist.MetaMaxSize = 512 bytes of JSON). Gossip is a hint:
// it tells nodes where peers are and whether they can bootstrap together; it
// never changes Raft configuration by itself.
type gossipMeta struct {
	// Version is the node's protocol version; peers without a supported
	// version are refused.
	Version int    `json:"v"`
	ID      string `json:"id"`
	Raft    string `json:"raft"`
	GRPC    string `json:"grpc"`
	HTTP    string `json:"http,omitempty"`
	// Shards and Expect are the node's bootstrap settings; nodes only
	// bootstrap together when they agree.
	Shards int `json:"shards"`
	Expect int `json:"expect"`
	// Cluster is the id of the cluster the node belongs to, empty until
	// it has bootstrapped or been admitted.
	Cluster string `json:"cluster,omitempty"`
	// Inc is the node's data dir incarnation (State.Nodes[].Incarnation).
	Inc string `json:"inc,omitempty"`
}

// decodeGossipMeta decodes a peer's metadata and checks that it speaks
// protocol version want (the local node's).
func decodeGossipMeta(b []byte, want int) (gossipMeta, error) {
	var m gossipMeta
	if len(b) == 0 {
		return m, fmt.Errorf("cluster: peer announced no metadata (missing protocol version)")
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("cluster: peer metadata: %w", err)
	}
	if m.Version == 0 {
		return m, fmt.Errorf("cluster: peer %q announced no protocol version", m.ID)
	}
	if m.Version != want {
		return m, fmt.Errorf("cluster: peer %q speaks protocol version %d, this node supports %d: refused", m.ID, m.Version, want)
	}
	if m.ID == "" || m.Raft == "" || m.GRPC == "" {
		return m, fmt.Errorf("cluster: peer metadata lacks id or addresses")
	}
	return m, nil
}

// gossipDelegate implements memberlist's Delegate (our metadata) and
// AliveDelegate (refuse peers with a bad protocol version or a name that
// differs from their id).
type gossipDelegate struct {
	node *Node
}

var (
	_ memberlist.Delegate      = gossipDelegate{}
	_ memberlist.AliveDelegate = gossipDelegate{}
	_ memberlist.EventDelegate = gossipDelegate{}
)

// members is the node's copy of gossip membership, fed by memberlist's
// event callbacks (memberlist's own Node structs must not be read outside
// its callbacks: it updates them in place).
type members struct {
	mu    sync.RWMutex
	nodes map[string]member
}

type member struct {
	meta  gossipMeta
	alive bool
	since time.Time // when alive last changed (or the member was first seen)
}

func (ms *members) set(name string, meta []byte, alive bool, version int) {
	m, err := decodeGossipMeta(meta, version)
	if err != nil {
		return
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.nodes == nil {
		ms.nodes = map[string]member{}
	}
	since := time.Now()
	if old, ok := ms.nodes[name]; ok && old.alive == alive {
		since = old.since
	}
	ms.nodes[name] = member{meta: m, alive: alive, since: since}
}

// all returns a copy of every member gossip has seen, by id.
func (ms *members) all() map[string]member {
	ms.mu.RLock()
	defer ms.mu.RUnlock()
	out := make(map[string]member, len(ms.nodes))
	for k, v := range ms.nodes {
		out[k] = v
	}
	return out
}

func (ms *members) get(id string) (member, bool) {
	ms.mu.RLock()
	defer ms.mu.RUnlock()
	m, ok := ms.nodes[id]
	return m, ok
}

// alive returns the metadata of live members, sorted by id.
func (ms *members) alive() []gossipMeta {
	ms.mu.RLock()
	defer ms.mu.RUnlock()
	var out []gossipMeta
	for _, m := range ms.nodes {
		if m.alive {
			out = append(out, m.meta)
		}
	}
	slices.SortFunc(out, func(a, b gossipMeta) int { return strings.Compare(a.ID, b.ID) })
	return out
}

func (d gossipDelegate) NotifyJoin(n *memberlist.Node) {
	d.node.members.set(n.Name, n.Meta, true, d.node.protocolVersion())
}
func (d gossipDelegate) NotifyUpdate(n *memberlist.Node) {
	d.node.members.set(n.Name, n.Meta, true, d.node.protocolVersion())
}
func (d gossipDelegate) NotifyLeave(n *memberlist.Node) {
	d.node.members.set(n.Name, n.Meta, false, d.node.protocolVersion())
}

func (d gossipDelegate) NodeMeta(limit int) []byte {
	b, _ := json.Marshal(d.node.localMeta())
	if len(b) > limit {
		d.node.log.Error("gossip metadata exceeds limit", "size", len(b), "limit", limit)
		return nil
	}
	return b
}

func (d gossipDelegate) NotifyMsg([]byte)                           {}
func (d gossipDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d gossipDelegate) LocalState(join bool) []byte                { return nil }
func (d gossipDelegate) MergeRemoteState(buf []byte, join bool)     {}

func (d gossipDelegate) NotifyAlive(peer *memberlist.Node) error {
	m, err := decodeGossipMeta(peer.Meta, d.node.protocolVersion())
	if err != nil {
		d.node.log.Warn("refusing gossip peer", "peer", peer.Name, "addr", peer.Address(), "err", err)
		return err
	}
	if m.ID != peer.Name {
		err := fmt.Errorf("cluster: peer name %q differs from its id %q", peer.Name, m.ID)
		d.node.log.Warn("refusing gossip peer", "err", err)
		return err
	}
	return nil
}

func newMemberlist(n *Node) (*memberlist.Memberlist, error) {
	var c *memberlist.Config
	if n.cfg.GossipProfile == "local" {
		c = memberlist.DefaultLocalConfig()
	} else {
		c = memberlist.DefaultLANConfig()
	}
	c.Name = n.cfg.ID
	host, port, err := splitHostPort(n.cfg.GossipAddr)
	if err != nil {
		return nil, err
	}
	c.BindAddr, c.BindPort = host, port
	if n.cfg.GossipAdvertise != "" {
		ah, ap, err := splitHostPort(n.cfg.GossipAdvertise)
		if err != nil {
			return nil, err
		}
		c.AdvertiseAddr, c.AdvertisePort = ah, ap
	}
	c.Delegate = gossipDelegate{node: n}
	c.Alive = gossipDelegate{node: n}
	c.Events = gossipDelegate{node: n}
	c.Logger = log.New(linelog.Writer{Logger: n.log.With("component", "gossip")}, "", 0)
	if len(n.cfg.GossipKeys) > 0 { // encrypt and verify every message (tls_gossip.go)
		kr, err := memberlist.NewKeyring(n.cfg.GossipKeys[1:], n.cfg.GossipKeys[0])
		if err != nil {
			return nil, err
		}
		c.Keyring = kr
		c.GossipVerifyIncoming, c.GossipVerifyOutgoing = true, true
	}
	return memberlist.Create(c)
}

func splitHostPort(addr string) (string, int, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, fmt.Errorf("port %q: %w", p, err)
	}
	return h, port, nil
}
