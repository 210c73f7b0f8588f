package api

import (
	"bytes"
	"testing"

	"github.com/swarmkv/swarmkv/keys"
)

// FuzzCursorStart: a listing's page never starts outside the listing nor
// at or before its cursor.
func FuzzCursorStart(f *testing.F) {
	f.Add([]byte{keys.TablePools}, []byte{keys.TablePools, 'a'})
	f.Add([]byte{keys.TableAgents, 1, 2}, []byte{keys.TableAgents, 1})
	f.Add([]byte{1}, []byte{})
	f.Add([]byte{1}, bytes.Repeat([]byte{1}, 600))
	f.Fuzz(func(t *testing.T, prefix, cursor []byte) {
		if len(prefix) == 0 {
			return
		}
		start, err := cursorStart(prefix, cursor)
		if err != nil {
			if len(cursor) <= maxCursorLen && bytes.HasPrefix(cursor, prefix) {
				t.Fatalf("cursor %x of listing %x refused: %v", cursor, prefix, err)
			}
			return
		}
		if !bytes.HasPrefix(start, prefix) {
			t.Fatalf("start %x outside listing %x", start, prefix)
		}
		if len(cursor) > 0 && bytes.Compare(start, cursor) <= 0 {
			t.Fatalf("start %x not after cursor %x", start, cursor)
		}
	})
}
