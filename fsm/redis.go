package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/resp"
	"github.com/swarmkv/swarmkv/shard"
)

// Redis data types (seed 002's asset catalogue, served over RESP by
// cluster's Redis front). A Redis command is its argument vector (argv,
// argv[0] the command name, any case), executed by this package against
// the Redis tables of package keys (strings, hashes, sets, lists), so that
// every replica computes the same state and the same reply:
//
//   - OpRedis carries one command (a write; the front serves reads from
//     the leader's state after the read barrier, with RedisRead).
//   - OpRedisMulti carries a MULTI/EXEC block: every command in order,
//     in one log entry, so the block is applied whole or not at all, after
//     checking the WATCH guards: each watched key's version (the log index
//     of the command that last changed it, 0 for an absent key) must be
//     what the client saw when it sent WATCH. Otherwise nothing runs and
//     the reply is the null array, as Redis answers an aborted EXEC.
//
// Result.Reply holds the reply: the command's, or for OpRedisMulti the
// array of every command's reply. A command that fails at run time
// (WRONGTYPE, not an integer, ...) gets Redis's error reply and writes
// nothing; within a block the other commands still run, as in Redis.

// RedisTx is the payload of OpRedis (exactly one command, no watches) and
// OpRedisMulti.
type RedisTx struct {
	Cmds  []RedisArgv  `cbor:"c"`
	Watch []RedisWatch `cbor:"w,omitempty"`
}

// RedisArgv is one command: name and arguments.
type RedisArgv [][]byte

// RedisWatch is a WATCH guard: the key's version must still be Version
// (0: the key must still be absent).
type RedisWatch struct {
	Key     []byte `cbor:"k"`
	Version uint64 `cbor:"v,omitempty"`
}

// Bounds on a RedisTx.
const (
	// MaxRedisTxCmds is the most commands a MULTI block may queue.
	MaxRedisTxCmds = 4096
	// MaxRedisWatches is the most keys a connection may WATCH.
	MaxRedisWatches = 1024
)

// redisFlag says where a command may run.
type redisFlag uint8

const (
	// rWrite: changes state; proposed through Raft.
	rWrite redisFlag = 1 << iota
	// rShardLocal: answers for one shard only (KEYS, swarmkv.*): the
	// front fans it out, and it is not allowed in MULTI.
	rShardLocal
	// rInternal: swarmkv's own command, not offered to RESP clients.
	rInternal
)

// redisSpec describes one command, after Redis's command table: arity
// (n > 0: exactly n arguments counting the name; n < 0: at least -n), the
// key positions (first, last (-1: to the end), step; first 0: no keys), the
// positions of hash fields and set members it stores (fieldFirst, with
// fieldStep; 0: none), and its implementation.
type redisSpec struct {
	name                 string
	arity                int
	flags                redisFlag
	first, last, step    int
	fieldFirst, fieldStp int
	check                func(argv [][]byte) *resp.Value // extra argument-count rules
	run                  func(x *rexec, argv [][]byte) (resp.Value, error)
}

var redisCmds map[string]*redisSpec

func init() {
	redisCmds = make(map[string]*redisSpec)
	for _, s := range redisTable() {
		redisCmds[s.name] = s
	}
}

// RedisCommand is what the front needs to know about a command.
type RedisCommand struct {
	Name       string // lowercase
	Write      bool   // goes through Raft
	ShardLocal bool   // answers for one shard (KEYS): fan out, not in MULTI
	Internal   bool   // not offered to RESP clients
}

// LookupRedis returns the command argv names (nil if the state machine
// does not implement it).
func LookupRedis(name []byte) *RedisCommand {
	s := redisCmds[strings.ToLower(string(name))]
	if s == nil {
		return nil
	}
	return &RedisCommand{Name: s.name, Write: s.flags&rWrite != 0, ShardLocal: s.flags&rShardLocal != 0, Internal: s.flags&rInternal != 0}
}

// RedisKeys returns the keys argv names (aliases into argv). argv must be
// a command CheckRedis accepts.
func RedisKeys(argv [][]byte) [][]byte {
	s := redisCmds[strings.ToLower(string(argv[0]))]
	if s == nil || s.first == 0 || len(argv) <= s.first {
		return nil
	}
	last := s.last
	if last < 0 {
		last = len(argv) + last
	}
	var out [][]byte
	for i := s.first; i <= last && i < len(argv); i += s.step {
		out = append(out, argv[i])
	}
	return out
}

