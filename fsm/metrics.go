package fsm

// StorageMetrics is a summary of the replica's Pebble state for monitoring.
type StorageMetrics struct {
	DiskBytes         uint64 // on-disk size of the LSM and WAL
	MemTableBytes     uint64 // memtable memory in use
	L0Files           int64  // files in level 0 (write stalls grow with it)
	CompactionDebt    uint64 // estimated bytes compaction still has to write
	WALBytes          uint64 // live WAL size
	BlockCacheHits    int64
	BlockCacheMiss    int64
	ReadAmplification int
}

// Metrics reports the replica's storage metrics; ok is false once closed.
func (f *FSM) Metrics() (m StorageMetrics, ok bool) {
	if err := f.rlock(); err != nil {
		return m, false
	}
	defer f.mu.RUnlock()
	pm := f.db.Metrics()
	m.DiskBytes = pm.DiskSpaceUsage()
	m.MemTableBytes = pm.MemTable.Size
	m.L0Files = pm.Levels[0].TablesCount
	m.CompactionDebt = pm.Compact.EstimatedDebt
	m.WALBytes = pm.WAL.Size
	m.BlockCacheHits = pm.BlockCache.Hits
	m.BlockCacheMiss = pm.BlockCache.Misses
	m.ReadAmplification = pm.ReadAmp()
	return m, true
}

// DiskBytes is the disk space the replica's Pebble store uses (its LSM,
// WAL and other files: pebble.Metrics.DiskSpaceUsage); ok is false once
// closed. The automatic shard policy's size (cluster/shardmove/policy.go).
func (f *FSM) DiskBytes() (n uint64, ok bool) {
	if err := f.rlock(); err != nil {
		return 0, false
	}
	defer f.mu.RUnlock()
	return f.db.Metrics().DiskSpaceUsage(), true
}
