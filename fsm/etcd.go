package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/cockroachdb/pebble/v2"

	"github.com/swarmkv/swarmkv/keys"
)

// etcd's MVCC keyspace (the etcd v3 API front, package etcdfront).
//
// An etcd namespace lives under one routing key (keys.EtcdRoutingKey), so
// one shard orders all of its writes. Each write (OpEtcdTxn that puts or
// deletes at least one key) takes the namespace's next revision, as in
// etcd: every key it writes gets that mod_revision, a new key that
// create_revision, and version counts the puts since the key was created
// (a delete ends the key; a put after it starts again at version 1). A
// fresh namespace is at revision 1, so the first write is revision 2, as
// on a fresh etcd.
//
// Storage (keys/etcd.go): etcd_keys holds each live key's current record;
// etcd_history one event per key written (key, kind, the record after a
// put, the record before), in revision order; etcd_revs the current and
// compacted revisions. A Range at revision r < current reads the current
// records and undoes the events after r (each key touched after r is read
// as its first such event's "before"), so its cost is the range plus the
// namespace's events since r. Events are retained until OpEtcdCompact
// deletes those at or below its revision; a Range below the compacted
// revision is ErrEtcdCompacted, above the current one ErrEtcdFutureRev.
//
// Leases are a later slice: a put with a lease is refused with
// ErrEtcdLeaseNotFound, and every key's lease is 0.

// Errors of the etcd ops and reads (their Result.Err, or View.EtcdRange's
// error). The etcd front maps each to etcd's own error (rpctypes).
var (
	// ErrEtcdCompacted: a Range or Compact at a revision below (for
	// Compact: at or below) the namespace's compacted revision.
	ErrEtcdCompacted = errors.New("fsm: etcd: required revision has been compacted")
	// ErrEtcdFutureRev: a Range or Compact at a revision above the
	// namespace's current revision.
	ErrEtcdFutureRev = errors.New("fsm: etcd: required revision is a future revision")
	// ErrEtcdKeyNotFound: a put with ignore_value or ignore_lease of a key
	// that does not exist.
	ErrEtcdKeyNotFound = errors.New("fsm: etcd: key not found")
	// ErrEtcdLeaseNotFound: a put that attaches a lease (leases are not
	// served on etcd namespaces yet).
	ErrEtcdLeaseNotFound = errors.New("fsm: etcd: requested lease not found")
)

// Bounds of an OpEtcdTxn, the same on every replica (the front's limits,
// --etcd-max-txn-ops, are at most these).
const (
	// MaxEtcdTxnOps is the most compares, and the most operations of each
	// branch, one txn may carry.
	MaxEtcdTxnOps = 1024
	// MaxEtcdTxnDepth is how deep txns may nest in a txn's branches (a
	// txn with a txn in a branch is at depth 1). etcd bounds nesting only
	// by its ops budget (a nested txn has what its parent left of
	// --max-txn-ops); swarmkv bounds it too, so that decoding and applying
	// a txn recurse a known number of times.
	MaxEtcdTxnDepth = 8
	// MaxEtcdTxnTotalOps is the most compares and ops one txn may carry
	// in all, nested txns included (etcd's budget alone lets a nested
	// tree hold more than its limit: 64 ops of 64 ops each). A txn
	// without nested txns holds at most 3*MaxEtcdTxnOps.
	MaxEtcdTxnTotalOps = 8 * MaxEtcdTxnOps
	// MaxEtcdValueBytes is the largest value a put may carry (the front's
	// request bound, --etcd-max-request-bytes, is at most this; etcd's
	// values are not bound by Limits.MaxValueSize, the native API's).
	MaxEtcdValueBytes = 8 << 20
)

// Compare targets and results, and op kinds, numbered as etcd's
// etcdserverpb enums (Compare.CompareTarget, Compare.CompareResult).
const (
	EtcdTargetVersion uint8 = 0
	EtcdTargetCreate  uint8 = 1
	EtcdTargetMod     uint8 = 2
	EtcdTargetValue   uint8 = 3
	EtcdTargetLease   uint8 = 4

	EtcdEqual    uint8 = 0
	EtcdGreater  uint8 = 1
	EtcdLess     uint8 = 2
	EtcdNotEqual uint8 = 3
)

// EtcdOpKind is what one EtcdOp of a txn branch does.
type EtcdOpKind uint8

const (
	EtcdPut    EtcdOpKind = 1
	EtcdRangeK EtcdOpKind = 2
	EtcdDelete EtcdOpKind = 3
	// EtcdTxnK is a txn nested in a branch (EtcdOp.Txn; from
	// VersionEtcdNested).
	EtcdTxnK EtcdOpKind = 4
)

// Sort orders and targets of a Range, numbered as etcd's
// RangeRequest.SortOrder and SortTarget.
const (
	EtcdSortNone    uint8 = 0
	EtcdSortAscend  uint8 = 1
	EtcdSortDescend uint8 = 2

	EtcdSortByKey     uint8 = 0
	EtcdSortByVersion uint8 = 1
	EtcdSortByCreate  uint8 = 2
	EtcdSortByMod     uint8 = 3
	EtcdSortByValue   uint8 = 4
)

