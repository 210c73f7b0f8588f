package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/shard"
)

// Source is a running cluster to back up: HTTPSource, the admin API of
// any member.
type Source interface {
	// State returns the committed cluster state, the tokens' secret
	// hashes included; refused (ErrMoveInProgress) while a split or merge
	// is in progress.
	State(ctx context.Context) (*placement.State, error)
	// Shard returns one section: shard id's state, streamed from its
	// leader at a committed index.
	Shard(ctx context.Context, id shard.ID) (io.ReadCloser, error)
}

// Options tune Save.
type Options struct {
	// Keys sign the file (their first key; required).
	Keys *Keys
	// Progress, if set, is called as each shard's bytes arrive (at most
	// every 256 KiB and at each shard's end).
	Progress func(Progress)
	// MaxRate bounds the bytes read per second (0: no bound), to spare a
	// loaded cluster.
	MaxRate int64
	// Now is the clock of the manifest's creation time (nil: time.Now).
	Now func() time.Time
}

// Progress is where a backup is.
type Progress struct {
	Shard        shard.ID
	Done, Shards int   // shards finished, shards in all
	Bytes        int64 // of the current shard so far
	Total        int64 // of the file so far
	ShardDone    bool  // the current shard is complete
}

// Save backs the cluster up into the file path: it writes path+".tmp"
// (which must not exist: another backup may be writing it), the header,
// every shard's section in ascending order (each checked as it arrives),
// then, if the cluster state still has the same shard map and no move was
// planned meanwhile, the manifest and the signature (o.Keys); it syncs the file, renames it to path
// (replacing a file there) and syncs the directory. On any error or
// cancellation it removes the temporary file and leaves path as it was.
func Save(ctx context.Context, src Source, path string, o Options) (_ *Manifest, err error) {
	if o.Keys == nil {
		return nil, fmt.Errorf("%w: no key to sign the backup with", ErrKeyFile)
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	st, err := src.State(ctx)
	if err != nil {
		return nil, err
	}
	if err := placement.CheckNoMoves(st); err != nil {
		return nil, err
	}
	m := ManifestOf(st, now())
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("backup: %s exists: another backup is writing it, or one was killed (remove it then)", tmp)
	}
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	w, err := NewWriter(f, o.Keys)
	if err != nil {
		return nil, fmt.Errorf("backup: write %s: %w", tmp, err)
	}
	var total int64
	limit := newRateLimit(o.MaxRate)
	for i, s := range m.Shards {
		p := Progress{Shard: s.Shard, Done: i, Shards: len(m.Shards), Total: total}
		if _, err := saveShard(ctx, src, w, &p, limit, o.Progress); err != nil {
			return nil, fmt.Errorf("backup: shard %d: %w", s.Shard, err)
		}
		total = p.Total
	}
	after, err := src.State(ctx)
	if err != nil {
		return nil, fmt.Errorf("backup: the cluster state after the shards: %w", err)
	}
	if err := sameShape(st, after); err != nil {
		return nil, err
	}
	if err := w.Finish(m); err != nil {
		return nil, fmt.Errorf("backup: write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("backup: sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("backup: close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("backup: sync the directory of %s: %w", path, err)
	}
	return m, nil
}

// saveShard copies one shard's section into w.
func saveShard(ctx context.Context, src Source, w *Writer, p *Progress, limit *rateLimit, progress func(Progress)) (ShardInfo, error) {
	rc, err := src.Shard(ctx, p.Shard)
	if err != nil {
		return ShardInfo{}, err
	}
	defer rc.Close()
	r := &countingReader{ctx: ctx, r: rc, limit: limit, fn: func(n int64) {
		p.Bytes += n
		p.Total += n
		if progress != nil && p.Bytes/(256<<10) != (p.Bytes-n)/(256<<10) {
			progress(*p)
		}
	}}
	info, err := w.CopySection(r)
	if errors.Is(err, ErrTruncated) {
		return ShardInfo{}, fmt.Errorf("the stream ended early, after %d bytes (did the node asked or the shard's leader stop?): %w", p.Bytes, err)
	}
	if err != nil {
		return ShardInfo{}, err
	}
	if info.Shard != p.Shard {
		return ShardInfo{}, fmt.Errorf("%w: asked for shard %d, got shard %d's section", ErrCorrupt, p.Shard, info.Shard)
	}
	if progress != nil {
		p.ShardDone = true
		progress(*p)
	}
	return info, nil
}

// sameShape fails unless after has the shard map, the groups and the
// next move id of before, and no move: then no slot moved, and no move
// ran, while the shards were copied.
func sameShape(before, after *placement.State) error {
	if err := placement.CheckNoMoves(after); err != nil {
		return fmt.Errorf("%w; retry the backup", err)
	}
	ids := func(st *placement.State) []shard.ID {
		var out []shard.ID
		for _, p := range st.Shards {
			out = append(out, p.Shard)
		}
		slices.Sort(out)
		return out
	}
	if after.ClusterID != before.ClusterID || after.MapVersion != before.MapVersion ||
		after.NextMoveID != before.NextMoveID || !slices.Equal(ids(before), ids(after)) {
		return fmt.Errorf("%w (map version %d then %d, next move id %d then %d): retry the backup",
			ErrMapChanged, before.MapVersion, after.MapVersion, before.NextMoveID, after.NextMoveID)
	}
	return nil
}

// countingReader counts, paces (MaxRate) and stops at ctx's end.
type countingReader struct {
	ctx   context.Context
	r     io.Reader
	limit *rateLimit
	fn    func(n int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	if c.limit != nil && len(p) > 64<<10 {
		p = p[:64<<10]
	}
	n, err := c.r.Read(p)
	if n > 0 {
		c.fn(int64(n))
		if werr := c.limit.wait(c.ctx, n); werr != nil {
			return n, werr
		}
	}
	return n, err
}

// rateLimit paces reads to at most rate bytes a second on average.
type rateLimit struct {
	rate  int64
	start time.Time
	bytes int64
}

func newRateLimit(rate int64) *rateLimit {
	if rate <= 0 {
		return nil
	}
	return &rateLimit{rate: rate, start: time.Now()}
}

func (l *rateLimit) wait(ctx context.Context, n int) error {
	if l == nil {
		return nil
	}
	l.bytes += int64(n)
	due := l.start.Add(time.Duration(float64(l.bytes) / float64(l.rate) * float64(time.Second)))
	d := time.Until(due)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// syncDir fsyncs a directory (a rename in it is durable after).
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