// CheckRedis checks argv the way Redis checks a command before running or
// queuing it: a known command, the right number of arguments, and
// swarmkv's size limits (keys at most keys.MaxRedisKeyLen bytes, stored
// fields and members keys.MaxRedisFieldLen, every argument maxArg). It
// returns nil, or the error reply (Redis's text where Redis has one).
func CheckRedis(argv [][]byte, maxArg int) *resp.Value {
	if len(argv) == 0 {
		v := resp.Error("ERR empty command")
		return &v
	}
	s := redisCmds[strings.ToLower(string(argv[0]))]
	if s == nil {
		v := resp.UnknownCommand(argv)
		return &v
	}
	if (s.arity > 0 && len(argv) != s.arity) || (s.arity < 0 && len(argv) < -s.arity) {
		v := resp.WrongArgs(s.name)
		return &v
	}
	if s.check != nil {
		if v := s.check(argv); v != nil {
			return v
		}
	}
	for _, a := range argv[1:] {
		if len(a) > maxArg {
			v := resp.Error(fmt.Sprintf("ERR argument of %d bytes over swarmkv's limit of %d", len(a), maxArg))
			return &v
		}
	}
	for _, k := range RedisKeys(argv) {
		if len(k) > keys.MaxRedisKeyLen {
			v := resp.Error(fmt.Sprintf("ERR key of %d bytes over swarmkv's limit of %d", len(k), keys.MaxRedisKeyLen))
			return &v
		}
	}
	if s.fieldFirst > 0 {
		for i := s.fieldFirst; i < len(argv); i += s.fieldStp {
			if len(argv[i]) > keys.MaxRedisFieldLen {
				v := resp.Error(fmt.Sprintf("ERR field or member of %d bytes over swarmkv's limit of %d", len(argv[i]), keys.MaxRedisFieldLen))
				return &v
			}
			if s.fieldStp == 0 {
				break
			}
		}
	}
	return nil
}

// validate checks a RedisTx for op (called by its spec's validate): one
// command and no watch when single (OpRedis).
func (t *RedisTx) validate(op Op, single bool, l Limits) error {
	switch {
	case single && (len(t.Cmds) != 1 || len(t.Watch) != 0):
		return fmt.Errorf("%w: op %s: want exactly one command and no watches", ErrInvalidCommand, op)
	case len(t.Cmds) > MaxRedisTxCmds:
		return fmt.Errorf("%w: op %s: %d commands, limit %d", ErrInvalidCommand, op, len(t.Cmds), MaxRedisTxCmds)
	case len(t.Watch) > MaxRedisWatches:
		return fmt.Errorf("%w: op %s: %d watches, limit %d", ErrInvalidCommand, op, len(t.Watch), MaxRedisWatches)
	}
	for i, w := range t.Watch {
		if len(w.Key) > keys.MaxRedisKeyLen {
			return fmt.Errorf("%w: op %s: watch %d: key of %d bytes, limit %d", ErrInvalidCommand, op, i, len(w.Key), keys.MaxRedisKeyLen)
		}
	}
	for i, argv := range t.Cmds {
		if v := CheckRedis(argv, l.MaxValueSize); v != nil {
			return fmt.Errorf("%w: op %s: command %d: %s", ErrInvalidCommand, op, i, v.Str)
		}
		if s := redisCmds[strings.ToLower(string(argv[0]))]; s.flags&(rShardLocal|rInternal) != 0 {
			return fmt.Errorf("%w: op %s: command %d: %s cannot be proposed", ErrInvalidCommand, op, i, s.name)
		}
	}
	return nil
}

// replyErr is an error reply, returned by the commands as an error so that
// it unwinds before any write; exec turns it into the reply.
type replyErr struct{ v resp.Value }

func (e *replyErr) Error() string { return string(e.v.Str) }

func fail(msg string) error { return &replyErr{resp.Error(msg)} }

var errWrongType = fail(resp.ErrWrongType)

// rexec runs commands against r (the run's indexed batch during apply, the
// DB or a snapshot for reads); writes go to w (nil for reads).
type rexec struct {
	r     pebble.Reader
	w     *pebble.Batch
	index uint64 // the log index being applied (0 for reads)
	reply ReplyLimits
	// owned, for reads while the shard owns only some slots: the listings
	// (KEYS, swarmkv.scan, swarmkv.dbsize) leave out keys of other slots,
	// frozen ones still stored included. Nil: every slot owned.
	owned *shard.SlotSet
}

// owns reports whether the shard owns Redis key key's slot.
func (x *rexec) owns(key []byte) bool {
	return x.owned == nil || x.owned.Has(shard.SlotOf(keys.RedisRoutingKey(key)))
}

// exec runs one checked command. The error is a storage error; Redis-level
// failures are error replies.
func (x *rexec) exec(argv [][]byte) (resp.Value, error) {
	s := redisCmds[strings.ToLower(string(argv[0]))]
	if s == nil { // checked before; defensive
		return resp.UnknownCommand(argv), nil
	}
	if x.w == nil && s.flags&rWrite != 0 {
		return resp.Error("ERR swarmkv: " + s.name + " is a write"), nil
	}
	v, err := s.run(x, argv)
	var re *replyErr
	if errors.As(err, &re) {
		return re.v, nil
	}
	return v, err
}

