package fsm

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// Own holds the commands this node's replica proposed to Raft, by the
// entry bytes it proposed, so that its state machine applies those
// commands without decoding the entry it encoded itself. A leader's
// hashicorp/raft hands the state machine the very raft.Log of each
// proposal (its Data is the slice given to Raft.Apply), so the entry is
// found by the address of its bytes; an entry a replica applies from its
// log store (every follower's, and a leader's after a restart or a lost
// leadership) is not in Own and is decoded, as always.
//
// Skipping the decode must not change what is applied: the commands must
// be what DecodeCommand would return for the bytes (Add normalizes them as
// DecodeCommand does), and the state machine still validates them. A
// command that passes Validate decodes from its encoding to an equal
// command (TestOwnCommandsDecodeEqual, FuzzOwnCommandDecodesEqual).
type Own struct {
	mu    sync.Mutex
	m     map[*byte]ownEntry
	taken atomic.Uint64 // entries applied from their commands
}

type ownEntry struct {
	data []byte
	cmd  *Command   // the entry's command: a lone command or an OpMulti
	subs []*Command // for an OpMulti: its commands, as decoded from cmd.Multi
}

// Add records that data, about to be proposed, is EncodeCommand(cmd) and,
// when cmd is an OpMulti, that subs are the commands cmd.Multi encodes, in
// order. The caller gives up cmd and subs (Add normalizes them, and the
// state machine reads them while it applies) and calls Remove once the
// proposal's outcome is known. An OpMulti whose subs do not match its
// commands is not recorded (its entry is decoded).
func (o *Own) Add(data []byte, cmd *Command, subs []*Command) {
	if o == nil || len(data) == 0 || (cmd.Op == OpMulti) != (subs != nil) || len(subs) != len(cmd.Multi) {
		return
	}
	cmd.normalize()
	for _, s := range subs {
		s.normalize()
	}
	o.mu.Lock()
	if o.m == nil {
		o.m = make(map[*byte]ownEntry)
	}
	o.m[unsafe.SliceData(data)] = ownEntry{data: data, cmd: cmd, subs: subs}
	o.mu.Unlock()
}

// Remove forgets data's entry, if the state machine has not taken it.
func (o *Own) Remove(data []byte) {
	if o != nil {
		o.remove(data)
	}
}

// take removes and returns data's entry, counting it as applied.
func (o *Own) take(data []byte) (ownEntry, bool) {
	e, ok := o.remove(data)
	if ok {
		o.taken.Add(1)
	}
	return e, ok
}

// remove removes and returns data's entry: the same bytes (the same
// array, which Add's entry keeps alive, and length).
func (o *Own) remove(data []byte) (ownEntry, bool) {
	if len(data) == 0 {
		return ownEntry{}, false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	e, ok := o.m[unsafe.SliceData(data)]
	if !ok || len(e.data) != len(data) {
		return ownEntry{}, false
	}
	delete(o.m, unsafe.SliceData(data))
	return e, true
}

// Len is the number of entries held: proposed, neither applied nor
// removed yet.
func (o *Own) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.m)
}

// Applied is the number of entries the state machine applied from the
// commands Add recorded instead of decoding them.
func (o *Own) Applied() uint64 { return o.taken.Load() }
