package backup

import (
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/swarmkv/swarmkv/auth"
	"github.com/swarmkv/swarmkv/auth/authn"
	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/shard"
)

// FormatVersion is the version of the files this release writes, and the
// newest it reads: 2, signed. Version 1 (unsigned) is read only with
// ReadOptions.TrustUnsigned.
const FormatVersion = 2

// firstSigned is the first format version whose files end in a signature.
const firstSigned = 2

// magic opens every backup file.
const magic = "SWKVBKUP"

// Framing tags.
const (
	tagSection  = 'S'
	tagRecord   = 'R'
	tagEnd      = 'E'
	tagManifest = 'M'
)

// maxManifest bounds the manifest JSON (a cluster state of 1000 tokens
// and 256 shards is far below it).
const maxManifest = 16 << 20

// maxTokens bounds the tokens of a manifest (the cluster state keeps at
// most 1000).
const maxTokens = 1000

// SeedFile is the name of the seed Seed writes into a data dir; a node
// that finds it at its first start restores the backup (Seeds, for package cluster).
const SeedFile = "restore.swkvbak"

var (
	// ErrCorrupt is wrapped by every error about a file that is not a
	// well-formed, intact backup.
	ErrCorrupt = errors.New("backup: corrupt file")
	// ErrTruncated is a file that ends early; it wraps ErrCorrupt.
	ErrTruncated = fmt.Errorf("%w: truncated", ErrCorrupt)
	// ErrNewerFormat is a file of a format version this release does not
	// read.
	ErrNewerFormat = errors.New("backup: newer format")
	// ErrMoveInProgress: a split or merge runs, or ran during the backup.
	// It is placement.ErrMoveInProgress, which the node core returns, so
	// errors.Is matches either name.
	ErrMoveInProgress = placement.ErrMoveInProgress
	// ErrMapChanged: the cluster's shard map changed during the backup.
	ErrMapChanged = errors.New("backup: the shard map changed during the backup")
	// ErrBadToken is a token of the manifest that token create would
	// refuse; it wraps ErrCorrupt.
	ErrBadToken = fmt.Errorf("%w: invalid token", ErrCorrupt)
	// ErrNotEmpty is Seed's refusal of a data dir that holds anything.
	ErrNotEmpty = errors.New("backup: data dir not empty")
)

// Manifest describes a backup: the source cluster, its shard map, what a
// restore needs of its cluster state, and each shard's section.
type Manifest struct {
	FormatVersion int       `json:"format_version"`
	Created       time.Time `json:"created"`
	// ClusterID and Epoch are the source cluster's, at the start.
	ClusterID string `json:"cluster_id"`
	Epoch     uint64 `json:"epoch"`
	// ReplicationFactor, the shard map (MapVersion, NumShards, Slots),
	// NextMoveID, Policy and Tokens (with their secrets' SHA-256) are the
	// source's cluster state (placement.State's fields of those names).
	ReplicationFactor int                    `json:"replication_factor"`
	MapVersion        uint64                 `json:"map_version"`
	NumShards         int                    `json:"num_shards"`
	Slots             []shard.ID             `json:"slots"`
	NextMoveID        uint64                 `json:"next_move_id,omitempty"`
	Policy            *placement.ShardPolicy `json:"shard_policy,omitempty"`
	Tokens            []placement.Token      `json:"tokens,omitempty"`
	// Shards are the sections, in ascending shard order.
	Shards []ShardInfo `json:"shards"`
	// SignedBy is the id (hex) of the key whose signature was checked
	// (by the reader) or made (by the writer); "" when none was. Not in
	// the file's manifest: the signature block follows it.
	SignedBy string `json:"-"`
}

// ShardInfo describes one shard's section.
type ShardInfo struct {
	Shard shard.ID `json:"shard"`
	// Incarnation and StartsEmpty are the group's (placement.Placement).
	Incarnation uint64 `json:"incarnation,omitempty"`
	StartsEmpty bool   `json:"starts_empty,omitempty"`
	// Index is the committed log index the section's state is exact at.
	Index   uint64 `json:"index"`
	Records uint64 `json:"records"`
	// Bytes are the records' key and value bytes.
	Bytes uint64 `json:"bytes"`
	// SHA256 is the section's checksum, in hex.
	SHA256 string `json:"sha256"`
}

// ManifestOf returns the manifest of a backup of cluster state st, but
// the sections' figures (index, records, bytes, checksum), which the
// writer fills in (Writer.Finish).
func ManifestOf(st *placement.State, created time.Time) *Manifest {
	m := &Manifest{
		FormatVersion: FormatVersion, Created: created.UTC(), ClusterID: st.ClusterID, Epoch: st.Epoch,
		ReplicationFactor: st.ReplicationFactor, MapVersion: st.MapVersion, NumShards: st.NumShards,
		Slots: slices.Clone(st.Slots), NextMoveID: st.NextMoveID, Tokens: slices.Clone(st.Tokens),
	}
	if st.Policy != nil {
		p := *st.Policy
		m.Policy = &p
	}
	for _, p := range st.Shards {
		m.Shards = append(m.Shards, ShardInfo{Shard: p.Shard, Incarnation: p.Incarnation, StartsEmpty: p.StartsEmpty})
	}
	slices.SortFunc(m.Shards, func(a, b ShardInfo) int { return int(a.Shard) - int(b.Shard) })
	return m
}

