package fsm

import (
	"fmt"
)

// commandSpec is one operation, as its file (cmd_<name>.go) declares it
// and registers it in commands: everything the state machine does with a
// command of that op goes through it, as CockroachDB's batcheval registers
// one command per file (batcheval/cmd_put.go). Adding an operation is its
// Op constant, its file, which registers its spec at init, and its fields
// on Command (the proto).
type commandSpec struct {
	// name is the op's snake_case name (Op.String).
	name string
	// fields are the Command fields the op requires, optional those it
	// may carry (Validate refuses any other).
	fields, optional field
	// since is the cluster protocol version that brought the op (package
	// cluster, version.go; 0 or 1: version 1); sinceOf, if set, is the
	// version a command of the op needs for the fields it carries (a new
	// field that binaries before it would ignore). Until the cluster runs
	// Command.Since, every shard replica refuses to propose the command
	// (cluster.Node.CheckCommand as replica.Config.Admit:
	// FailedPrecondition, nothing proposed), so no replica of an older
	// binary ever applies what it does not know.
	since   int
	sinceOf func(c *Command) int
	// solo ops are entries of their own, never carried by an OpMulti (not
	// Coalescable).
	solo bool

	// validate checks the op's own rules, after Validate checked the
	// field set and the time; nil: none. The error wraps
	// ErrInvalidCommand.
	validate func(c *Command, l Limits) error
	// routingKey is the slot derivation of a command: the routing key its
	// fields name (applyRecord checks its slot before it runs; the history
	// records it with the events of keys that do not carry their own), nil
	// when it names none.
	routingKey func(c *Command) []byte
	// apply applies a validated command into the run's batch at log
	// index. The error is a storage error (fatal); a rejection is res.Err.
	apply func(a *applier, c *Command, index uint64, res *Result) error
	// history records the command's events (the i-th command of its
	// entry; off is the batch length before it applied) in a.hist; nil:
	// the user-data writes it made (recordWrites).
	history func(a *applier, c *Command, i int, index uint64, res *Result, off int) error

	// The registry, billing and pool ops are changes (registry.go): they
	// set run, and register sets validate to validateRecordCmd (rule is
	// their own check, after the records and ids) and apply to
	// applyRecord.
	run  func(ch *change, c *Command) (balance int64, removed int, err error)
	rule func(c *Command) error
	// recordKey is the key of the record a change reports in
	// Result.Record; nil: none.
	recordKey func(c *Command) []byte

	// entry, for OpMulti only, applies a whole entry instead of apply:
	// its response is not one *Result. subs are the commands Own holds
	// for the entry (nil: decode them).
	entry func(a *applier, index uint64, cmd *Command, subs []*Command) (interface{}, error)
}

// commands is the dispatch table: commands[op] is op's spec, nil for an
// unknown op. The cmd_*.go files fill it at init (register); it is read
// only afterwards.
var commands commandTable

type commandTable [256]*commandSpec

// register adds op's spec to t. It panics (at init: a programming error)
// on an op registered twice or numbered 0, a spec without a name or one
// another op has, without apply (or run, or, for OpMulti, entry) or with
// two of them, a required field also optional, or a rule or recordKey
// without run.
func (t *commandTable) register(op Op, sp *commandSpec) {
	refuse := func(why string) { panic(fmt.Sprintf("fsm: register op %d (%q): %s", uint8(op), sp.name, why)) }
	if sp == nil {
		panic(fmt.Sprintf("fsm: register op %d: nil spec", uint8(op)))
	}
	switch {
	case op == 0:
		refuse("op 0 is not an op")
	case t[op] != nil:
		refuse("registered twice (first as " + t[op].name + ")")
	case sp.name == "":
		refuse("no name")
	case sp.fields&sp.optional != 0:
		refuse("a field both required and optional")
	case (sp.rule != nil || sp.recordKey != nil) && sp.run == nil:
		refuse("rule or recordKey without run")
	case sp.since < 0:
		refuse("negative version")
	}
	n := 0
	for _, set := range [...]bool{sp.apply != nil, sp.run != nil, sp.entry != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		refuse("want exactly one of apply, run and entry")
	}
	if sp.run != nil && sp.validate != nil {
		refuse("a change validates with rule, not validate")
	}
	for o, other := range t {
		if other != nil && other.name == sp.name {
			refuse(fmt.Sprintf("name taken by op %d", o))
		}
	}
	if sp.run != nil {
		sp.validate, sp.apply = validateRecordCmd, applyRecord
	}
	t[op] = sp
}

// spec returns op's spec, nil for an unknown op.
func (o Op) spec() *commandSpec { return commands[o] }

// commandRoutingKey returns the routing key a command names in its fields
// (the spec's routingKey), or nil when it names none (an OpBatch, whose
// keys carry theirs; OpUpdateSessionStatus without UserID: the slot of the
// session it touches is checked when it writes).
func commandRoutingKey(c *Command) []byte {
	if sp := c.Op.spec(); sp != nil && sp.routingKey != nil {
		return sp.routingKey(c)
	}
	return nil
}

// recordKey is the key of the record op c updates and reports in
// Result.Record, nil for an op that reports none.
func recordKey(c *Command) []byte {
	if sp := c.Op.spec(); sp != nil && sp.recordKey != nil {
		return sp.recordKey(c)
	}
	return nil
}

// recordWrites is the default history of a command: the user-data writes
// it made, with its routing key.
func recordWrites(a *applier, c *Command, i int, off int) error {
	if a.b.Len() <= off {
		return nil
	}
	return a.hist.addWrites(a.b.Repr()[off:], i, commandRoutingKey(c))
}

// noHistory is the history of an op that records no events (the slot move
// ops but a freeze and an adopt, OpCompactHistory).
func noHistory(*applier, *Command, int, uint64, *Result, int) error { return nil }