// EtcdTxn is the argument of an OpEtcdTxn: if every Compare holds, the
// Success ops run, else the Failure ops, in order, at one revision. A
// plain put or delete is a txn without compares. A branch may hold txns
// (EtcdTxnK), whose compares are evaluated against the state before the
// whole txn, as etcd does (applyEtcdTxn).
type EtcdTxn struct {
	// NS is the namespace (keys.ValidateEtcdNamespace); empty in a
	// nested txn (it is its parent's).
	NS      string        `cbor:"ns"`
	Compare []EtcdCompare `cbor:"c,omitempty"`
	Success []EtcdOp      `cbor:"s,omitempty"`
	Failure []EtcdOp      `cbor:"f,omitempty"`
}

// EtcdCompare is one compare of a txn: Target of every key in [Key, End)
// (End empty: Key alone; End "\x00": every key from Key) against Int
// (version, create, mod revision, lease) or Value. A compare of an absent
// key compares version, create and mod revision 0, lease 0, and fails a
// value compare.
type EtcdCompare struct {
	Target uint8  `cbor:"t,omitempty"`
	Result uint8  `cbor:"r,omitempty"`
	Key    []byte `cbor:"k"`
	End    []byte `cbor:"e,omitempty"`
	Int    int64  `cbor:"i,omitempty"`
	Value  []byte `cbor:"v,omitempty"`
}

// EtcdOp is one operation of a txn branch: a put (Key, Value, Lease,
// PrevKV, IgnoreValue, IgnoreLease), a delete of [Key, End) (PrevKV), a
// range (Range) or a nested txn (Txn). Txn is a field an entry written
// before VersionEtcdNested never carries, so the encoding of every other
// op is unchanged.
type EtcdOp struct {
	Kind        EtcdOpKind `cbor:"o"`
	Key         []byte     `cbor:"k,omitempty"`
	End         []byte     `cbor:"e,omitempty"`
	Value       []byte     `cbor:"v,omitempty"`
	Lease       int64      `cbor:"l,omitempty"`
	PrevKV      bool       `cbor:"p,omitempty"`
	IgnoreValue bool       `cbor:"iv,omitempty"`
	IgnoreLease bool       `cbor:"il,omitempty"`
	Range       *EtcdRange `cbor:"r,omitempty"`
	Txn         *EtcdTxn   `cbor:"t,omitempty"`
}

// EtcdRange is a Range request: the keys in [Key, End) (End empty: Key
// alone; End "\x00": every key from Key; Key and End "\x00": every key) at
// Revision (0: current), sorted, filtered and limited as etcd's
// RangeRequest says.
type EtcdRange struct {
	Key        []byte `cbor:"k"`
	End        []byte `cbor:"e,omitempty"`
	Limit      int64  `cbor:"l,omitempty"`
	Revision   int64  `cbor:"rev,omitempty"`
	SortOrder  uint8  `cbor:"so,omitempty"`
	SortTarget uint8  `cbor:"st,omitempty"`
	KeysOnly   bool   `cbor:"ko,omitempty"`
	CountOnly  bool   `cbor:"co,omitempty"`
	MinMod     int64  `cbor:"minm,omitempty"`
	MaxMod     int64  `cbor:"maxm,omitempty"`
	MinCreate  int64  `cbor:"minc,omitempty"`
	MaxCreate  int64  `cbor:"maxc,omitempty"`
}

// EtcdCompact is the argument of an OpEtcdCompact: drop the namespace's
// history at and below Revision.
type EtcdCompact struct {
	NS       string `cbor:"ns"`
	Revision int64  `cbor:"rev"`
}

// EtcdKV is one key as etcd reports it (mvccpb.KeyValue).
type EtcdKV struct {
	Key            []byte
	Value          []byte
	CreateRevision int64
	ModRevision    int64
	Version        int64
	Lease          int64
}

// EtcdRangeResult is a Range's answer.
type EtcdRangeResult struct {
	KVs   []EtcdKV
	More  bool  // keys were left out by the limit (or the filters)
	Count int64 // keys in the range at the revision
}

// EtcdOpResult is the answer of one op of a txn branch.
type EtcdOpResult struct {
	Kind    EtcdOpKind
	Range   *EtcdRangeResult // EtcdRangeK
	PrevKV  *EtcdKV          // EtcdPut with PrevKV, when the key existed
	Deleted int64            // EtcdDelete
	PrevKVs []EtcdKV         // EtcdDelete with PrevKV
	Txn     *EtcdResult      // EtcdTxnK (its Revision is the txn's)
}

// EtcdResult is the Result.Etcd of an OpEtcdTxn (and of an OpEtcdCompact:
// Revision only).
type EtcdResult struct {
	Succeeded bool
	// Revision is the namespace's revision after the command (the
	// response header's revision).
	Revision int64
	Results  []EtcdOpResult
}

