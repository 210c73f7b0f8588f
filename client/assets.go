package client

// Assets is the asset catalogue of seed 002 (a Redis key spec), stored in
// exactly the seed's keys, so that Redis clients of the RESP front read and
// write the same data:
//
//	asset:metadata:{id}   hash: id, version, category, name, description,
//	                      config_schema, agent_specs, runtime (JSON text),
//	                      github_path, github_sha, created_at, updated_at
//	asset:category:{cat}  set of asset ids (cat: tool, prompt, skill)
//	asset:index           hash: id -> {"id","name","category","version","description"}
//	                      (JSON, description cut to 100 characters)
//	asset:sync:state      hash: last_sync_time, last_commit_sha, synced_count, sync_status
//	asset:sync:changed    list of changed asset ids, oldest first
//
//	assets := c.Assets()
//	changed, err := assets.Upsert(ctx, &client.Asset{ID: "google_search", Category: "tool",
//		Name: "Google 搜索", Version: "1.2.0", GithubSHA: sha, ...})
//	a, err := assets.Get(ctx, "google_search")
//	if errors.Is(err, client.ErrNotFound) { ... }
//	ids, err := assets.ListByCategory(ctx, "tool")
//	recent, err := assets.RecentChanges(ctx, 10)
//
// Every asset:* key routes by the namespace "asset" (keys.RedisRoutingKey),
// so they all live in one shard and each write below is one MULTI/EXEC
// block: one Raft command, applied whole or not at all. Upsert and Delete
// WATCH the asset's metadata hash and retry when it changed between their
// read and their write (optimistic concurrency, as the seed's §5.2 reads
// github_sha before writing).
//
// Errors: ErrInvalidArgument for bad input (nothing sent), ErrNotFound,
// ErrRedis for a Redis error reply (a seed key holding another type),
// ErrOutcomeUnknown when a write's leader was lost mid-way, and the
// client's usual ErrUnavailable.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/resp"
	"github.com/swarmkv/swarmkv/shard"
)

// The seed's keys.
const (
	AssetIndexKey       = "asset:index"
	AssetSyncStateKey   = "asset:sync:state"
	AssetSyncChangedKey = "asset:sync:changed"
)

// AssetMetadataKey and AssetCategoryKey return the per-asset and
// per-category keys.
func AssetMetadataKey(id string) string       { return "asset:metadata:" + id }
func AssetCategoryKey(category string) string { return "asset:category:" + category }

// AssetCategories are the seed's categories.
var AssetCategories = []string{"tool", "prompt", "skill"}

// MaxIndexDescription is the length, in characters, of the description in
// an asset:index summary.
const MaxIndexDescription = 100

// Asset is one asset:metadata:{id} hash. ConfigSchema, AgentSpecs and
// Runtime are JSON text ("" when absent); times are Unix seconds.
type Asset struct {
	ID           string
	Version      string // semver, e.g. "1.0.0"
	Category     string // tool, prompt or skill
	Name         string
	Description  string
	ConfigSchema string
	AgentSpecs   string
	Runtime      string
	GithubPath   string
	GithubSHA    string
	CreatedAt    int64
	UpdatedAt    int64
}

// AssetSummary is one asset:index entry.
type AssetSummary struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Category    string `json:"category"`
	Version     string `json:"version"`
	Description string `json:"description"`
}

// SyncState is the asset:sync:state hash.
type SyncState struct {
	LastSyncTime  int64  // Unix seconds
	LastCommitSHA string // the branch head synced last
	SyncedCount   int64
	SyncStatus    string // idle, syncing or failed
}

// Assets is the asset catalogue store. Safe for concurrent use.
type Assets struct{ c *Client }

// Assets returns the asset catalogue store of the cluster.
func (c *Client) Assets() *Assets { return &Assets{c: c} }

// maxUpsertAttempts bounds the optimistic retries of Upsert and Delete.
const maxUpsertAttempts = 16

