package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/swarmkv/swarmkv/client"
)

// TestAssetsStore runs the typed asset catalogue (seed 002) against a
// 3-node cluster and reads what it wrote through the RESP front.
func TestAssetsStore(t *testing.T) {
	tc := redisCluster(t, 3, 4)
	ctx := context.Background()
	assets := tc.client().Assets()
	rdb := redisClient(t, tc, 1, 2)

	long := strings.Repeat("描", 150)
	g := &client.Asset{ID: "google_search", Version: "1.2.0", Category: "tool", Name: "Google 搜索",
		Description: long, ConfigSchema: `[{"name":"query"}]`, AgentSpecs: `{"function_name":"google_search"}`,
		Runtime: `{"language":"python"}`, GithubPath: "tools/search/google.yaml", GithubSHA: "sha1",
		CreatedAt: 1704067200, UpdatedAt: 1704153600}
	if changed, err := assets.Upsert(ctx, g); err != nil || !changed {
		t.Fatalf("first upsert: %v %v", changed, err)
	}
	if changed, err := assets.Upsert(ctx, g); err != nil || changed {
		t.Fatalf("upsert with the same github_sha: changed=%v err=%v, want unchanged", changed, err)
	}
	// The seed's layout, through Redis.
	h := must(rdb.HGetAll(ctx, "asset:metadata:google_search").Result())
	if len(h) != 12 || h["github_sha"] != "sha1" || h["created_at"] != "1704067200" || h["category"] != "tool" {
		t.Fatalf("metadata hash = %v", h)
	}
	eq(t, "in category tool", must(rdb.SIsMember(ctx, "asset:category:tool", "google_search").Result()), true)
	idx := must(rdb.HGet(ctx, "asset:index", "google_search").Result())
	want := `{"id":"google_search","name":"Google 搜索","category":"tool","version":"1.2.0","description":"` + strings.Repeat("描", 100) + `"}`
	eq(t, "index entry", idx, want)
	eqs(t, "changed", must(rdb.LRange(ctx, "asset:sync:changed", 0, -1).Result()), []string{"google_search"})

	// A new sha and category: the id moves between category sets,
	// created_at stays.
	g2 := *g
	g2.GithubSHA, g2.Category, g2.CreatedAt, g2.UpdatedAt = "sha2", "skill", 1, 1704999999
	if changed, err := assets.Upsert(ctx, &g2); err != nil || !changed {
		t.Fatalf("second upsert: %v %v", changed, err)
	}
	got := must(assets.Get(ctx, "google_search"))
	if got.Category != "skill" || got.CreatedAt != 1704067200 || got.UpdatedAt != 1704999999 || got.Description != long {
		t.Fatalf("Get = %+v", got)
	}
	eqs(t, "tool", must(assets.ListByCategory(ctx, "tool")), []string{})
	eqs(t, "skill", must(assets.ListByCategory(ctx, "skill")), []string{"google_search"})
	must(assets.Upsert(ctx, &client.Asset{ID: "summarizer", Category: "prompt", Name: "文本总结", GithubSHA: "s"}))
	idxs := must(assets.ListIndex(ctx))
	if len(idxs) != 2 || idxs[0].ID != "google_search" || idxs[1].ID != "summarizer" || idxs[0].Category != "skill" {
		t.Fatalf("ListIndex = %+v", idxs)
	}
	eqs(t, "recent", must(assets.RecentChanges(ctx, 2)), []string{"google_search", "summarizer"})
	if err := assets.TrimChanges(ctx, 1); err != nil {
		t.Fatal(err)
	}
	eqs(t, "after trim", must(rdb.LRange(ctx, "asset:sync:changed", 0, -1).Result()), []string{"summarizer"})

	// Sync state.
	st := &client.SyncState{LastSyncTime: 1704153600, LastCommitSHA: "abc", SyncedCount: 42, SyncStatus: "idle"}
	if err := assets.SetSyncState(ctx, st); err != nil {
		t.Fatal(err)
	}
	eq(t, "sync state", *must(assets.SyncState(ctx)), *st)
	eq(t, "last_commit_sha via redis", must(rdb.HGet(ctx, "asset:sync:state", "last_commit_sha").Result()), "abc")

	// Delete removes it everywhere.
	eq(t, "delete", must(assets.Delete(ctx, "google_search")), true)
	eq(t, "delete again", must(assets.Delete(ctx, "google_search")), false)
	if _, err := assets.Get(ctx, "google_search"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("Get after delete: %v", err)
	}
	eq(t, "metadata exists", must(rdb.Exists(ctx, "asset:metadata:google_search").Result()), int64(0))
	eq(t, "in skill", must(rdb.SIsMember(ctx, "asset:category:skill", "google_search").Result()), false)
	eq(t, "in index", must(rdb.HExists(ctx, "asset:index", "google_search").Result()), false)

	// Bad input changes nothing.
	for _, bad := range []*client.Asset{
		{ID: "", Category: "tool", GithubSHA: "s"},
		{ID: "x", Category: "widget", GithubSHA: "s"},
		{ID: "x", Category: "tool"},
		{ID: "x", Category: "tool", GithubSHA: "s", Runtime: "{not json"},
	} {
		if _, err := assets.Upsert(ctx, bad); !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("Upsert(%+v) = %v, want ErrInvalidArgument", bad, err)
		}
	}
	if err := assets.SetSyncState(ctx, &client.SyncState{SyncStatus: "weird"}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("SetSyncState(weird) = %v", err)
	}
	// A seed key of another type is a Redis error, not a panic.
	must(rdb.Set(ctx, "asset:index", "oops", 0).Result())
	if _, err := assets.ListIndex(ctx); !errors.Is(err, client.ErrRedis) {
		t.Errorf("ListIndex over a string: %v, want ErrRedis", err)
	}
}