// validate checks a txn's namespace, counts, keys and values, and etcd's
// rule that a branch writes a key once (checkDuplicates: etcd's duplicate
// key error, wrapped as ErrEtcdDuplicateKey).
//
// Counts are etcd's (v3rpc checkTxnRequest): a txn's own count is the
// most of its compares, its success ops and its failure ops, at most
// MaxEtcdTxnOps; a txn nested in it has what is left (MaxEtcdTxnOps minus
// its parent's count, and so on down), at most MaxEtcdTxnDepth deep, and
// all of them together hold at most MaxEtcdTxnTotalOps compares and ops.
// A txn without nested txns is checked exactly as before nesting.
func (t *EtcdTxn) validate(l Limits) error {
	if err := keys.ValidateEtcdNamespace(t.NS); err != nil {
		return fmt.Errorf("%w: op %s: %v", ErrInvalidCommand, OpEtcdTxn, err)
	}
	total := 0
	if err := t.validateLevel(l, 0, MaxEtcdTxnOps, &total); err != nil {
		return err
	}
	for _, branch := range [][]EtcdOp{t.Success, t.Failure} {
		if _, _, err := checkDuplicates(branch); err != nil {
			return fmt.Errorf("%w: op %s: %w", ErrInvalidCommand, OpEtcdTxn, err)
		}
	}
	return nil
}

// validateLevel checks txn t at nesting depth depth with budget ops (its
// count's bound), adding its compares and ops to *total.
func (t *EtcdTxn) validateLevel(l Limits, depth, budget int, total *int) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: op %s: %s", ErrInvalidCommand, OpEtcdTxn, fmt.Sprintf(format, args...))
	}
	if depth > 0 && t.NS != "" {
		return bad("a nested txn names a namespace")
	}
	opc := t.opCount()
	if opc > budget {
		if depth == 0 {
			return bad("more than %d compares or ops in a branch", MaxEtcdTxnOps)
		}
		return bad("nested txn at depth %d: %d compares or ops in a branch, %d left of %d", depth, opc, budget, MaxEtcdTxnOps)
	}
	if *total += len(t.Compare) + len(t.Success) + len(t.Failure); *total > MaxEtcdTxnTotalOps {
		return bad("more than %d compares and ops in all", MaxEtcdTxnTotalOps)
	}
	checkKey := func(what string, k []byte) error {
		if len(k) == 0 {
			return bad("%s: empty key", what)
		}
		if len(k) > l.MaxKeySize {
			return bad("%s: key is %d bytes, limit %d", what, len(k), l.MaxKeySize)
		}
		return nil
	}
	for i := range t.Compare {
		c := &t.Compare[i]
		if err := checkKey("compare", c.Key); err != nil {
			return err
		}
		if len(c.End) > l.MaxKeySize || c.Target > EtcdTargetLease || c.Result > EtcdNotEqual {
			return bad("compare %d: bad target, result or range end", i)
		}
		if c.Target != EtcdTargetValue && len(c.Value) != 0 || c.Target == EtcdTargetValue && c.Int != 0 {
			return bad("compare %d: value and number both set", i)
		}
	}
	for _, branch := range [][]EtcdOp{t.Success, t.Failure} {
		for i := range branch {
			op := &branch[i]
			if op.Kind != EtcdTxnK && op.Txn != nil {
				return bad("op %d: a nested txn in an op of kind %d", i, op.Kind)
			}
			switch op.Kind {
			case EtcdPut:
				if err := checkKey("put", op.Key); err != nil {
					return err
				}
				if len(op.Value) > MaxEtcdValueBytes {
					return bad("put: value is %d bytes, limit %d", len(op.Value), MaxEtcdValueBytes)
				}
				if len(op.End) != 0 || op.Range != nil || op.IgnoreValue && len(op.Value) != 0 || op.IgnoreLease && op.Lease != 0 {
					return bad("put %d: carries fields a put does not take", i)
				}
			case EtcdDelete:
				if err := checkKey("delete", op.Key); err != nil {
					return err
				}
				if len(op.End) > l.MaxKeySize || len(op.Value) != 0 || op.Lease != 0 || op.IgnoreValue || op.IgnoreLease || op.Range != nil {
					return bad("delete %d: carries fields a delete does not take", i)
				}
			case EtcdRangeK:
				if op.Range == nil || len(op.Key) != 0 || len(op.End) != 0 || len(op.Value) != 0 || op.Lease != 0 || op.PrevKV || op.IgnoreValue || op.IgnoreLease {
					return bad("range %d: a range carries its request alone", i)
				}
				if err := op.Range.Validate(l); err != nil {
					return err
				}
			case EtcdTxnK:
				if op.Txn == nil || len(op.Key) != 0 || len(op.End) != 0 || len(op.Value) != 0 || op.Lease != 0 || op.PrevKV || op.IgnoreValue || op.IgnoreLease || op.Range != nil {
					return bad("txn %d: a nested txn carries its request alone", i)
				}
				if depth+1 > MaxEtcdTxnDepth {
					return bad("txns nested deeper than %d", MaxEtcdTxnDepth)
				}
				if err := op.Txn.validateLevel(l, depth+1, budget-opc, total); err != nil {
					return err
				}
			default:
				return bad("op %d: unknown kind %d", i, op.Kind)
			}
		}
	}
	return nil
}

