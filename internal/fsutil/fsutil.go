// Package fsutil holds the file helpers of a node's data dir: owner-only
// directories (PrivateDir) and atomic, durable, owner-only file writes
// (WriteFileDurable). Package cluster writes its state files with them and
// makes its data dir private; package cluster/replica makes each replica's
// dir private. Standard library only.
package fsutil

import (
	"os"
	"path/filepath"
)

// PrivateDir creates dir (and missing parents) owner-only (0700), and
// makes an existing dir owner-only. A data dir holds the cluster state, the
// Raft logs, snapshots and Pebble stores, whose files Pebble and raft create
// with their own modes (0644 under the usual umask; `swarmnode serve` sets
// umask 077): behind a 0700 dir no other user reaches them.
func PrivateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.Chmod(dir, 0o700)
}

// WriteFileDurable writes dir/name (mode 0600) atomically and durably:
// temp file (dir/name.tmp), fsync, rename, fsync of the directory. A
// reader sees the old content or the new, never a part.
func WriteFileDurable(dir, name string, b []byte) error {
	tmp := filepath.Join(dir, name+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if err := f.Chmod(0o600); err != nil { // a stale temp file keeps its mode
		f.Close()
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// CreateExclusive writes b to a new file path with mode perm, synced; it
// refuses a path that exists (an error wrapping os.ErrExist) and removes
// what it created when a write fails. For files made once and never
// replaced, such as a secret or a key file.
func CreateExclusive(path string, b []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}