func (a *Assets) shard() shard.ID { return a.c.RedisShard(AssetIndexKey) }

// validate checks an asset before it is written.
func (x *Asset) validate() error {
	bad := func(f string, args ...any) error {
		return fmt.Errorf("%w: asset: %s", ErrInvalidArgument, fmt.Sprintf(f, args...))
	}
	switch {
	case x.ID == "" || len(AssetMetadataKey(x.ID)) > keys.MaxRedisKeyLen || len(x.ID) > keys.MaxRedisFieldLen:
		return bad("id must be 1..%d bytes", keys.MaxRedisFieldLen)
	case !slices.Contains(AssetCategories, x.Category):
		return bad("category %q: want tool, prompt or skill", x.Category)
	case x.GithubSHA == "":
		return bad("github_sha is required (it decides whether an upsert changes anything)")
	}
	for name, v := range map[string]string{"id": x.ID, "version": x.Version, "name": x.Name, "description": x.Description,
		"github_path": x.GithubPath, "github_sha": x.GithubSHA} {
		if !utf8.ValidString(v) {
			return bad("%s is not UTF-8", name)
		}
	}
	for name, v := range map[string]string{"config_schema": x.ConfigSchema, "agent_specs": x.AgentSpecs, "runtime": x.Runtime} {
		if v != "" && !json.Valid([]byte(v)) {
			return bad("%s is not JSON", name)
		}
	}
	return nil
}

// Summary returns the asset's asset:index entry.
func (x *Asset) Summary() AssetSummary {
	d := x.Description
	if utf8.RuneCountInString(d) > MaxIndexDescription {
		d = string([]rune(d)[:MaxIndexDescription])
	}
	return AssetSummary{ID: x.ID, Name: x.Name, Category: x.Category, Version: x.Version, Description: d}
}

func summaryJSON(s AssetSummary) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // strings only: never fails
	return string(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}

// Upsert writes the asset unless its stored github_sha equals x.GithubSHA
// (then it writes nothing and returns false): in one MULTI/EXEC block, the
// metadata hash (created_at kept from the stored asset; x.CreatedAt, or
// now, for a new one; updated_at = x.UpdatedAt, or now), the move to the
// new category set when the category changed, the asset:index summary and
// an append of the id to asset:sync:changed.
func (a *Assets) Upsert(ctx context.Context, x *Asset) (changed bool, err error) {
	if err := x.validate(); err != nil {
		return false, err
	}
	id, mk := a.shard(), AssetMetadataKey(x.ID)
	for range maxUpsertAttempts {
		vers, err := a.c.RedisVersions(ctx, id, mk)
		if err != nil {
			return false, err
		}
		cur, err := a.exec1(ctx, "HMGET", mk, "github_sha", "category", "created_at")
		if err != nil {
			return false, err
		}
		exists := vers[0] != 0
		if exists && cur.Elems[0].Kind == resp.KindBulk && cur.Elems[0].String() == x.GithubSHA {
			return false, nil
		}
		now := time.Now().Unix()
		created, updated := x.CreatedAt, x.UpdatedAt
		if created == 0 {
			created = now
		}
		if exists && cur.Elems[2].Kind == resp.KindBulk {
			if c, err := strconv.ParseInt(cur.Elems[2].String(), 10, 64); err == nil {
				created = c
			}
		}
		if updated == 0 {
			updated = now
		}
		var cmds [][]string
		if old := cur.Elems[1]; exists && old.Kind == resp.KindBulk && old.String() != x.Category {
			cmds = append(cmds, []string{"SREM", AssetCategoryKey(old.String()), x.ID})
		}
		cmds = append(cmds,
			[]string{"HSET", mk, "id", x.ID, "version", x.Version, "category", x.Category, "name", x.Name,
				"description", x.Description, "config_schema", x.ConfigSchema, "agent_specs", x.AgentSpecs,
				"runtime", x.Runtime, "github_path", x.GithubPath, "github_sha", x.GithubSHA,
				"created_at", strconv.FormatInt(created, 10), "updated_at", strconv.FormatInt(updated, 10)},
			[]string{"SADD", AssetCategoryKey(x.Category), x.ID},
			[]string{"HSET", AssetIndexKey, x.ID, summaryJSON(x.Summary())},
			[]string{"RPUSH", AssetSyncChangedKey, x.ID},
		)
		ok, err := a.multi(ctx, []RedisWatch{{Key: []byte(mk), Version: vers[0]}}, cmds...)
		if err != nil || ok {
			return ok, err
		}
		// The asset changed since we read it: read again.
	}
	return false, fmt.Errorf("%w: asset %q kept changing during %d attempts", ErrUnavailable, x.ID, maxUpsertAttempts)
}