// approxSize is the payload size of t, to size the encoding buffer.
func (t *EtcdTxn) approxSize() int {
	n := 0
	for _, ops := range [][]EtcdOp{t.Success, t.Failure} {
		for i := range ops {
			n += 16 + len(ops[i].Key) + len(ops[i].End) + len(ops[i].Value)
			if ops[i].Txn != nil {
				n += ops[i].Txn.approxSize()
			}
		}
	}
	for i := range t.Compare {
		n += 16 + len(t.Compare[i].Key) + len(t.Compare[i].End) + len(t.Compare[i].Value)
	}
	return n
}

// opCount is etcd's count of a txn: the most of its compares, success
// ops and failure ops.
func (t *EtcdTxn) opCount() int {
	return max(len(t.Compare), len(t.Success), len(t.Failure))
}

// Nested reports whether a branch of t holds a txn.
func (t *EtcdTxn) Nested() bool {
	for _, branch := range [][]EtcdOp{t.Success, t.Failure} {
		for i := range branch {
			if branch[i].Kind == EtcdTxnK || branch[i].Txn != nil {
				return true
			}
		}
	}
	return false
}

// branch is the ops the compares' outcome ok chooses.
func (t *EtcdTxn) branch(ok bool) []EtcdOp {
	if ok {
		return t.Success
	}
	return t.Failure
}

// normalize turns the txn's empty slices into nil (as DecodeCommand
// decodes them).
func (t *EtcdTxn) normalize() {
	nilEmpty(&t.Compare)
	nilEmpty(&t.Success)
	nilEmpty(&t.Failure)
	for i := range t.Compare {
		c := &t.Compare[i]
		nilEmpty(&c.Key)
		nilEmpty(&c.End)
		nilEmpty(&c.Value)
	}
	for _, ops := range [][]EtcdOp{t.Success, t.Failure} {
		for i := range ops {
			op := &ops[i]
			nilEmpty(&op.Key)
			nilEmpty(&op.End)
			nilEmpty(&op.Value)
			if q := op.Range; q != nil {
				nilEmpty(&q.Key)
				nilEmpty(&q.End)
			}
			if op.Txn != nil {
				op.Txn.normalize()
			}
		}
	}
}

// ErrEtcdDuplicateKey: a txn branch writes one key twice (etcd's
// "duplicate key given in txn request").
var ErrEtcdDuplicateKey = errors.New("fsm: etcd: duplicate key given in txn request")

// checkDuplicates is etcd's rule for one branch (v3rpc checkIntervals,
// followed step by step): no key written twice, except where etcd's
// check lets it. It returns the branch's puts and deletes, nested txns'
// included, for its parent's check. In a branch, in this order:
//   - the branch's own deletes are collected;
//   - each nested txn's puts (of its success and its failure branch,
//     checked the same way first) may not repeat a put of an earlier
//     nested txn or fall in the deletes collected so far; a key its two
//     branches both put is allowed (only one runs); its deletes then join
//     the collected ones;
//   - the branch's own puts may not repeat any put or fall in any delete
//     collected.
//
// So, as in etcd, a nested txn's put followed by a later sibling's delete
// of the key is not refused (both run, at one revision: the key ends
// deleted). One difference: etcd's check reads a delete's range_end
// "\x00" (every key from key) as the string "\x00", so such a delete
// covers no key for it; here it covers every key from key (a put of one
// of them in the branch is refused), as it did before nesting.
func checkDuplicates(ops []EtcdOp) (puts map[string]bool, dels [][2][]byte, err error) {
	covered := func(k string) bool {
		for _, d := range dels {
			if etcdInRange([]byte(k), d[0], d[1]) {
				return true
			}
		}
		return false
	}
	for i := range ops {
		if ops[i].Kind == EtcdDelete {
			dels = append(dels, [2][]byte{ops[i].Key, ops[i].End})
		}
	}
	puts = map[string]bool{}
	for i := range ops {
		if ops[i].Kind != EtcdTxnK || ops[i].Txn == nil {
			continue
		}
		putsThen, delsThen, err := checkDuplicates(ops[i].Txn.Success)
		if err != nil {
			return nil, nil, err
		}
		putsElse, delsElse, err := checkDuplicates(ops[i].Txn.Failure)
		if err != nil {
			return nil, nil, err
		}
		// In key order, so that the key named is the same on every replica.
		for _, k := range slices.Sorted(maps.Keys(putsThen)) {
			if puts[k] || covered(k) {
				return nil, nil, fmt.Errorf("%w: %q", ErrEtcdDuplicateKey, k)
			}
			puts[k] = true
		}
		for _, k := range slices.Sorted(maps.Keys(putsElse)) {
			if puts[k] && !putsThen[k] || covered(k) {
				return nil, nil, fmt.Errorf("%w: %q", ErrEtcdDuplicateKey, k)
			}
			puts[k] = true
		}
		dels = append(dels, delsThen...)
		dels = append(dels, delsElse...)
	}
	for i := range ops {
		if ops[i].Kind != EtcdPut {
			continue
		}
		k := string(ops[i].Key)
		if puts[k] || covered(k) {
			return nil, nil, fmt.Errorf("%w: %q", ErrEtcdDuplicateKey, k)
		}
		puts[k] = true
	}
	return puts, dels, nil
}