// RedisRead runs a command that does not write (GET, HGETALL, KEYS,
// swarmkv.versions, ...) against the replica's current state; the caller
// has passed the read barrier for a linearizable answer. A key of a slot
// the shard does not own makes it return a *MovedError; listings leave
// such keys out. Commands that name
// several keys read one snapshot. argv must pass CheckRedis; a write
// command gets an error reply.
func (f *FSM) RedisRead(argv [][]byte) (resp.Value, error) {
	if err := f.rlock(); err != nil {
		return resp.Value{}, err
	}
	defer f.mu.RUnlock()
	if f.restoring.Load() {
		return resp.Value{}, ErrRestoring
	}
	x := &rexec{r: f.db, reply: f.reply}
	if st := f.slots.Load(); !st.owned.IsFull() {
		for _, k := range RedisKeys(argv) {
			if err := st.check(shard.SlotOf(keys.RedisRoutingKey(k))); err != nil {
				return resp.Value{}, err
			}
		}
		x.owned = &st.owned
	}
	if len(argv) > 2 {
		snap := f.db.NewSnapshot()
		defer snap.Close()
		x.r = snap
	}
	v, err := x.exec(argv)
	if err != nil {
		return resp.Value{}, fmt.Errorf("fsm: redis read: %w", err)
	}
	return v, nil
}

// meta returns key's record. A record that does not decode is an error
// reply (only a raw OpBatch write into the table can make one).
func (x *rexec) meta(key []byte) (keys.RedisMeta, bool, error) {
	v, c, err := x.r.Get(keys.RedisKey(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return keys.RedisMeta{}, false, nil
	}
	if err != nil {
		return keys.RedisMeta{}, false, err
	}
	v = bytes.Clone(v)
	if err := c.Close(); err != nil {
		return keys.RedisMeta{}, false, err
	}
	m, err := keys.DecodeRedisMeta(v)
	if err != nil {
		return m, false, fail(fmt.Sprintf("ERR swarmkv: corrupt stored record of key %q: %v", key, err))
	}
	return m, true, nil
}

// typed returns key's record if it has type t; another type is WRONGTYPE.
func (x *rexec) typed(key []byte, t keys.RedisType) (keys.RedisMeta, bool, error) {
	m, found, err := x.meta(key)
	if err == nil && found && m.Type != t {
		err = errWrongType
	}
	return m, found, err
}

// get returns a copy of k's value.
func (x *rexec) get(k []byte) ([]byte, bool, error) {
	v, c, err := x.r.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	out := bytes.Clone(v)
	if out == nil {
		out = []byte{}
	}
	return out, true, c.Close()
}

// put writes key's record, stamping its version with the log index; a new
// key (Created == 0) gets Created and its scan entry.
func (x *rexec) put(key []byte, m *keys.RedisMeta) error {
	if m.Created == 0 {
		m.Created = x.index
		if err := x.w.Set(keys.RedisScan(m.Created, key), nil, nil); err != nil {
			return err
		}
	}
	m.Version = x.index
	return x.w.Set(keys.RedisKey(key), keys.AppendRedisMeta(nil, m), nil)
}

// remove deletes key: its elements, scan entry and record.
func (x *rexec) remove(key []byte, m *keys.RedisMeta) error {
	var t byte
	switch m.Type {
	case keys.RedisHash:
		t = keys.TableRedisHash
	case keys.RedisSet:
		t = keys.TableRedisSet
	case keys.RedisList:
		t = keys.TableRedisList
	}
	if t != 0 {
		var ks [][]byte
		if err := x.each(keys.RedisElemPrefix(t, key), func(k, _ []byte) error {
			ks = append(ks, bytes.Clone(k))
			return nil
		}); err != nil {
			return err
		}
		for _, k := range ks {
			if err := x.w.Delete(k, nil); err != nil {
				return err
			}
		}
	}
	if err := x.w.Delete(keys.RedisScan(m.Created, key), nil); err != nil {
		return err
	}
	return x.w.Delete(keys.RedisKey(key), nil)
}

// each calls fn for every key under prefix, in order, with the key and
// value (valid during the call only).
func (x *rexec) each(prefix []byte, fn func(k, v []byte) error) error {
	return x.eachRange(prefix, keys.PrefixEnd(prefix), fn)
}

// eachKey calls fn with each key in [lo, hi) without reading values.
func (x *rexec) eachKey(lo, hi []byte, fn func(k []byte) error) error {
	it, err := x.r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		if err := fn(it.Key()); err != nil {
			_ = it.Close()
			return err
		}
	}
	return it.Close()
}

func (x *rexec) eachRange(lo, hi []byte, fn func(k, v []byte) error) error {
	it, err := x.r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return err
		}
		if err := fn(it.Key(), v); err != nil {
			_ = it.Close()
			return err
		}
	}
	return it.Close()
}

// checkRedisSlots is the slot check of the Redis ops: unless the shard
// owns every slot, every key the command or block names, watches
// included, must be in an owned slot (else res.Err, the *MovedError).
func (a *applier) checkRedisSlots(t *RedisTx, res *Result) bool {
	if a.st.owned.IsFull() {
		return true
	}
	if rej := a.st.checkRedis(t); rej != nil {
		res.Err = rej
		return false
	}
	return true
}
