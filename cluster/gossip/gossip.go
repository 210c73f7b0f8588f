// Package gossip owns the node's memberlist glue: the metadata a node
// announces (Meta, DecodeMeta: protocol versions, id, addresses, bootstrap
// settings, zone and host labels), the node's copy of gossip membership fed by memberlist's
// events (Members), the delegate that announces the metadata and refuses
// peers whose protocol versions the node does not accept or whose name is
// not their id, the
// memberlist configuration (New: profile, bind and advertise addresses,
// keyring) and the gossip keyring file (ParseKeys, LoadKeys).
//
// Gossip is a hint: it tells nodes where peers are and whether they can
// bootstrap together; it never changes Raft configuration by itself. What
// gossip needs of the node is passed in as Config's function fields
// (LocalMeta, Accept). It is part of the core: package cluster imports
// it; it imports hashicorp/memberlist and the standard library only, never
// cluster.
//
// Usage, as a node wires it:
//
//	ml, err := gossip.New(gossip.Config{Name: "n1", Bind: "0.0.0.0:7103",
//		Members: &members, LocalMeta: localMeta, Accept: acceptVersions,
//		Log: log, Logger: memberlistLogger})
//	for _, m := range members.Alive() { ... } // sorted by id
package gossip

import (
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Meta is what a node announces in memberlist's node metadata (at most
// memberlist.MetaMaxSize = 512 bytes of JSON).
type Meta struct {
	// Version is the protocol version the node runs now: its cluster's,
	// or the lowest it speaks before it belongs to one. Binaries before
	// version ranges read only this field and refuse a peer whose Version
	// differs from theirs (1), so a node announces 1 while its cluster
	// runs version 1, whatever its binary speaks.
	Version int `json:"v"`
	// Min and Max are the lowest and highest protocol versions the node's
	// binary speaks (Range); 0 (binaries before version ranges, which
	// do not announce them): Version only. Older decoders ignore them.
	Min  int    `json:"min,omitempty"`
	Max  int    `json:"max,omitempty"`
	ID   string `json:"id"`
	Raft string `json:"raft"`
	GRPC string `json:"grpc"`
	HTTP string `json:"http,omitempty"`
	// Shards and Expect are the node's bootstrap settings (Shards 0:
	// automatic); nodes only bootstrap together when they agree.
	Shards int `json:"shards"`
	Expect int `json:"expect"`
	// Policy is the shard policy the node bootstraps with (text form);
	// nodes only bootstrap together when they agree.
	Policy string `json:"policy,omitempty"`
	// Cluster is the id of the cluster the node belongs to, empty until
	// it has bootstrapped or been admitted.
	Cluster string `json:"cluster,omitempty"`
	// Inc is the node's data dir incarnation (State.Nodes[].Incarnation).
	Inc string `json:"inc,omitempty"`
	// Zone and Host are the node's failure-domain labels (serve --zone,
	// --host; ValidLabel), empty when it has none: older binaries announce
	// neither and ignore them, and a node without a zone is its own zone
	// (cluster/placement, zones.go).
	Zone string `json:"zone,omitempty"`
	Host string `json:"host,omitempty"`
}

// MaxLabel is the longest zone or host label.
const MaxLabel = 63

// ValidLabel checks a zone or host label: empty, or 1 to MaxLabel
// letters, digits, '.', '_' and '-'.
func ValidLabel(s string) error {
	if len(s) > MaxLabel {
		return fmt.Errorf("label %.16q...: longer than %d bytes", s, MaxLabel)
	}
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("label %q: only letters, digits, '.', '_' and '-'", s)
		}
	}
	return nil
}

// Range returns the protocol versions the node speaks: Min..Max, or
// Version..Version for a node that does not announce them.
func (m Meta) Range() (lo, hi int) {
	lo, hi = m.Version, m.Version
	if m.Min != 0 {
		lo = m.Min
	}
	if m.Max != 0 {
		hi = m.Max
	}
	return lo, hi
}