// Validate checks a Range request: key and range end within the key size
// limit, revision, limit and filters not negative, sort order and target
// known. The error wraps ErrInvalidCommand.
func (q *EtcdRange) Validate(l Limits) error {
	l = l.WithDefaults()
	switch {
	case len(q.Key) == 0:
		return fmt.Errorf("%w: etcd range: empty key", ErrInvalidCommand)
	case len(q.Key) > l.MaxKeySize || len(q.End) > l.MaxKeySize:
		return fmt.Errorf("%w: etcd range: key or range end over %d bytes", ErrInvalidCommand, l.MaxKeySize)
	case q.Limit < 0 || q.Revision < 0 || q.MinMod < 0 || q.MaxMod < 0 || q.MinCreate < 0 || q.MaxCreate < 0:
		return fmt.Errorf("%w: etcd range: negative limit, revision or filter", ErrInvalidCommand)
	case q.SortOrder > EtcdSortDescend || q.SortTarget > EtcdSortByValue:
		return fmt.Errorf("%w: etcd range: unknown sort order or target", ErrInvalidCommand)
	}
	return nil
}

// etcdInRange reports whether key k is in etcd's range [key, end): end
// empty is key alone, end "\x00" every key from key.
func etcdInRange(k, key, end []byte) bool {
	if len(end) == 0 {
		return bytes.Equal(k, key)
	}
	if bytes.Compare(k, key) < 0 {
		return false
	}
	return isAllEnd(end) || bytes.Compare(k, end) < 0
}

// isEtcdTable reports whether t is one of the etcd tables, which only
// OpEtcdTxn and OpEtcdCompact write (an OpBatch of their keys is refused).
func isEtcdTable(t byte) bool { return t >= keys.TableEtcdKeys && t <= keys.TableEtcdRevs }

func isAllEnd(end []byte) bool { return len(end) == 1 && end[0] == 0 }

// etcdRecord is a live key's stored record.
//
//	+-----------------+--------------+------------------+----------------+-----------+
//	| create (u64 BE) | mod (u64 BE) | version (u64 BE) | lease (u64 BE) | value ... |
//	+-----------------+--------------+------------------+----------------+-----------+
//	0                 8              16                 24               32
const etcdRecordHeader = 32

func encodeEtcdRecord(kv *EtcdKV) []byte {
	b := make([]byte, etcdRecordHeader, etcdRecordHeader+len(kv.Value))
	binary.BigEndian.PutUint64(b[0:], uint64(kv.CreateRevision))
	binary.BigEndian.PutUint64(b[8:], uint64(kv.ModRevision))
	binary.BigEndian.PutUint64(b[16:], uint64(kv.Version))
	binary.BigEndian.PutUint64(b[24:], uint64(kv.Lease))
	return append(b, kv.Value...)
}

// decodeEtcdRecord decodes the record of key (copying the value).
func decodeEtcdRecord(key, v []byte) (EtcdKV, error) {
	if len(v) < etcdRecordHeader {
		return EtcdKV{}, fmt.Errorf("%w: etcd record of %q has %d bytes", ErrCorruptRecord, key, len(v))
	}
	return EtcdKV{
		Key:            bytes.Clone(key),
		CreateRevision: int64(binary.BigEndian.Uint64(v[0:])),
		ModRevision:    int64(binary.BigEndian.Uint64(v[8:])),
		Version:        int64(binary.BigEndian.Uint64(v[16:])),
		Lease:          int64(binary.BigEndian.Uint64(v[24:])),
		Value:          append([]byte{}, v[etcdRecordHeader:]...),
	}, nil
}

// An etcd event (the value of an etcd_history key).
//
//	+-----------+---------------------+-----+-----------+-----------------------------+----------------+
//	| kind (u8) | len(key) (uvarint)  | key | prev (u8) | [len(prev) uvarint, prev]   | after (rest)   |
//	+-----------+---------------------+-----+-----------+-----------------------------+----------------+
//
// kind is 1 (put) or 2 (delete); prev is 1 when the key existed before the
// write, followed by its record; after is the record a put wrote (empty
// for a delete).
const (
	etcdEventPut    byte = 1
	etcdEventDelete byte = 2
)

func encodeEtcdEvent(kind byte, key, prev, after []byte) []byte {
	b := make([]byte, 0, 2+len(key)+2+len(prev)+len(after)+8)
	b = append(b, kind)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	if prev == nil {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		b = binary.AppendUvarint(b, uint64(len(prev)))
		b = append(b, prev...)
	}
	return append(b, after...)
}

// etcdEvent is a decoded event (aliasing the bytes it was decoded from).
type etcdEvent struct {
	kind         byte
	key          []byte
	prev         []byte // nil: the key did not exist
	after        []byte
	prevExisting bool
}

