// Command backupdiff compares the records of two swarmkv backup files
// (package backup), shard by shard: the check scripts/backup-restore.sh
// runs between a backup and a backup of the cluster restored from it.
// Both files are checked whole as they are read, but for their
// signatures (it compares records, it does not vouch for a file: verify
// does); their manifests (cluster ids, indexes) may differ, their records
// should not. It prints, per shard
// and in all, the records compared, those that differ and those only one
// file holds, and exits 1 on any difference.
//
//	go run ./scripts/backupdiff A.swkvbak B.swkvbak
package main

import (
	"bytes"
	"fmt"
	"io"
	"os"

	"github.com/swarmkv/swarmkv/backup"
	"github.com/swarmkv/swarmkv/shard"
)

type counts struct{ compared, differ, onlyA, onlyB int }

func (c *counts) add(o counts) {
	c.compared += o.compared
	c.differ += o.differ
	c.onlyA += o.onlyA
	c.onlyB += o.onlyB
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: backupdiff A B")
		os.Exit(2)
	}
	total, err := diff(os.Args[1], os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "backupdiff:", err)
		os.Exit(1)
	}
	fmt.Printf("total: %d records compared, %d differ, %d only in A, %d only in B\n", total.compared, total.differ, total.onlyA, total.onlyB)
	if total.differ+total.onlyA+total.onlyB > 0 {
		os.Exit(1)
	}
}

// open returns a reader of file and its sections by shard, read in order.
func open(file string) (*backup.Reader, func() error, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, nil, err
	}
	r, err := backup.NewReader(f, backup.ReadOptions{SkipSignature: true, TrustUnsigned: true})
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", file, err)
	}
	return r, f.Close, nil
}

func diff(a, b string) (counts, error) {
	var total counts
	ra, closeA, err := open(a)
	if err != nil {
		return total, err
	}
	defer closeA()
	rb, closeB, err := open(b)
	if err != nil {
		return total, err
	}
	defer closeB()
	sa, ea := ra.Next()
	sb, eb := rb.Next()
	for {
		for _, e := range []error{ea, eb} {
			if e != nil && e != io.EOF {
				return total, e
			}
		}
		if ea == io.EOF && eb == io.EOF {
			return total, nil
		}
		var c counts
		var id shard.ID
		switch {
		case eb == io.EOF || (ea == nil && sa.Shard < sb.Shard):
			id = sa.Shard
			c.onlyA, err = drain(sa)
			sa, ea = ra.Next()
		case ea == io.EOF || sb.Shard < sa.Shard:
			id = sb.Shard
			c.onlyB, err = drain(sb)
			sb, eb = rb.Next()
		default:
			id = sa.Shard
			c, err = compare(sa, sb)
			sa, ea = ra.Next()
			sb, eb = rb.Next()
		}
		if err != nil {
			return total, fmt.Errorf("shard %d: %w", id, err)
		}
		fmt.Printf("shard %d: %d records compared, %d differ, %d only in A, %d only in B\n", id, c.compared, c.differ, c.onlyA, c.onlyB)
		total.add(c)
	}
}

func drain(s *backup.Section) (int, error) {
	n := 0
	for {
		if _, _, err := s.Next(); err == io.EOF {
			return n, nil
		} else if err != nil {
			return n, err
		}
		n++
	}
}

// compare merges two sections' records (both in key order).
func compare(a, b *backup.Section) (counts, error) {
	var c counts
	next := func(s *backup.Section) (k, v []byte, done bool, err error) {
		k, v, err = s.Next()
		if err == io.EOF {
			return nil, nil, true, nil
		}
		return bytes.Clone(k), bytes.Clone(v), false, err
	}
	ka, va, da, err := next(a)
	if err != nil {
		return c, err
	}
	kb, vb, db, err := next(b)
	if err != nil {
		return c, err
	}
	for !da || !db {
		switch cmp := bytes.Compare(ka, kb); {
		case db || (!da && cmp < 0):
			c.onlyA++
			ka, va, da, err = next(a)
		case da || cmp > 0:
			c.onlyB++
			kb, vb, db, err = next(b)
		default:
			c.compared++
			if !bytes.Equal(va, vb) {
				c.differ++
			}
			if ka, va, da, err = next(a); err == nil {
				kb, vb, db, err = next(b)
			}
		}
		if err != nil {
			return c, err
		}
	}
	return c, nil
}
