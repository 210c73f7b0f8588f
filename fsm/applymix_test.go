package fsm

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// mixCmds returns the commands of BenchmarkApplyMix's cycle: a realistic
// mix of the apply path's ops (kv puts and deletes, some attached to a
// lease, registry, billing and pool ops, a lease checkpoint, Redis writes,
// a noop and a small OpMulti), n of them. lease is a lease of routing key
// "rk" the setup granted. Every command is valid; applied again in a later
// pass of the cycle it takes the same path (upserts, idempotent retries,
// deletes of what the pass put).
func mixCmds(n int, lease uint64) []*Command {
	value := make([]byte, 128)
	out := make([]*Command, 0, n)
	for i := 0; len(out) < n; i++ {
		u, ac := i%16, i%16
		k := fmt.Sprintf("k%04d", i%512)
		now := int64(1000 + i)
		running := uint8(records.AgentRunning)
		closed := uint8(records.SessionClosed)
		pool := fmt.Sprintf("p%d", i%8)
		bot := fmt.Sprintf("bot%d", i%32)
		out = append(out,
			batchCmd(nil, Mutation{Kind: MutPut, Key: keys.KV([]byte(fmt.Sprintf("user-%d", u)), []byte(k)), Value: value}),
			batchCmd(nil, Mutation{Kind: MutPut, Key: keys.KV([]byte(fmt.Sprintf("user-%d", u)), []byte(k+"x")), Value: value}),
			batchCmd(nil, Mutation{Kind: MutDelete, Key: keys.KV([]byte(fmt.Sprintf("user-%d", u)), []byte(k+"x"))}),
			batchCmd(nil, kvPut("rk", k, "leased", lease)),
			putAgentCmd(agentRec(u, i%64, records.AgentPending)),
			&Command{Op: OpUpdateAgentStatus, UserID: ptr(uid(u)), AgentID: ptr(aid(i % 64)), Status: &running, Time: now},
			&Command{Op: OpAgentHeartbeat, UserID: ptr(uid(u)), AgentID: ptr(aid(i % 64)), Time: now},
			putSessionCmd(sessionRec(i%64, i%64, records.SessionActive, nil)),
			&Command{Op: OpUpdateSessionStatus, SessionID: ptr(sid(i % 64)), Status: &closed, Time: now},
			&Command{Op: OpPutUser, User: &records.UserRecord{UserID: uid(u), Email: "u@example.com", CreatedAt: 1, LastSeenAt: now}},
			addCreditsCmd(ac, 1+i%4096, 500, now),
			processUsageCmd(ac, i%4096, 8192+i%4096, 3, now),
			&Command{Op: OpPutUsageEvent, Event: usageEvent(ac, 20000+i%512)},
			&Command{Op: OpUpdatePool, Pool: poolRec(pool, "u0", records.VisibilityPublic), Actor: "u0", Time: now},
			&Command{Op: OpUpdateBot, Bot: botRec(bot, pool, "u0"), Actor: "u0", Time: now},
			&Command{Op: OpRunnerHeartbeat, Runner: &records.Runner{RunnerID: fmt.Sprintf("r%d", i%8), LastSeen: now}},
			checkpointCmd(1, LeaseCheckpoint{ID: lease, RemainingMs: 30000}),
			&Command{Op: OpRedis, Redis: &RedisTx{Cmds: []RedisArgv{argv("SET", "asset:"+k, "v")}}},
			&Command{Op: OpNoop},
			multiCmd(batchCmd(nil, Mutation{Kind: MutPut, Key: keys.KV([]byte("m"), []byte(k)), Value: value}),
				putAccountCmd(account(16+ac, 1<<40, 1<<40, 0))),
		)
	}
	return out[:n]
}

// BenchmarkApplyMix applies runs of 64 entries of a realistic mix of ops
// (mixCmds: decode, validate, slot check, apply, history record) to a
// replica that owns every slot: the apply path as a whole, for before and
// after comparisons of its dispatch. The replica's Pebble is on an
// in-memory filesystem: the commits' WAL writes to a disk other work
// shares made the figures of one run vary by a factor of two.
func BenchmarkApplyMix(b *testing.B) {
	r := &replica{t: b, f: mustOpen(b, testConfig(1, "/mix"), vfs.NewMem())}
	var setup []*Command
	for i := range 32 {
		setup = append(setup, putAccountCmd(account(i, 1<<50, 1<<50, 0)))
	}
	for i := range 8 {
		setup = append(setup, createCmd(poolRec(fmt.Sprintf("p%d", i), "u0", records.VisibilityPublic)))
	}
	for i := range 32 {
		setup = append(setup, regCmd(fmt.Sprintf("bot%d", i), fmt.Sprintf("p%d", i%8), "u0"))
	}
	for _, c := range setup {
		r.must(c)
	}
	lease := r.must(grantCmd("rk", 60000)).LeaseID
	cmds := mixCmds(4096, lease)
	data := make([][]byte, len(cmds))
	for i, c := range cmds {
		data[i] = mustEncode(b, c)
	}
	// A first pass puts every record in place, so that every pass the
	// benchmark times takes the same paths.
	index := uint64(len(r.logs))
	const run = 64
	logs := make([]*raft.Log, run)
	for i := range logs {
		logs[i] = &raft.Log{Type: raft.LogCommand, Term: 1}
	}
	pass := func(i int) {
		for j, l := range logs {
			index++
			l.Index = index
			l.Data = data[(i*run+j)%len(data)]
		}
		for _, res := range r.f.ApplyBatch(logs) {
			if rs, ok := res.(*Result); ok && rs.Err != nil {
				b.Fatalf("entry %d: %v", rs.Index, rs.Err)
			}
		}
	}
	for i := range len(data) / run {
		pass(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pass(i)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*run), "ns/entry")
}