func decodeEtcdEvent(v []byte) (etcdEvent, error) {
	var e etcdEvent
	bad := func(why string) (etcdEvent, error) {
		return etcdEvent{}, fmt.Errorf("%w: etcd event: %s", ErrCorruptRecord, why)
	}
	if len(v) < 1 {
		return bad("empty")
	}
	e.kind, v = v[0], v[1:]
	if e.kind != etcdEventPut && e.kind != etcdEventDelete {
		return bad("unknown kind")
	}
	n, w := binary.Uvarint(v)
	if w <= 0 || uint64(len(v)-w) < n+1 {
		return bad("key length")
	}
	e.key, v = v[w:w+int(n)], v[w+int(n):]
	if v[0] == 1 {
		v = v[1:]
		n, w := binary.Uvarint(v)
		if w <= 0 || uint64(len(v)-w) < n {
			return bad("prev length")
		}
		e.prev, e.prevExisting, v = v[w:w+int(n)], true, v[w+int(n):]
	} else {
		v = v[1:]
	}
	e.after = v
	return e, nil
}

// etcdRevs are a namespace's revisions.
type etcdRevs struct{ current, compacted uint64 }

// etcdReader reads an etcd namespace: from a View (a Range) or from the
// run's batch (an OpEtcdTxn, which sees its own earlier writes).
type etcdReader interface {
	get(key []byte) ([]byte, bool, error)
	// scan calls fn with every key in [lo, hi) (hi nil: no bound) and its
	// value, in order; both are valid only during fn.
	scan(lo, hi []byte, fn func(k, v []byte) error) error
}

// batchReader reads a Pebble reader (the run's indexed batch).
type batchReader struct{ r pebble.Reader }

func (b batchReader) get(key []byte) ([]byte, bool, error) {
	v, c, err := b.r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	out := append([]byte{}, v...)
	return out, true, c.Close()
}

func (b batchReader) scan(lo, hi []byte, fn func(k, v []byte) error) error {
	it, err := b.r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	return scanIter(it, fn, true)
}

