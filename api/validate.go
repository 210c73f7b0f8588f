package api

import (
	"fmt"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/rpc"
)

// invalid is a request validation error: it wraps cluster.ErrInvalidArgument,
// which the error table answers with codes.InvalidArgument and the message.
func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", cluster.ErrInvalidArgument, fmt.Sprintf(format, a...))
}

func validateRoutingKey(rk []byte) error {
	switch {
	case len(rk) == 0:
		return invalid("routing key is empty")
	case len(rk) > keys.MaxRoutingKeyLen:
		return invalid("routing key is %d bytes, limit %d", len(rk), keys.MaxRoutingKeyLen)
	}
	return nil
}

func validateKey(k []byte, l fsm.Limits) error {
	switch {
	case len(k) == 0:
		return invalid("key is empty")
	case len(k) > l.MaxKeySize:
		return invalid("key is %d bytes, limit %d", len(k), l.MaxKeySize)
	}
	return nil
}

func validateValue(v []byte, l fsm.Limits) error {
	if len(v) > l.MaxValueSize {
		return invalid("value is %d bytes, limit %d", len(v), l.MaxValueSize)
	}
	return nil
}

// ValidateGet checks a Get request against the limits.
func ValidateGet(req *rpc.GetRequest, l fsm.Limits) error {
	if err := validateRoutingKey(req.GetRoutingKey()); err != nil {
		return err
	}
	if err := validateConsistency(req.GetConsistency()); err != nil {
		return err
	}
	return validateKey(req.GetKey(), l)
}

func validateConsistency(c rpc.Consistency) error {
	if _, ok := rpc.Consistency_name[int32(c)]; !ok {
		return invalid("unknown consistency %d", c)
	}
	return nil
}

// ValidatePut checks a Put request against the limits.
func ValidatePut(req *rpc.PutRequest, l fsm.Limits) error {
	if err := validateRoutingKey(req.GetRoutingKey()); err != nil {
		return err
	}
	if err := validateKey(req.GetKey(), l); err != nil {
		return err
	}
	if err := validateAttachLease(req.GetLease(), req.GetRoutingKey()); err != nil {
		return err
	}
	return validateValue(req.GetValue(), l)
}

// ValidateDelete checks a Delete request against the limits.
func ValidateDelete(req *rpc.DeleteRequest, l fsm.Limits) error {
	if err := validateRoutingKey(req.GetRoutingKey()); err != nil {
		return err
	}
	return validateKey(req.GetKey(), l)
}

// ValidateScan checks a Scan request against the limits.
func ValidateScan(req *rpc.ScanRequest, l fsm.Limits) error {
	if err := validateRoutingKey(req.GetRoutingKey()); err != nil {
		return err
	}
	if err := validateConsistency(req.GetConsistency()); err != nil {
		return err
	}
	if len(req.GetPrefix()) > l.MaxKeySize {
		return invalid("prefix is %d bytes, limit %d", len(req.GetPrefix()), l.MaxKeySize)
	}
	if len(req.GetStartAfter()) > l.MaxKeySize {
		return invalid("start_after is %d bytes, limit %d", len(req.GetStartAfter()), l.MaxKeySize)
	}
	return nil
}

// ValidateBatch checks a Batch request against the limits.
func ValidateBatch(req *rpc.BatchRequest, l fsm.Limits) error {
	if err := validateRoutingKey(req.GetRoutingKey()); err != nil {
		return err
	}
	n := len(req.GetGuards()) + len(req.GetOps())
	if len(req.GetOps()) == 0 {
		return invalid("batch has no ops")
	}
	if n > l.MaxBatchOps {
		return invalid("batch has %d guards and ops, limit %d", n, l.MaxBatchOps)
	}
	total := 0
	for i, g := range req.GetGuards() {
		if err := validateKey(g.GetKey(), l); err != nil {
			return fmt.Errorf("guard %d: %w", i, err)
		}
		switch g.GetKind() {
		case rpc.Guard_KIND_EXISTS, rpc.Guard_KIND_ABSENT:
			if len(g.GetValue()) > 0 {
				return invalid("guard %d: %s takes no value", i, g.GetKind())
			}
		case rpc.Guard_KIND_EQUALS:
			if err := validateValue(g.GetValue(), l); err != nil {
				return fmt.Errorf("guard %d: %w", i, err)
			}
		default:
			return invalid("guard %d: unknown kind %d", i, g.GetKind())
		}
		total += len(g.GetKey()) + len(g.GetValue())
	}
	for i, op := range req.GetOps() {
		if err := validateKey(op.GetKey(), l); err != nil {
			return fmt.Errorf("op %d: %w", i, err)
		}
		switch op.GetKind() {
		case rpc.Op_KIND_PUT:
			if err := validateValue(op.GetValue(), l); err != nil {
				return fmt.Errorf("op %d: %w", i, err)
			}
			if err := validateAttachLease(op.GetLease(), req.GetRoutingKey()); err != nil {
				return fmt.Errorf("op %d: %w", i, err)
			}
		case rpc.Op_KIND_DELETE:
			if len(op.GetValue()) > 0 {
				return invalid("op %d: delete takes no value", i)
			}
			if op.GetLease() != 0 {
				return invalid("op %d: delete takes no lease", i)
			}
		default:
			return invalid("op %d: unknown kind %d", i, op.GetKind())
		}
		total += len(op.GetKey()) + len(op.GetValue())
	}
	if limit := l.MaxValueSize + l.MaxKeySize; total > limit {
		return invalid("batch carries %d bytes of keys and values, limit %d", total, limit)
	}
	return nil
}

// batchCommand turns a validated Batch request into a state machine
// command whose keys are scoped by the routing key.
func batchCommand(req *rpc.BatchRequest) *fsm.Command {
	rk := req.GetRoutingKey()
	b := &fsm.Batch{}
	for _, g := range req.GetGuards() {
		fg := fsm.Guard{Key: keys.KV(rk, g.GetKey())}
		switch g.GetKind() {
		case rpc.Guard_KIND_EXISTS:
			fg.Kind = fsm.GuardExists
		case rpc.Guard_KIND_ABSENT:
			fg.Kind = fsm.GuardAbsent
		case rpc.Guard_KIND_EQUALS:
			fg.Kind, fg.Value = fsm.GuardEquals, g.GetValue()
		}
		b.Guards = append(b.Guards, fg)
	}
	for _, op := range req.GetOps() {
		m := fsm.Mutation{Key: keys.KV(rk, op.GetKey())}
		switch op.GetKind() {
		case rpc.Op_KIND_PUT:
			m.Kind, m.Value, m.Lease = fsm.MutPut, op.GetValue(), op.GetLease()
		case rpc.Op_KIND_DELETE:
			m.Kind = fsm.MutDelete
		}
		b.Mutations = append(b.Mutations, m)
	}
	return &fsm.Command{Op: fsm.OpBatch, Batch: b}
}