// AcceptFunc decides whether the local node accepts a peer that speaks
// protocol versions lo..hi: nil, or the reason it refuses it.
type AcceptFunc func(lo, hi int) error

// DecodeMeta decodes a peer's metadata and checks its protocol versions:
// a Version within Min..Max (when announced), and accept's consent; and
// its labels (ValidLabel).
func DecodeMeta(b []byte, accept AcceptFunc) (Meta, error) {
	var m Meta
	if len(b) == 0 {
		return m, fmt.Errorf("cluster: peer announced no metadata (missing protocol version)")
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("cluster: peer metadata: %w", err)
	}
	if m.Version <= 0 {
		return m, fmt.Errorf("cluster: peer %q announced no protocol version", m.ID)
	}
	if lo, hi := m.Range(); m.Min < 0 || m.Max < 0 || lo > m.Version || m.Version > hi {
		return m, fmt.Errorf("cluster: peer %q announced protocol version %d outside its range %d..%d", m.ID, m.Version, lo, hi)
	}
	if err := accept(m.Range()); err != nil {
		return m, fmt.Errorf("cluster: peer %q: %w", m.ID, err)
	}
	if m.ID == "" || m.Raft == "" || m.GRPC == "" {
		return m, fmt.Errorf("cluster: peer metadata lacks id or addresses")
	}
	if err := errors.Join(ValidLabel(m.Zone), ValidLabel(m.Host)); err != nil {
		return m, fmt.Errorf("cluster: peer %q: zone or host %w", m.ID, err)
	}
	return m, nil
}

// Members is the node's copy of gossip membership, fed by memberlist's
// event callbacks (memberlist's own Node structs must not be read outside
// its callbacks: it updates them in place). The zero value is empty and
// ready.
type Members struct {
	mu    sync.RWMutex
	nodes map[string]Member
}

// Member is one node gossip has seen.
type Member struct {
	Meta  Meta
	Alive bool
	Since time.Time // when Alive last changed (or the member was first seen)
}

