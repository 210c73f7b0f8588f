package api

import (
	"fmt"
	"strings"
	"testing"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/fsm"
)

// TestRedisEntryBounds: the internal Redis service (the Go client, other
// nodes' fronts) applies the same bounds to what one entry carries.
func TestRedisEntryBounds(t *testing.T) {
	cfg := cluster.Config{ID: "n1", DataDir: "x", RedisMaxMultiCommands: 3}.WithDefaults()
	set := func(v string) fsm.RedisArgv { return fsm.RedisArgv{[]byte("SET"), []byte("k"), []byte(v)} }
	big := strings.Repeat("v", cfg.Limits.MaxValueSize)
	for _, tt := range []struct {
		req  RedisRequest
		want string
	}{
		{RedisRequest{Multi: true, Cmds: []fsm.RedisArgv{set("a"), set("b"), set("c"), set("d")}}, "ERR swarmkv: transaction too long (more than 3 commands)"},
		{RedisRequest{Multi: true, Cmds: []fsm.RedisArgv{set(big), set(big), set(big)}}, fmt.Sprintf("ERR swarmkv: transaction too big (more than %d bytes)", cfg.RedisMaxMultiBytes)},
		{RedisRequest{Cmds: []fsm.RedisArgv{{[]byte("MSET"), []byte("a"), []byte(big), []byte("b"), []byte(big), []byte("c"), []byte(big)}}},
			fmt.Sprintf("ERR swarmkv: command too big (more than %d bytes)", cfg.RedisMaxCommandBytes)},
	} {
		v := CheckRedis(&cfg, nil, &tt.req)
		if v == nil || v.String() != tt.want {
			t.Errorf("CheckRedis: %v, want %q", v, tt.want)
		}
	}
}
