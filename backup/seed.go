package backup

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/swarmkv/swarmkv/cluster/seed"
)

// Seed restores the backup file from into dataDir, for a new cluster: it
// reads and checks all of from, then copies it, checking it again as it
// goes, to dataDir/SeedFile (written as a temporary file, synced, then
// renamed). dataDir must be empty or absent (then it is made, owner-only, in
// a parent that exists). A
// node's first start on dataDir consumes the seed (Seeds, cluster.Config.Seed): it
// starts a new cluster alone, with the backup's shard map, data and
// tokens, which other nodes then join.
//
// The file's signature is checked as o says (the node that consumes the
// seed checks everything again but the signature: it holds no backup
// key, and trusts what is in its owner-only data dir).
//
// A dataDir that holds anything is refused (ErrNotEmpty), as is a file
// that is not a whole, intact backup (ErrCorrupt, ErrTruncated), holds a
// token token create would refuse (ErrBadToken), is unsigned
// (ErrUnsigned) or wrongly signed (ErrSignature), or of a newer format
// (ErrNewerFormat); then, as on any error, dataDir is left as it was
// (absent if it was).
func Seed(from, dataDir string, o ReadOptions) (_ *Manifest, err error) {
	created, err := checkEmpty(dataDir)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(from)
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	defer f.Close()
	m, err := Verify(f, o)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", from, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	if created {
		if err := os.Mkdir(dataDir, 0o700); err != nil {
			return nil, fmt.Errorf("backup: data dir: %w", err)
		}
	}
	tmp := filepath.Join(dataDir, SeedFile+".tmp")
	defer func() {
		if err != nil {
			os.Remove(tmp)
			if created {
				os.Remove(dataDir)
			}
		}
	}()
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	m2, err := Verify(io.TeeReader(f, out), o)
	if err == nil && m2.Created != m.Created {
		err = fmt.Errorf("%w: %s changed while it was copied", ErrCorrupt, from)
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("backup: copy %s into %s: %w", from, dataDir, err)
	}
	if err := os.Rename(tmp, filepath.Join(dataDir, SeedFile)); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	if err := syncDir(dataDir); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	return m, nil
}

// checkEmpty refuses a dataDir that is not an empty directory; created
// is true when it does not exist (Seed makes it).
func checkEmpty(dataDir string) (created bool, err error) {
	fi, err := os.Stat(dataDir)
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("backup: data dir: %w", err)
	}
	if !fi.IsDir() {
		return false, fmt.Errorf("%w: %s is not a directory", ErrNotEmpty, dataDir)
	}
	ents, err := os.ReadDir(dataDir)
	if err != nil {
		return false, fmt.Errorf("backup: data dir: %w", err)
	}
	if len(ents) > 0 {
		more := ""
		if len(ents) > 1 {
			more = fmt.Sprintf(" and %d more entries", len(ents)-1)
		}
		return false, fmt.Errorf("%w: %s holds %s%s: restore seeds an empty data dir only",
			ErrNotEmpty, dataDir, ents[0].Name(), more)
	}
	return false, nil
}

// Seeds are the seeds Seed leaves in data dirs, as a node reads them at
// its first start: server sets cluster.Config.Seed to Seeds{}, so the
// node core gets a checked seed.Restore and reads no backup file.
type Seeds struct{}

// seedRead is how a node reads its seed: everything is checked again (the
// checksums, the records, every token against the rules of token create)
// but the signature, which swarmnode restore (Seed) checked with the
// operator's backup key before it wrote the seed into this owner-only
// data dir: the node holds no backup key, and whoever can write its data
// dir can write its cluster state as well.
var seedRead = ReadOptions{SkipSignature: true, TrustUnsigned: true}

// Open reads and checks all of dataDir's seed and returns it as a
// restore (nil, nil without one); its Read reads the file again, checking
// it as it goes. Errors name the file.
func (Seeds) Open(dataDir string) (*seed.Restore, error) {
	path := filepath.Join(dataDir, SeedFile)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err // names the path
	}
	defer f.Close()
	m, err := Verify(f, seedRead)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	smap, err := m.Map()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", path, ErrCorrupt, err)
	}
	r := &seed.Restore{Source: path, ClusterID: m.ClusterID, Created: m.Created, ReplicationFactor: m.ReplicationFactor,
		Map: smap, NextMoveID: m.NextMoveID, Policy: m.Policy, Tokens: m.Tokens}
	for _, s := range m.Shards {
		r.Shards = append(r.Shards, seed.Shard{ID: s.Shard, Incarnation: s.Incarnation, StartsEmpty: s.StartsEmpty,
			Index: s.Index, Records: s.Records})
	}
	r.Read = func(fn func(seed.Shard, func() ([]byte, []byte, error)) error) error { return readSeed(path, m, fn) }
	return r, nil
}

// readSeed reads the seed at path, whose manifest Open checked was m, and
// calls fn with each section.
func readSeed(path string, m *Manifest, fn func(seed.Shard, func() ([]byte, []byte, error)) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	br, err := NewReader(f, seedRead)
	if err != nil {
		return err
	}
	changed := fmt.Errorf("%w: the file changed since it was checked", ErrCorrupt)
	for i := 0; ; i++ {
		s, err := br.Next()
		if err == io.EOF {
			if got := br.Manifest(); i != len(m.Shards) || got == nil || got.ClusterID != m.ClusterID || !got.Created.Equal(m.Created) {
				return changed
			}
			return nil
		}
		if err != nil {
			return err
		}
		if i >= len(m.Shards) || m.Shards[i].Shard != s.Shard {
			return changed
		}
		info := m.Shards[i]
		if err := fn(seed.Shard{ID: s.Shard, Incarnation: info.Incarnation, StartsEmpty: info.StartsEmpty,
			Index: s.Index, Records: info.Records}, s.Next); err != nil {
			return err
		}
	}
}

// Remove deletes dataDir's seed, which the node consumed (it recorded the
// restored cluster's state); no seed is not an error.
func (Seeds) Remove(dataDir string) error {
	err := os.Remove(filepath.Join(dataDir, SeedFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
