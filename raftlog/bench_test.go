package raftlog

import (
	"bytes"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// BenchmarkStoreLogs appends one 256-byte entry per StoreLogs from N
// concurrent groups (one goroutine each, as N Raft leaders on one node),
// with raft-boltdb (one file per group, as before) and with this package
// (one Pebble for all). ns/op is wall time per append over all groups.
//
//	go test -run '^$' -bench StoreLogs -count 6 ./raftlog/ | tee new.txt
//	benchstat -col /store new.txt
func BenchmarkStoreLogs(b *testing.B) {
	for _, groups := range []int{1, 8, 24} {
		for _, store := range []string{"bolt", "pebble"} {
			b.Run(fmt.Sprintf("store=%s/groups=%d", store, groups), func(b *testing.B) {
				logs := make([]raft.LogStore, groups)
				dir := b.TempDir()
				switch store {
				case "bolt":
					for i := range logs {
						bs, err := raftboltdb.NewBoltStore(filepath.Join(dir, fmt.Sprintf("%d.db", i)))
						if err != nil {
							b.Fatal(err)
						}
						defer bs.Close()
						logs[i] = bs
					}
				case "pebble":
					s := openTest(b, dir, nil)
					for i := range logs {
						logs[i] = group(b, s, uint32(i))
					}
				}
				data := bytes.Repeat([]byte{'v'}, 256)
				var n atomic.Int64
				var wg sync.WaitGroup
				b.ReportAllocs()
				b.ResetTimer()
				start := time.Now()
				for _, ls := range logs {
					wg.Go(func() {
						l := &raft.Log{Type: raft.LogCommand, Term: 1, Data: data}
						for idx := uint64(1); n.Add(1) <= int64(b.N); idx++ {
							l.Index, l.AppendedAt = idx, time.Now()
							if err := ls.StoreLogs([]*raft.Log{l}); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "appends/s")
			})
		}
	}
}
