// Command assets runs seed 002's sync flow with go-redis against swarmkv's
// Redis front: for each asset, compare github_sha (§5.2), write it with
// MULTI/EXEC under WATCH (§5.1), append to asset:sync:changed and trim it
// (§5.2 of the list), then record asset:sync:state.
//
//	go run ./examples/assets --addr 127.0.0.1:17104
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

type asset struct{ id, category, name, sha string }

func main() {
	addr := flag.String("addr", "127.0.0.1:7104", "Redis front address")
	flag.Parse()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: *addr})
	defer rdb.Close()

	batch := []asset{
		{"google_search", "tool", "Google 搜索", "abc123"},
		{"summarizer", "prompt", "文本总结", "def456"},
		{"google_search", "tool", "Google 搜索", "abc123"}, // unchanged: skipped
	}
	var changed []string
	for _, a := range batch {
		key := "asset:metadata:" + a.id
		err := rdb.Watch(ctx, func(tx *redis.Tx) error {
			cur, err := tx.HGet(ctx, key, "github_sha").Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
			if cur == a.sha {
				fmt.Printf("%s: github_sha unchanged, skipped\n", a.id)
				return nil
			}
			now := strconv.FormatInt(time.Now().Unix(), 10)
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.HSet(ctx, key, "id", a.id, "category", a.category, "name", a.name, "github_sha", a.sha, "updated_at", now)
				p.SAdd(ctx, "asset:category:"+a.category, a.id)
				p.HSet(ctx, "asset:index", a.id, fmt.Sprintf(`{"id":%q,"name":%q,"category":%q}`, a.id, a.name, a.category))
				return nil
			})
			if err == nil {
				changed = append(changed, a.id)
				fmt.Printf("%s: written (github_sha %s)\n", a.id, a.sha)
			}
			return err
		}, key)
		if err != nil {
			log.Fatalf("%s: %v", a.id, err) // redis.TxFailedErr: changed meanwhile; rerun
		}
	}
	if len(changed) > 0 {
		if err := rdb.RPush(ctx, "asset:sync:changed", toAny(changed)...).Err(); err != nil {
			log.Fatal(err)
		}
	}
	if err := rdb.LTrim(ctx, "asset:sync:changed", -1000, -1).Err(); err != nil {
		log.Fatal(err)
	}
	recent, err := rdb.LRange(ctx, "asset:sync:changed", -10, -1).Result()
	if err != nil {
		log.Fatal(err)
	}
	if err := rdb.HSet(ctx, "asset:sync:state", "last_sync_time", time.Now().Unix(), "last_commit_sha", "abc123",
		"synced_count", len(changed), "sync_status", "idle").Err(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("recent changes:", recent)
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}