func scanIter(it *pebble.Iterator, fn func(k, v []byte) error, closeIt bool) error {
	var err error
	for ok := it.First(); ok && err == nil; ok = it.Next() {
		var v []byte
		if v, err = it.ValueAndErr(); err == nil {
			err = fn(it.Key(), v)
		}
	}
	if err == nil {
		err = it.Error()
	}
	if closeIt {
		if cerr := it.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// viewReader reads a View.
type viewReader struct{ v View }

func (r viewReader) get(key []byte) ([]byte, bool, error) { return r.v.get(key) }

func (r viewReader) scan(lo, hi []byte, fn func(k, v []byte) error) error {
	r.v.it.SetBounds(lo, hi)
	return scanIter(r.v.it, fn, false)
}

func readEtcdRevs(r etcdReader, rk []byte) (etcdRevs, error) {
	v, found, err := r.get(keys.EtcdRevs(rk))
	switch {
	case err != nil:
		return etcdRevs{}, err
	case !found:
		return etcdRevs{current: 1}, nil
	case len(v) != 16:
		return etcdRevs{}, fmt.Errorf("%w: etcd revisions of %q: %d bytes", ErrCorruptRecord, rk, len(v))
	}
	return etcdRevs{current: binary.BigEndian.Uint64(v), compacted: binary.BigEndian.Uint64(v[8:])}, nil
}

func encodeEtcdRevs(r etcdRevs) []byte {
	b := binary.BigEndian.AppendUint64(nil, r.current)
	return binary.BigEndian.AppendUint64(b, r.compacted)
}

// EtcdRange answers a Range on namespace ns from the view (the front
// reads through FSM.Read with keys.EtcdRoutingKey(ns), which fences the
// slot). The revision of the answer's header is the namespace's current
// revision, which EtcdRange returns too.
func (v View) EtcdRange(ns string, q *EtcdRange) (*EtcdRangeResult, int64, error) {
	if err := keys.ValidateEtcdNamespace(ns); err != nil {
		return nil, 0, fmt.Errorf("%w: %v", ErrInvalidCommand, err)
	}
	if err := q.Validate(v.f.limits); err != nil {
		return nil, 0, err
	}
	r := viewReader{v}
	rk := keys.EtcdRoutingKey(ns)
	revs, err := readEtcdRevs(r, rk)
	if err != nil {
		return nil, 0, err
	}
	res, err := etcdRange(r, rk, revs, q)
	return res, int64(revs.current), err
}

// EtcdRevision returns namespace ns's current and compacted revisions.
func (v View) EtcdRevision(ns string) (current, compacted int64, err error) {
	if err := keys.ValidateEtcdNamespace(ns); err != nil {
		return 0, 0, fmt.Errorf("%w: %v", ErrInvalidCommand, err)
	}
	revs, err := readEtcdRevs(viewReader{v}, keys.EtcdRoutingKey(ns))
	return int64(revs.current), int64(revs.compacted), err
}

// etcdBounds are the etcd_keys bounds of etcd range [key, end).
func etcdBounds(rk, key, end []byte) (lo, hi []byte, ok bool) {
	lo = keys.EtcdKey(rk, key)
	switch {
	case len(end) == 0:
		hi = append(bytes.Clone(lo), 0)
	case isAllEnd(end):
		hi = keys.PrefixEnd(keys.EtcdKeyPrefix(rk))
	default:
		if bytes.Compare(end, key) <= 0 {
			return nil, nil, false
		}
		hi = keys.EtcdKey(rk, end)
	}
	return lo, hi, true
}

// etcdEach calls fn with every key in [key, end) as it was at revision rev
// (0: current), in key order. It checks rev against revs.
func etcdEach(r etcdReader, rk []byte, revs etcdRevs, key, end []byte, rev uint64, fn func(kv []byte, rec []byte) error) error {
	switch {
	case rev > revs.current:
		return fmt.Errorf("%w: revision %d, current %d", ErrEtcdFutureRev, rev, revs.current)
	case rev != 0 && rev < revs.compacted:
		return fmt.Errorf("%w: revision %d, compacted %d", ErrEtcdCompacted, rev, revs.compacted)
	}
	lo, hi, ok := etcdBounds(rk, key, end)
	if !ok {
		return nil
	}
	prefix := len(keys.EtcdKeyPrefix(rk))
	if rev == 0 || rev == revs.current {
		return r.scan(lo, hi, func(k, v []byte) error { return fn(k[prefix:], v) })
	}
	// The state at rev: each key written after rev as its first such
	// event's "before".
	type past struct {
		key, rec []byte // rec nil: absent at rev
	}
	seen := map[string]bool{}
	var overlay []past
	err := r.scan(keys.EtcdHistoryFrom(rk, rev+1), keys.EtcdHistoryFrom(rk, revs.current+1), func(_, v []byte) error {
		e, err := decodeEtcdEvent(v)
		if err != nil {
			return err
		}
		if !etcdInRange(e.key, key, end) || seen[string(e.key)] {
			return nil
		}
		seen[string(e.key)] = true
		p := past{key: bytes.Clone(e.key)}
		if e.prevExisting {
			p.rec = bytes.Clone(e.prev)
		}
		overlay = append(overlay, p)
		return nil
	})
	if err != nil {
		return err
	}
	slices.SortFunc(overlay, func(a, b past) int { return bytes.Compare(a.key, b.key) })
	i := 0
	flush := func(upTo []byte) error { // the overlay's keys below upTo (nil: all)
		for ; i < len(overlay) && (upTo == nil || bytes.Compare(overlay[i].key, upTo) < 0); i++ {
			if overlay[i].rec != nil {
				if err := fn(overlay[i].key, overlay[i].rec); err != nil {
					return err
				}
			}
		}
		return nil
	}
	err = r.scan(lo, hi, func(k, v []byte) error {
		ek := k[prefix:]
		if err := flush(ek); err != nil {
			return err
		}
		if seen[string(ek)] {
			if i < len(overlay) && bytes.Equal(overlay[i].key, ek) {
				i++
				if rec := overlay[i-1].rec; rec != nil {
					return fn(ek, rec)
				}
			}
			return nil
		}
		return fn(ek, v)
	})
	if err != nil {
		return err
	}
	return flush(nil)
}

// etcdRange answers q as etcd's Range does: Count is every key in the
// range at the revision; the filters, the sort and the limit then choose
// the KVs; More says whether the limit or the filters left any out.
func etcdRange(r etcdReader, rk []byte, revs etcdRevs, q *EtcdRange) (*EtcdRangeResult, error) {
	res := &EtcdRangeResult{}
	filtered := q.MinMod != 0 || q.MaxMod != 0 || q.MinCreate != 0 || q.MaxCreate != 0
	order := q.SortOrder
	if order == EtcdSortNone && q.SortTarget != EtcdSortByKey {
		order = EtcdSortAscend // etcd: a target without an order sorts ascending
	}
	sorted := order == EtcdSortDescend || order == EtcdSortAscend && q.SortTarget != EtcdSortByKey
	collectAll := filtered || sorted
	err := etcdEach(r, rk, revs, q.Key, q.End, uint64(q.Revision), func(k, rec []byte) error {
		res.Count++
		if q.CountOnly || !collectAll && q.Limit > 0 && int64(len(res.KVs)) > q.Limit {
			return nil // counted only (one past the limit is kept for More)
		}
		kv, err := decodeEtcdRecord(k, rec)
		if err != nil {
			return err
		}
		if q.KeysOnly {
			kv.Value = nil
		}
		res.KVs = append(res.KVs, kv)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if q.CountOnly {
		res.KVs = nil
		return res, nil
	}
	if filtered {
		kept := res.KVs[:0]
		for _, kv := range res.KVs {
			if q.MinMod != 0 && kv.ModRevision < q.MinMod || q.MaxMod != 0 && kv.ModRevision > q.MaxMod ||
				q.MinCreate != 0 && kv.CreateRevision < q.MinCreate || q.MaxCreate != 0 && kv.CreateRevision > q.MaxCreate {
				continue
			}
			kept = append(kept, kv)
		}
		res.KVs = kept
	}
	if sorted {
		less := func(a, b *EtcdKV) int {
			switch q.SortTarget {
			case EtcdSortByVersion:
				return cmpInt(a.Version, b.Version)
			case EtcdSortByCreate:
				return cmpInt(a.CreateRevision, b.CreateRevision)
			case EtcdSortByMod:
				return cmpInt(a.ModRevision, b.ModRevision)
			case EtcdSortByValue:
				return bytes.Compare(a.Value, b.Value)
			}
			return bytes.Compare(a.Key, b.Key)
		}
		sort.SliceStable(res.KVs, func(i, j int) bool {
			c := less(&res.KVs[i], &res.KVs[j])
			if order == EtcdSortDescend {
				return c > 0
			}
			return c < 0
		})
	}
	if q.Limit > 0 && int64(len(res.KVs)) > q.Limit {
		res.KVs, res.More = res.KVs[:q.Limit], true
	}
	return res, nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// etcdWriter runs a txn's ops in the run's batch b (read through r, so
// each op sees the earlier ones) at revision rev.
type etcdWriter struct {
	b    *pebble.Batch
	r    batchReader
	rk   []byte
	revs etcdRevs
	rev  uint64 // the revision the txn's writes take
	sub  uint32 // the next write's position in rev
}

func (w *etcdWriter) put(op *EtcdOp) (*EtcdKV, error) {
	k := keys.EtcdKey(w.rk, op.Key)
	old, found, err := w.r.get(k)
	if err != nil {
		return nil, err
	}
	kv := EtcdKV{Key: op.Key, Value: op.Value, ModRevision: int64(w.rev), CreateRevision: int64(w.rev), Version: 1, Lease: op.Lease}
	var prev *EtcdKV
	if found {
		p, err := decodeEtcdRecord(op.Key, old)
		if err != nil {
			return nil, err
		}
		prev = &p
		kv.CreateRevision, kv.Version = p.CreateRevision, p.Version+1
		if op.IgnoreValue {
			kv.Value = p.Value
		}
		if op.IgnoreLease {
			kv.Lease = p.Lease
		}
	}
	rec := encodeEtcdRecord(&kv)
	if err := w.b.Set(k, rec, nil); err != nil {
		return nil, err
	}
	if err := w.event(etcdEventPut, op.Key, old, found, rec); err != nil {
		return nil, err
	}
	return prev, nil
}

func (w *etcdWriter) event(kind byte, key, prev []byte, existed bool, after []byte) error {
	if !existed {
		prev = nil
	} else if prev == nil {
		prev = []byte{}
	}
	err := w.b.Set(keys.EtcdHistory(w.rk, w.rev, w.sub), encodeEtcdEvent(kind, key, prev, after), nil)
	w.sub++
	return err
}

func (w *etcdWriter) deleteRange(op *EtcdOp, res *EtcdOpResult) error {
	type del struct{ key, rec []byte }
	var dels []del
	lo, hi, ok := etcdBounds(w.rk, op.Key, op.End)
	if !ok {
		return nil
	}
	prefix := len(keys.EtcdKeyPrefix(w.rk))
	err := w.r.scan(lo, hi, func(k, v []byte) error {
		dels = append(dels, del{bytes.Clone(k[prefix:]), bytes.Clone(v)})
		return nil
	})
	if err != nil {
		return err
	}
	for _, d := range dels {
		if err := w.b.Delete(keys.EtcdKey(w.rk, d.key), nil); err != nil {
			return err
		}
		if err := w.event(etcdEventDelete, d.key, d.rec, true, nil); err != nil {
			return err
		}
		if op.PrevKV {
			kv, err := decodeEtcdRecord(d.key, d.rec)
			if err != nil {
				return err
			}
			res.PrevKVs = append(res.PrevKVs, kv)
		}
	}
	res.Deleted = int64(len(dels))
	return nil
}

// compare evaluates one compare against the state before the txn.
func (w *etcdWriter) compare(c *EtcdCompare) (bool, error) {
	var kvs []EtcdKV
	err := etcdEach(w.r, w.rk, w.revs, c.Key, c.End, 0, func(k, rec []byte) error {
		kv, err := decodeEtcdRecord(k, rec)
		kvs = append(kvs, kv)
		return err
	})
	if err != nil {
		return false, err
	}
	if len(kvs) == 0 {
		if c.Target == EtcdTargetValue {
			return false, nil // etcd: a value compare of no key fails
		}
		kvs = []EtcdKV{{}} // an absent key: version, revisions, lease 0
	}
	for i := range kvs {
		var d int
		switch c.Target {
		case EtcdTargetVersion:
			d = cmpInt(kvs[i].Version, c.Int)
		case EtcdTargetCreate:
			d = cmpInt(kvs[i].CreateRevision, c.Int)
		case EtcdTargetMod:
			d = cmpInt(kvs[i].ModRevision, c.Int)
		case EtcdTargetLease:
			d = cmpInt(kvs[i].Lease, c.Int)
		case EtcdTargetValue:
			d = bytes.Compare(kvs[i].Value, c.Value)
		}
		var holds bool
		switch c.Result {
		case EtcdEqual:
			holds = d == 0
		case EtcdGreater:
			holds = d > 0
		case EtcdLess:
			holds = d < 0
		case EtcdNotEqual:
			holds = d != 0
		}
		if !holds {
			return false, nil
		}
	}
	return true, nil
}
