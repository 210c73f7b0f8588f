package backup

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Seed restores the backup file from into dataDir, for a new cluster: it
// reads and checks all of from, then copies it, checking it again as it
// goes, to dataDir/SeedFile (written as a temporary file, synced, then
// renamed). dataDir must be empty or absent (then it is made, owner-only, in
// a parent that exists). A
// node's first start on dataDir consumes the seed (package cluster): it
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
