package fsm

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/fxamacker/cbor/v2"
)

// Sentinel errors. Every error the package returns wraps one of them (or is
// a Pebble / I/O error while committing, which is fatal for the replica).
var (
	// ErrNotFound is returned by Get when the key is absent.
	ErrNotFound = errors.New("fsm: not found")
	// ErrClosed is returned by every method called after Close, and by
	// WaitApplied when the FSM is closed while waiting.
	ErrClosed = errors.New("fsm: closed")
	// ErrMalformedCommand is wrapped by DecodeCommand (and put in a Result)
	// when a log entry's bytes are not a well-formed command.
	ErrMalformedCommand = errors.New("fsm: malformed command")
	// ErrInvalidCommand is wrapped by Command.Validate (and put in a Result)
	// when a well-formed command breaks a rule or a limit.
	ErrInvalidCommand = errors.New("fsm: invalid command")
	// ErrWrongShard is returned by Open when the data dir was created for
	// another shard.
	ErrWrongShard = errors.New("fsm: data dir belongs to another shard")
	// ErrBadSnapshot is returned by Restore when the snapshot stream is
	// corrupt, truncated, or belongs to another shard.
	ErrBadSnapshot = errors.New("fsm: bad snapshot")
	// ErrRestoring is returned by reads, Snapshot and applies while a
	// Restore is running or after one failed part way; the replica's data
	// is incomplete until a Restore succeeds.
	ErrRestoring = errors.New("fsm: restore in progress or incomplete")
)

// Op selects what a Command does. New compound operations get a new Op and a
// case in Command.Validate and in the FSM's apply switch.
type Op uint8

const (
	// OpBatch is a guarded batch: check every Guard, then, only if all hold,
	// apply every Mutation in order.
	OpBatch Op = 1
	// OpNoop changes nothing but the applied index. A new leader proposes
	// one so that its state machine sees an entry of its own term
	// (hashicorp/raft never hands its own no-op and barrier entries to the
	// FSM); linearizable reads wait for it.
	OpNoop Op = 2
)

// GuardKind is the condition a Guard checks.
type GuardKind uint8

const (
	GuardExists GuardKind = 1 // the key is present
	GuardAbsent GuardKind = 2 // the key is absent
	GuardEquals GuardKind = 3 // the key is present and its value equals Value
)

// MutationKind is the write a Mutation makes.
type MutationKind uint8

const (
	MutPut    MutationKind = 1 // set Key to Value (an empty Value is allowed)
	MutDelete MutationKind = 2 // delete Key (absent is not an error)
)

// Guard is one condition of a Batch.
type Guard struct {
	Kind  GuardKind `cbor:"k"`
	Key   []byte    `cbor:"key"`
	Value []byte    `cbor:"v,omitempty"`
}

// Mutation is one write of a Batch.
type Mutation struct {
	Kind  MutationKind `cbor:"k"`
	Key   []byte       `cbor:"key"`
	Value []byte       `cbor:"v,omitempty"`
}

// Batch is a compare-then-write transaction on one shard, like an etcd Txn
// without an else branch.
type Batch struct {
	Guards    []Guard    `cbor:"g,omitempty"`
	Mutations []Mutation `cbor:"m,omitempty"`
}

// Command is the payload of one Raft log entry of type raft.LogCommand.
type Command struct {
	Op    Op     `cbor:"op"`
	Batch *Batch `cbor:"batch,omitempty"`
}

// Result is what one applied log entry returns through raft's
// ApplyFuture.Response(), as a *Result.
type Result struct {
	Index       uint64 // the log index
	Succeeded   bool   // all guards held and mutations were written
	FailedGuard int    // index of the first failing guard when !Succeeded, else -1
	Deleted     int    // number of MutDelete whose key existed when it ran
	Err         error  // a deterministic rejection (malformed/invalid command), or a fatal storage error: nothing written
}

// commandVersion is the first byte of an encoded command.
const commandVersion = 0x01

// maxDecodeArray bounds CBOR arrays during decoding, before Validate applies
// the configured Limits.MaxBatchOps (whose cap, maxBatchOpsCap, is lower).
const maxDecodeArray = 1 << 16

var (
	encMode cbor.UserBufferEncMode
	decMode cbor.DecMode
)

func init() {
	var err error
	if encMode, err = cbor.CoreDetEncOptions().UserBufferEncMode(); err != nil {
		panic(err) // constant options: a programming error
	}
	decMode, err = cbor.DecOptions{
		DupMapKey:         cbor.DupMapKeyEnforcedAPF,
		MaxNestedLevels:   8,
		MaxArrayElements:  maxDecodeArray,
		MaxMapPairs:       16,
		IndefLength:       cbor.IndefLengthForbidden,
		TagsMd:            cbor.TagsForbidden,
		ExtraReturnErrors: cbor.ExtraDecErrorUnknownField,
		FieldNameMatching: cbor.FieldNameMatchingCaseSensitive,
	}.DecMode()
	if err != nil {
		panic(err) // constant options: a programming error
	}
}

// EncodeCommand returns the log entry bytes of c: the format version byte
// 0x01 followed by the deterministic (Core Deterministic) CBOR encoding of c.
// It does not validate c.
func EncodeCommand(c *Command) ([]byte, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil command", ErrInvalidCommand)
	}
	var buf bytes.Buffer
	buf.Grow(64 + c.approxSize())
	buf.WriteByte(commandVersion)
	if err := encMode.MarshalToBuffer(c, &buf); err != nil {
		return nil, fmt.Errorf("fsm: encode command: %w", err)
	}
	return buf.Bytes(), nil
}