// exec1 runs one command and turns an error reply into an error.
func (a *Assets) exec1(ctx context.Context, args ...string) (resp.Value, error) {
	v, err := a.c.RedisExec(ctx, a.shard(), false, nil, args)
	if err == nil && v.IsError() {
		err = replyError(v)
	}
	return v, err
}

// multi runs a block; ok is false when a watched key changed.
func (a *Assets) multi(ctx context.Context, watches []RedisWatch, cmds ...[]string) (ok bool, err error) {
	v, err := a.c.RedisExec(ctx, a.shard(), true, watches, cmds...)
	switch {
	case err != nil:
		return false, err
	case v.Kind == resp.KindNullArray:
		return false, nil
	case v.IsError():
		return false, replyError(v)
	}
	for _, r := range v.Elems {
		if r.IsError() {
			return false, replyError(r)
		}
	}
	return true, nil
}

// Get returns the asset; ErrNotFound if absent.
func (a *Assets) Get(ctx context.Context, id string) (*Asset, error) {
	v, err := a.exec1(ctx, "HGETALL", AssetMetadataKey(id))
	if err != nil {
		return nil, err
	}
	if len(v.Elems) == 0 {
		return nil, fmt.Errorf("%w: asset %q", ErrNotFound, id)
	}
	f := map[string]string{}
	for i := 0; i+1 < len(v.Elems); i += 2 {
		f[v.Elems[i].String()] = v.Elems[i+1].String()
	}
	num := func(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }
	return &Asset{ID: f["id"], Version: f["version"], Category: f["category"], Name: f["name"],
		Description: f["description"], ConfigSchema: f["config_schema"], AgentSpecs: f["agent_specs"],
		Runtime: f["runtime"], GithubPath: f["github_path"], GithubSHA: f["github_sha"],
		CreatedAt: num(f["created_at"]), UpdatedAt: num(f["updated_at"])}, nil
}

// ListByCategory returns the ids in asset:category:{category}, sorted.
func (a *Assets) ListByCategory(ctx context.Context, category string) ([]string, error) {
	v, err := a.exec1(ctx, "SMEMBERS", AssetCategoryKey(category))
	if err != nil {
		return nil, err
	}
	out := make([]string, len(v.Elems))
	for i, e := range v.Elems {
		out[i] = e.String()
	}
	slices.Sort(out)
	return out, nil
}