// Set records member name's metadata and liveness; metadata that does not
// decode, or whose protocol versions accept refuses, is ignored. It
// reports whether the member's liveness changed (or it was not known).
func (ms *Members) Set(name string, meta []byte, alive bool, accept AcceptFunc) (changed bool) {
	m, err := DecodeMeta(meta, accept)
	if err != nil {
		return false
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.nodes == nil {
		ms.nodes = map[string]Member{}
	}
	since := time.Now()
	old, known := ms.nodes[name]
	if known && old.Alive == alive {
		since = old.Since
	}
	ms.nodes[name] = Member{Meta: m, Alive: alive, Since: since}
	return !known || old.Alive != alive
}

// All returns a copy of every member gossip has seen, by id.
func (ms *Members) All() map[string]Member {
	ms.mu.RLock()
	defer ms.mu.RUnlock()
	out := make(map[string]Member, len(ms.nodes))
	for k, v := range ms.nodes {
		out[k] = v
	}
	return out
}

// Get returns member id.
func (ms *Members) Get(id string) (Member, bool) {
	ms.mu.RLock()
	defer ms.mu.RUnlock()
	m, ok := ms.nodes[id]
	return m, ok
}

// Alive returns the metadata of live members, sorted by id.
func (ms *Members) Alive() []Meta {
	ms.mu.RLock()
	defer ms.mu.RUnlock()
	var out []Meta
	for _, m := range ms.nodes {
		if m.Alive {
			out = append(out, m.Meta)
		}
	}
	slices.SortFunc(out, func(a, b Meta) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Count returns the number of members alive and not.
func (ms *Members) Count() (alive, dead int) {
	ms.mu.RLock()
	defer ms.mu.RUnlock()
	for _, m := range ms.nodes {
		if m.Alive {
			alive++
		} else {
			dead++
		}
	}
	return alive, dead
}

// Config is how a node runs gossip.
type Config struct {
	// Name is the node id (memberlist's node name).
	Name string
	// Bind is the host:port to listen on; Advertise, if set, the host:port
	// peers reach.
	Bind, Advertise string
	// Profile "local" uses memberlist's local-network timings, anything
	// else its LAN ones.
	Profile string
	// Keys is the keyring (ParseKeys): the first encrypts, all decrypt;
	// nil sends gossip in clear.
	Keys [][]byte
	// Members is fed by memberlist's join, update and leave events.
	Members *Members
	// LocalMeta returns the metadata this node announces now.
	LocalMeta func() Meta
	// Accept decides which protocol versions of peers this node accepts
	// (asked at every alive message and event); peers it refuses are
	// left out of Members and refused by memberlist.
	Accept AcceptFunc
	// OnLiveness, if set, runs when a member is first seen or its
	// liveness changes (Members.Set reports it), on memberlist's event
	// goroutine: it must return at once.
	OnLiveness func(id string, alive bool)
	// Log receives refusals; Logger is memberlist's own logger.
	Log    *slog.Logger
	Logger *log.Logger
}

// delegate implements memberlist's Delegate (our metadata), AliveDelegate
// (refuse peers whose protocol versions Accept refuses or whose name
// differs from their id) and EventDelegate (feed Members).
type delegate struct {
	c *Config
}

var (
	_ memberlist.Delegate      = delegate{}
	_ memberlist.AliveDelegate = delegate{}
	_ memberlist.EventDelegate = delegate{}
)

func (d delegate) NotifyJoin(n *memberlist.Node)   { d.set(n, true) }
func (d delegate) NotifyUpdate(n *memberlist.Node) { d.set(n, true) }
func (d delegate) NotifyLeave(n *memberlist.Node)  { d.set(n, false) }

func (d delegate) set(n *memberlist.Node, alive bool) {
	if d.c.Members.Set(n.Name, n.Meta, alive, d.c.Accept) && d.c.OnLiveness != nil {
		d.c.OnLiveness(n.Name, alive)
	}
}

func (d delegate) NodeMeta(limit int) []byte {
	b, _ := json.Marshal(d.c.LocalMeta())
	if len(b) > limit {
		d.c.Log.Error("gossip metadata exceeds limit", "size", len(b), "limit", limit)
		return nil
	}
	return b
}

func (d delegate) NotifyMsg([]byte)                           {}
func (d delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d delegate) LocalState(join bool) []byte                { return nil }
func (d delegate) MergeRemoteState(buf []byte, join bool)     {}

func (d delegate) NotifyAlive(peer *memberlist.Node) error {
	m, err := DecodeMeta(peer.Meta, d.c.Accept)
	if err != nil {
		d.c.Log.Warn("refusing gossip peer", "peer", peer.Name, "addr", peer.Address(), "err", err)
		return err
	}
	if m.ID != peer.Name {
		err := fmt.Errorf("cluster: peer name %q differs from its id %q", peer.Name, m.ID)
		d.c.Log.Warn("refusing gossip peer", "err", err)
		return err
	}
	return nil
}

// New starts memberlist as c says (it does not join anyone yet).
func New(c Config) (*memberlist.Memberlist, error) {
	var mc *memberlist.Config
	if c.Profile == "local" {
		mc = memberlist.DefaultLocalConfig()
	} else {
		mc = memberlist.DefaultLANConfig()
	}
	mc.Name = c.Name
	host, port, err := splitHostPort(c.Bind)
	if err != nil {
		return nil, err
	}
	mc.BindAddr, mc.BindPort = host, port
	if c.Advertise != "" {
		ah, ap, err := splitHostPort(c.Advertise)
		if err != nil {
			return nil, err
		}
		mc.AdvertiseAddr, mc.AdvertisePort = ah, ap
	}
	d := delegate{c: &c}
	mc.Delegate, mc.Alive, mc.Events = d, d, d
	mc.Logger = c.Logger
	if len(c.Keys) > 0 { // encrypt and verify every message (keys.go)
		kr, err := memberlist.NewKeyring(c.Keys[1:], c.Keys[0])
		if err != nil {
			return nil, err
		}
		mc.Keyring = kr
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	}
	return memberlist.Create(mc)
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