// approxSize is the payload size of c, to size the encoding buffer.
func (c *Command) approxSize() int {
	if c.Batch == nil {
		return 0
	}
	n := 0
	for i := range c.Batch.Guards {
		n += 16 + len(c.Batch.Guards[i].Key) + len(c.Batch.Guards[i].Value)
	}
	for i := range c.Batch.Mutations {
		n += 16 + len(c.Batch.Mutations[i].Key) + len(c.Batch.Mutations[i].Value)
	}
	return n
}

// DecodeCommand parses log entry bytes made by EncodeCommand. It is strict:
// an unknown version byte, trailing bytes, unknown or duplicate map keys,
// tags, indefinite lengths, out-of-range integers and oversized arrays are
// errors wrapping ErrMalformedCommand. Empty byte strings and arrays decode
// as nil, so that DecodeCommand(EncodeCommand(c)) is stable. It does not
// validate the command: see Command.Validate.
func DecodeCommand(b []byte) (*Command, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrMalformedCommand)
	}
	if b[0] != commandVersion {
		return nil, fmt.Errorf("%w: unknown format version %d", ErrMalformedCommand, b[0])
	}
	c := new(Command)
	if err := decMode.Unmarshal(b[1:], c); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformedCommand, err)
	}
	c.normalize()
	return c, nil
}

// normalize turns empty slices into nil (the encoder omits both alike).
func (c *Command) normalize() {
	if c.Batch == nil {
		return
	}
	if len(c.Batch.Guards) == 0 {
		c.Batch.Guards = nil
	}
	if len(c.Batch.Mutations) == 0 {
		c.Batch.Mutations = nil
	}
	for i := range c.Batch.Guards {
		g := &c.Batch.Guards[i]
		g.Key, g.Value = nilIfEmpty(g.Key), nilIfEmpty(g.Value)
	}
	for i := range c.Batch.Mutations {
		m := &c.Batch.Mutations[i]
		m.Key, m.Value = nilIfEmpty(m.Key), nilIfEmpty(m.Value)
	}
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// Validate checks c against the rules and the limits l (zero fields of l
// take their defaults). The error wraps ErrInvalidCommand and says which
// guard or mutation broke which rule.
func (c *Command) Validate(l Limits) error {
	l = l.WithDefaults()
	switch c.Op {
	case OpBatch:
		if c.Batch == nil {
			return fmt.Errorf("%w: op batch: missing batch", ErrInvalidCommand)
		}
		return c.Batch.validate(l)
	case OpNoop:
		if c.Batch != nil {
			return fmt.Errorf("%w: op noop: carries a batch", ErrInvalidCommand)
		}
		return nil
	default:
		return fmt.Errorf("%w: unknown op %d", ErrInvalidCommand, c.Op)
	}
}

func (b *Batch) validate(l Limits) error {
	if n := len(b.Guards) + len(b.Mutations); n > l.MaxBatchOps {
		return fmt.Errorf("%w: batch has %d guards+mutations, limit %d", ErrInvalidCommand, n, l.MaxBatchOps)
	}
	for i := range b.Guards {
		g := &b.Guards[i]
		if err := validateKey(g.Key, l); err != nil {
			return fmt.Errorf("%w: guard %d: %s", ErrInvalidCommand, i, err)
		}
		switch g.Kind {
		case GuardExists, GuardAbsent:
			if len(g.Value) > 0 {
				return fmt.Errorf("%w: guard %d: value given for an exists/absent guard", ErrInvalidCommand, i)
			}
		case GuardEquals:
			if len(g.Value) > l.MaxValueSize {
				return fmt.Errorf("%w: guard %d: value is %d bytes, limit %d", ErrInvalidCommand, i, len(g.Value), l.MaxValueSize)
			}
		default:
			return fmt.Errorf("%w: guard %d: unknown guard kind %d", ErrInvalidCommand, i, g.Kind)
		}
	}
	for i := range b.Mutations {
		m := &b.Mutations[i]
		if err := validateKey(m.Key, l); err != nil {
			return fmt.Errorf("%w: mutation %d: %s", ErrInvalidCommand, i, err)
		}
		switch m.Kind {
		case MutPut:
			if len(m.Value) > l.MaxValueSize {
				return fmt.Errorf("%w: mutation %d: value is %d bytes, limit %d", ErrInvalidCommand, i, len(m.Value), l.MaxValueSize)
			}
		case MutDelete:
			if len(m.Value) > 0 {
				return fmt.Errorf("%w: mutation %d: value given for a delete", ErrInvalidCommand, i)
			}
		default:
			return fmt.Errorf("%w: mutation %d: unknown mutation kind %d", ErrInvalidCommand, i, m.Kind)
		}
	}
	return nil
}

// validateKey returns a message (not an error chain) describing what is
// wrong with key, or nil.
func validateKey(key []byte, l Limits) error {
	switch {
	case len(key) == 0:
		return errors.New("empty key")
	case len(key) > l.MaxKeySize:
		return fmt.Errorf("key is %d bytes, limit %d", len(key), l.MaxKeySize)
	case key[0] == metaPrefix:
		return errors.New("key is in the reserved meta table (first byte 0x00)")
	}
	return nil
}