// Map returns the manifest's shard map.
func (m *Manifest) Map() (*shard.Map, error) {
	if len(m.Slots) != shard.NumSlots {
		return nil, fmt.Errorf("%w: %d slots, want %d", shard.ErrInvalidMap, len(m.Slots), shard.NumSlots)
	}
	sm := &shard.Map{Version: m.MapVersion, NumShards: m.NumShards}
	copy(sm.Slots[:], m.Slots)
	return sm, sm.Validate()
}

// Records returns the records of every section.
func (m *Manifest) Records() uint64 {
	var n uint64
	for _, s := range m.Shards {
		n += s.Records
	}
	return n
}

// CheckToken validates a token of a backup with the rules of token
// create (authn.CheckTokenRequest: a name of 1-64 printable characters
// without surrounding space, roles that parse, at least one, a valid
// actor, and no pools:impersonate on a token bound to an actor) and
// the form the cluster gives it (an id of 16 hex digits, the hex SHA-256
// of its secret). Errors wrap ErrBadToken and name the token by id.
func CheckToken(t placement.Token) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %s: %s", ErrBadToken, clip(t.ID), fmt.Sprintf(format, args...))
	}
	if !auth.ValidID(t.ID) {
		return bad("id: want 16 hex digits")
	}
	if b, err := hex.DecodeString(t.Hash); err != nil || len(b) != 32 || hex.EncodeToString(b) != t.Hash {
		return bad("hash: want the hex SHA-256 of its secret")
	}
	name, _, err := authn.CheckTokenRequest(t.Name, t.Roles, t.Actor)
	if err != nil {
		return bad("%v (the rules of token create)", err)
	}
	if name != t.Name {
		return bad("name %s has surrounding space", clip(t.Name))
	}
	return nil
}

// clip quotes at most 20 bytes of s in an error.
func clip(s string) string {
	if len(s) > 20 {
		return fmt.Sprintf("%q...", s[:20])
	}
	return fmt.Sprintf("%q", s)
}

// check reports what makes m unusable as the manifest of a file of
// format version version whose sections are got (nil: do not compare):
// its errors wrap ErrCorrupt.
func (m *Manifest) check(version int, got []ShardInfo) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: manifest: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
	if m.FormatVersion != version {
		return bad("format version %d in a file of version %d", m.FormatVersion, version)
	}
	if m.ClusterID == "" {
		return bad("no cluster id")
	}
	if m.ReplicationFactor < 1 {
		return bad("replication factor %d", m.ReplicationFactor)
	}
	sm, err := m.Map()
	if err != nil {
		return bad("shard map: %v", err)
	}
	if m.Policy != nil {
		if err := m.Policy.Validate(); err != nil {
			return bad("%v", err)
		}
	}
	if len(m.Tokens) > maxTokens {
		return bad("%d tokens, over %d", len(m.Tokens), maxTokens)
	}
	seen := make(map[string]bool, len(m.Tokens))
	for i, t := range m.Tokens {
		if err := CheckToken(t); err != nil {
			return fmt.Errorf("%w (manifest, token %d)", err, i)
		}
		if seen[t.ID] {
			return bad("token %d: id %s twice", i, t.ID)
		}
		seen[t.ID] = true
	}
	if len(m.Shards) == 0 {
		return bad("no shards")
	}
	for i, s := range m.Shards {
		if i > 0 && s.Shard <= m.Shards[i-1].Shard {
			return bad("shards not in ascending order")
		}
		if int64(s.Shard) >= int64(sm.NumShards) {
			return bad("shard %d of a map of %d shards", s.Shard, sm.NumShards)
		}
		if b, err := hex.DecodeString(s.SHA256); err != nil || len(b) != 32 {
			return bad("shard %d: checksum %q", s.Shard, s.SHA256)
		}
	}
	for _, id := range sm.Shards() {
		if !slices.ContainsFunc(m.Shards, func(s ShardInfo) bool { return s.Shard == id }) {
			return bad("shard %d owns slots but has no section", id)
		}
	}
	if got == nil {
		return nil
	}
	if len(got) != len(m.Shards) {
		return bad("%d shards, the file has %d sections", len(m.Shards), len(got))
	}
	for i, s := range m.Shards {
		g := got[i]
		g.Incarnation, g.StartsEmpty = s.Incarnation, s.StartsEmpty // not in the section
		if s != g {
			return bad("shard %d: %+v, its section: %+v", s.Shard, s, got[i])
		}
	}
	return nil
}