// ListIndex returns every asset:index summary, by id. An entry that is not
// the seed's JSON is an ErrRedis error.
func (a *Assets) ListIndex(ctx context.Context) ([]AssetSummary, error) {
	v, err := a.exec1(ctx, "HGETALL", AssetIndexKey)
	if err != nil {
		return nil, err
	}
	var out []AssetSummary
	for i := 0; i+1 < len(v.Elems); i += 2 {
		var s AssetSummary
		if err := json.Unmarshal(v.Elems[i+1].Str, &s); err != nil {
			return nil, fmt.Errorf("%w: asset:index entry %q: %v", ErrRedis, v.Elems[i].Str, err)
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(x, y AssetSummary) int { return cmp.Compare(x.ID, y.ID) })
	return out, nil
}

// Delete removes the asset everywhere it is listed: its metadata hash, its
// id in every category set and its asset:index entry, in one block, and
// appends the id to asset:sync:changed (a deletion is a change for
// incremental sync). It returns false, and writes nothing, when the asset
// does not exist.
func (a *Assets) Delete(ctx context.Context, id string) (bool, error) {
	if id == "" {
		return false, fmt.Errorf("%w: asset id is empty", ErrInvalidArgument)
	}
	mk := AssetMetadataKey(id)
	for range maxUpsertAttempts {
		vers, err := a.c.RedisVersions(ctx, a.shard(), mk)
		if err != nil {
			return false, err
		}
		if vers[0] == 0 {
			return false, nil
		}
		cmds := [][]string{{"DEL", mk}, {"HDEL", AssetIndexKey, id}, {"RPUSH", AssetSyncChangedKey, id}}
		for _, c := range AssetCategories {
			cmds = append(cmds, []string{"SREM", AssetCategoryKey(c), id})
		}
		ok, err := a.multi(ctx, []RedisWatch{{Key: []byte(mk), Version: vers[0]}}, cmds...)
		if err != nil || ok {
			return ok, err
		}
	}
	return false, fmt.Errorf("%w: asset %q kept changing during %d attempts", ErrUnavailable, id, maxUpsertAttempts)
}

// SyncState reads asset:sync:state; a missing hash is the zero state.
func (a *Assets) SyncState(ctx context.Context) (*SyncState, error) {
	v, err := a.exec1(ctx, "HGETALL", AssetSyncStateKey)
	if err != nil {
		return nil, err
	}
	f := map[string]string{}
	for i := 0; i+1 < len(v.Elems); i += 2 {
		f[v.Elems[i].String()] = v.Elems[i+1].String()
	}
	st := &SyncState{LastCommitSHA: f["last_commit_sha"], SyncStatus: f["sync_status"]}
	st.LastSyncTime, _ = strconv.ParseInt(f["last_sync_time"], 10, 64)
	st.SyncedCount, _ = strconv.ParseInt(f["synced_count"], 10, 64)
	return st, nil
}

// SetSyncState writes all four fields of asset:sync:state.
func (a *Assets) SetSyncState(ctx context.Context, st *SyncState) error {
	switch st.SyncStatus {
	case "idle", "syncing", "failed":
	default:
		return fmt.Errorf("%w: sync_status %q: want idle, syncing or failed", ErrInvalidArgument, st.SyncStatus)
	}
	_, err := a.exec1(ctx, "HSET", AssetSyncStateKey,
		"last_sync_time", strconv.FormatInt(st.LastSyncTime, 10), "last_commit_sha", st.LastCommitSHA,
		"synced_count", strconv.FormatInt(st.SyncedCount, 10), "sync_status", st.SyncStatus)
	return err
}

// RecentChanges returns the last n ids of asset:sync:changed, oldest
// first (LRANGE asset:sync:changed -n -1).
func (a *Assets) RecentChanges(ctx context.Context, n int) ([]string, error) {
	if n <= 0 {
		return nil, fmt.Errorf("%w: n must be positive", ErrInvalidArgument)
	}
	v, err := a.exec1(ctx, "LRANGE", AssetSyncChangedKey, strconv.Itoa(-n), "-1")
	if err != nil {
		return nil, err
	}
	out := make([]string, len(v.Elems))
	for i, e := range v.Elems {
		out[i] = e.String()
	}
	return out, nil
}

// TrimChanges keeps the last keep ids of asset:sync:changed (LTRIM
// asset:sync:changed -keep -1; the seed keeps 1000).
func (a *Assets) TrimChanges(ctx context.Context, keep int) error {
	if keep <= 0 {
		return fmt.Errorf("%w: keep must be positive", ErrInvalidArgument)
	}
	_, err := a.exec1(ctx, "LTRIM", AssetSyncChangedKey, strconv.Itoa(-keep), "-1")
	return err
}
