package api

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/rpc"
)

// Limit sets the validators are tested with: the defaults, a small custom
// set (so that limits are cheap to reach), and the configurable caps.
// The largest limits a Config may set (cluster.Config.Validate).
const (
	maxKeySizeLimit   = cluster.MaxKeySizeLimit
	maxValueSizeLimit = cluster.MaxValueSizeLimit
	maxBatchOpsLimit  = cluster.MaxBatchOpsLimit
)

// applyLimits are the state machine's apply-time limits.
var applyLimits = cluster.ApplyLimits()

var (
	valDefaults = fsm.Limits{}.WithDefaults()
	valSmall    = fsm.Limits{MaxKeySize: 8, MaxValueSize: 16, MaxBatchOps: 4}
	valCaps     = fsm.Limits{MaxKeySize: maxKeySizeLimit, MaxValueSize: maxValueSizeLimit, MaxBatchOps: maxBatchOpsLimit}
)

// valBytes returns n bytes (nil for n == 0) that are not all alike.
func valBytes(n int) []byte {
	if n == 0 {
		return nil
	}
	return bytes.Repeat([]byte("abcdefghijklmnopqrstuvwxyz"), n/26+1)[:n]
}

func valPut(k, v []byte) *rpc.Op    { return &rpc.Op{Kind: rpc.Op_KIND_PUT, Key: k, Value: v} }
func valDel(k []byte) *rpc.Op       { return &rpc.Op{Kind: rpc.Op_KIND_DELETE, Key: k} }
func valExists(k []byte) *rpc.Guard { return &rpc.Guard{Kind: rpc.Guard_KIND_EXISTS, Key: k} }

// valCheck fails unless err is nil when want is "", or wraps
// cluster.ErrInvalidArgument and contains want.
func valCheck(t *testing.T, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("rejected a valid request: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("accepted, want an error containing %q", want)
	}
	if !errors.Is(err, cluster.ErrInvalidArgument) {
		t.Fatalf("error %q does not wrap cluster.ErrInvalidArgument", err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not contain %q", err, want)
	}
}

func TestValidateGetPutDelete(t *testing.T) {
	rk := []byte("alice")
	maxRK := valBytes(keys.MaxRoutingKeyLen)
	longRK := valBytes(keys.MaxRoutingKeyLen + 1)
	for _, tc := range []struct {
		name        string
		l           fsm.Limits
		rk, key     []byte
		value       []byte
		consistency rpc.Consistency
		want        string // "" = valid
		wantPut     string // Put's verdict when it differs from want (the value)
	}{
		{name: "valid", l: valDefaults, rk: rk, key: []byte("k"), value: []byte("v")},
		{name: "stale", l: valDefaults, rk: rk, key: []byte("k"), consistency: rpc.Consistency_CONSISTENCY_STALE},
		{name: "empty value", l: valDefaults, rk: rk, key: []byte("k")},
		{name: "limits exactly", l: valDefaults, rk: maxRK, key: valBytes(4096), value: valBytes(1 << 20)},
		{name: "small limits exactly", l: valSmall, rk: maxRK, key: valBytes(8), value: valBytes(16)},
		{name: "caps exactly", l: valCaps, rk: maxRK, key: valBytes(maxKeySizeLimit), value: valBytes(1)},
		{name: "empty routing key", l: valDefaults, key: []byte("k"), want: "routing key is empty"},
		{name: "long routing key", l: valDefaults, rk: longRK, key: []byte("k"), want: "routing key is 1025 bytes, limit 1024"},
		{name: "empty key", l: valDefaults, rk: rk, want: "key is empty"},
		{name: "long key", l: valDefaults, rk: rk, key: valBytes(4097), want: "key is 4097 bytes, limit 4096"},
		{name: "long key small limits", l: valSmall, rk: rk, key: valBytes(9), want: "key is 9 bytes, limit 8"},
		{name: "big value", l: valDefaults, rk: rk, key: []byte("k"), value: valBytes(1<<20 + 1), wantPut: "value is 1048577 bytes, limit 1048576"},
		{name: "big value small limits", l: valSmall, rk: rk, key: []byte("k"), value: valBytes(17), wantPut: "value is 17 bytes, limit 16"},
		// The routing key is checked first.
		{name: "everything wrong", l: valDefaults, key: valBytes(5000), value: valBytes(2 << 20), want: "routing key is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantPut := tc.want
			if tc.wantPut != "" {
				wantPut = tc.wantPut
			}
			t.Run("put", func(t *testing.T) {
				valCheck(t, ValidatePut(&rpc.PutRequest{RoutingKey: tc.rk, Key: tc.key, Value: tc.value}, tc.l), wantPut)
			})
			t.Run("get", func(t *testing.T) {
				valCheck(t, ValidateGet(&rpc.GetRequest{RoutingKey: tc.rk, Key: tc.key, Consistency: tc.consistency}, tc.l), tc.want)
			})
			t.Run("delete", func(t *testing.T) {
				valCheck(t, ValidateDelete(&rpc.DeleteRequest{RoutingKey: tc.rk, Key: tc.key}, tc.l), tc.want)
			})
		})
	}
	t.Run("get unknown consistency", func(t *testing.T) {
		valCheck(t, ValidateGet(&rpc.GetRequest{RoutingKey: rk, Key: []byte("k"), Consistency: 2}, valDefaults), "unknown consistency 2")
		valCheck(t, ValidateGet(&rpc.GetRequest{RoutingKey: rk, Key: []byte("k"), Consistency: -1}, valDefaults), "unknown consistency -1")
	})
	t.Run("nil requests", func(t *testing.T) {
		valCheck(t, ValidateGet(nil, valDefaults), "routing key is empty")
		valCheck(t, ValidatePut(nil, valDefaults), "routing key is empty")
		valCheck(t, ValidateDelete(nil, valDefaults), "routing key is empty")
		valCheck(t, ValidateScan(nil, valDefaults), "routing key is empty")
		valCheck(t, ValidateBatch(nil, valDefaults), "routing key is empty")
	})
}

func TestValidateScan(t *testing.T) {
	rk := []byte("alice")
	for _, tc := range []struct {
		name string
		l    fsm.Limits
		req  *rpc.ScanRequest
		want string
	}{
		{"all keys", valDefaults, &rpc.ScanRequest{RoutingKey: rk}, ""},
		{"stale page", valDefaults, &rpc.ScanRequest{RoutingKey: rk, Limit: 1 << 31, Consistency: rpc.Consistency_CONSISTENCY_STALE}, ""},
		{"limits exactly", valDefaults, &rpc.ScanRequest{RoutingKey: valBytes(keys.MaxRoutingKeyLen), Prefix: valBytes(4096), StartAfter: valBytes(4096)}, ""},
		{"small limits exactly", valSmall, &rpc.ScanRequest{RoutingKey: rk, Prefix: valBytes(8), StartAfter: valBytes(8)}, ""},
		{"empty routing key", valDefaults, &rpc.ScanRequest{Prefix: []byte("p")}, "routing key is empty"},
		{"long routing key", valDefaults, &rpc.ScanRequest{RoutingKey: valBytes(keys.MaxRoutingKeyLen + 1)}, "routing key is 1025 bytes, limit 1024"},
		{"unknown consistency", valDefaults, &rpc.ScanRequest{RoutingKey: rk, Consistency: 7}, "unknown consistency 7"},
		{"long prefix", valDefaults, &rpc.ScanRequest{RoutingKey: rk, Prefix: valBytes(4097)}, "prefix is 4097 bytes, limit 4096"},
		{"long prefix small limits", valSmall, &rpc.ScanRequest{RoutingKey: rk, Prefix: valBytes(9)}, "prefix is 9 bytes, limit 8"},
		{"long start_after", valDefaults, &rpc.ScanRequest{RoutingKey: rk, StartAfter: valBytes(4097)}, "start_after is 4097 bytes, limit 4096"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			valCheck(t, ValidateScan(tc.req, tc.l), tc.want)
		})
	}
}

func TestValidateBatch(t *testing.T) {
	rk := []byte("alice")
	k := []byte("k")
	ops := func(n int) []*rpc.Op {
		out := make([]*rpc.Op, n)
		for i := range out {
			out[i] = valDel([]byte(fmt.Sprintf("k%d", i)))
		}
		return out
	}
	guards := func(n int) []*rpc.Guard {
		out := make([]*rpc.Guard, n)
		for i := range out {
			out[i] = valExists([]byte(fmt.Sprintf("g%d", i)))
		}
		return out
	}
	for _, tc := range []struct {
		name string
		l    fsm.Limits
		req  *rpc.BatchRequest
		want string // "" = valid
	}{
		{"one put", valDefaults, &rpc.BatchRequest{RoutingKey: rk, Ops: []*rpc.Op{valPut(k, []byte("v"))}}, ""},
		{"every kind", valDefaults, &rpc.BatchRequest{RoutingKey: rk,
			Guards: []*rpc.Guard{
				valExists(k),
				{Kind: rpc.Guard_KIND_ABSENT, Key: []byte("lock")},
				{Kind: rpc.Guard_KIND_EQUALS, Key: []byte("x"), Value: []byte("1")},
				{Kind: rpc.Guard_KIND_EQUALS, Key: []byte("y")},
			},
			Ops: []*rpc.Op{valPut([]byte("lock"), []byte("me")), valPut([]byte("empty"), nil), valDel(k)}}, ""},
		{"max ops", valDefaults, &rpc.BatchRequest{RoutingKey: rk, Ops: ops(1024)}, ""},
		{"max guards and ops", valDefaults, &rpc.BatchRequest{RoutingKey: rk, Guards: guards(1000), Ops: ops(24)}, ""},
		{"max ops small limits", valSmall, &rpc.BatchRequest{RoutingKey: rk, Guards: guards(3), Ops: ops(1)}, ""},
		{"limits exactly", valDefaults, &rpc.BatchRequest{RoutingKey: valBytes(keys.MaxRoutingKeyLen),
			Ops: []*rpc.Op{valPut(valBytes(4096), valBytes(1<<20))}}, ""},
		{"total bytes exactly", valSmall, &rpc.BatchRequest{RoutingKey: rk,
			Guards: []*rpc.Guard{{Kind: rpc.Guard_KIND_EQUALS, Key: valBytes(4), Value: valBytes(8)}},
			Ops:    []*rpc.Op{valPut(valBytes(4), valBytes(8))}}, ""},
		{"empty routing key", valDefaults, &rpc.BatchRequest{Ops: []*rpc.Op{valDel(k)}}, "routing key is empty"},
		{"long routing key", valDefaults, &rpc.BatchRequest{RoutingKey: valBytes(keys.MaxRoutingKeyLen + 1), Ops: []*rpc.Op{valDel(k)}}, "routing key is 1025 bytes, limit 1024"},
		{"empty batch", valDefaults, &rpc.BatchRequest{RoutingKey: rk}, "batch has no ops"},
		{"guards only", valDefaults, &rpc.BatchRequest{RoutingKey: rk, Guards: []*rpc.Guard{valExists(k)}}, "batch has no ops"},
		{"too many ops", valDefaults, &rpc.BatchRequest{RoutingKey: rk, Ops: ops(1025)}, "batch has 1025 guards and ops, limit 1024"},
		{"too many guards and ops", valSmall, &rpc.BatchRequest{RoutingKey: rk, Guards: guards(4), Ops: ops(1)}, "batch has 5 guards and ops, limit 4"},
		{"guard empty key", valDefaults, &rpc.BatchRequest{RoutingKey: rk, Guards: []*rpc.Guard{valExists(k), valExists(nil)}, Ops: []*rpc.Op{valDel(k)}}, "guard 1: invalid argument: key is empty"},
		{"guard long key", valSmall, &rpc.BatchRequest{RoutingKey: rk, Guards: []*rpc.Guard{valExists(valBytes(9))}, Ops: []*rpc.Op{valDel(k)}}, "guard 0: invalid argument: key is 9 bytes, limit 8"},
		{"guard unspecified kind", valDefaults, &rpc.BatchRequest{RoutingKey: rk, Guards: []*rpc.Guard{{Key: k}}, Ops: []*rpc.Op{valDel(k)}}, "guard 0: unknown kind 0"},
		{"guard unknown kind", valDefaults, &rpc.BatchRequest{RoutingKey: rk, Guards: []*rpc.Guard{{Kind: 4, Key: k}}, Ops: []*rpc.Op{valDel(k)}}, "guard 0: unknown kind 4"},
		{"guard negative kind", valDefaults, &rpc.BatchRequest{RoutingKey: rk, Guards: []*rpc.Guard{{Kind: -1, Key: k}}, Ops: []*rpc.Op{valDel(k)}}, "guard 0: unknown kind -1"},
		{"exists with value", valDefaults, &rpc.BatchRequest{RoutingKey: rk, Guards: []*rpc.Guard{{Kind: rpc.Guard_KIND_EXISTS, Key: k, Value: []byte("v")}}, Ops: []*rpc.Op{valDel(k)}}, "guard 0: KIND_EXISTS takes no value"},
		{"absent with value", valDefaults, &rpc.BatchRequest{RoutingKey: rk, Guards: []*rpc.Guard{valExists(k), {Kind: rpc.Guard_KIND_ABSENT, Key: k, Value: []byte("v")}}, Ops: []*rpc.Op{valDel(k)}}, "guard 1: KIND_ABSENT takes no value"},
		{"equals big value", valSmall, &rpc.BatchRequest{RoutingKey: rk, Guards: []*rpc.Guard{{Kind: rpc.Guard_KIND_EQUALS, Key: k, Value: valBytes(17)}}, Ops: []*rpc.Op{valDel(k)}}, "guard 0: invalid argument: value is 17 bytes, limit 16"},
		{"op empty key", valDefaults, &rpc.BatchRequest{RoutingKey: rk, Ops: []*rpc.Op{valDel(k), valPut(nil, []byte("v"))}}, "op 1: invalid argument: key is empty"},
		{"op long key", valDefaults, &rpc.BatchRequest{RoutingKey: rk, Ops: []*rpc.Op{valDel(valBytes(4097))}}, "op 0: invalid argument: key is 4097 bytes, limit 4096"},
		{"op big value", valDefaults, &rpc.BatchRequest{RoutingKey: rk, Ops: []*rpc.Op{valPut(k, valBytes(1<<20+1))}}, "op 0: invalid argument: value is 1048577 bytes, limit 1048576"},
		{"op unspecified kind", valDefaults, &rpc.BatchRequest{RoutingKey: rk, Ops: []*rpc.Op{{Key: k}}}, "op 0: unknown kind 0"},
		{"op unknown kind", valDefaults, &rpc.BatchRequest{RoutingKey: rk, Ops: []*rpc.Op{{Kind: 3, Key: k}}}, "op 0: unknown kind 3"},
		{"delete with value", valDefaults, &rpc.BatchRequest{RoutingKey: rk, Ops: []*rpc.Op{{Kind: rpc.Op_KIND_DELETE, Key: k, Value: []byte("v")}}}, "op 0: delete takes no value"},
		{"total bytes over", valSmall, &rpc.BatchRequest{RoutingKey: rk,
			Guards: []*rpc.Guard{{Kind: rpc.Guard_KIND_EQUALS, Key: valBytes(4), Value: valBytes(8)}},
			Ops:    []*rpc.Op{valPut(valBytes(4), valBytes(9))}}, "batch carries 25 bytes of keys and values, limit 24"},
		{"total bytes over defaults", valDefaults, &rpc.BatchRequest{RoutingKey: rk,
			Ops: []*rpc.Op{valPut([]byte("a"), valBytes(1<<20)), valPut(valBytes(4096), nil)}}, "batch carries 1052673 bytes of keys and values, limit 1052672"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateBatch(tc.req, tc.l)
			valCheck(t, err, tc.want)
			if err == nil {
				valCheckBatchCommand(t, tc.req)
			}
		})
	}
}

// TestValidateBatchAtCaps: a batch at the largest configurable limits
// still makes a command the state machine accepts (applyLimits is at or
// above every limit Config.Validate lets through).
func TestValidateBatchAtCaps(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 64 MiB batch")
	}
	rk := valBytes(keys.MaxRoutingKeyLen)
	t.Run("sizes", func(t *testing.T) {
		req := &rpc.BatchRequest{RoutingKey: rk, Ops: []*rpc.Op{valPut(valBytes(maxKeySizeLimit), valBytes(maxValueSizeLimit))}}
		valCheck(t, ValidateBatch(req, valCaps), "")
		valCheckBatchCommand(t, req)
	})
	t.Run("ops", func(t *testing.T) {
		req := &rpc.BatchRequest{RoutingKey: []byte("r"), Guards: []*rpc.Guard{valExists(valBytes(maxKeySizeLimit))}}
		for i := range maxBatchOpsLimit - 1 {
			req.Ops = append(req.Ops, valDel([]byte{byte(i), byte(i >> 8)}))
		}
		valCheck(t, ValidateBatch(req, valCaps), "")
		valCheckBatchCommand(t, req)
		req.Ops = append(req.Ops, valDel(rk))
		valCheck(t, ValidateBatch(req, valCaps), "batch has 65537 guards and ops, limit 65536")
	})
}

// valCheckBatchCommand checks the command batchCommand makes of an
// accepted request: the state machine accepts it (applyLimits), it
// survives the log encoding unchanged, and each of its keys decodes to the
// request's routing key and key, with the kinds and values carried over.
func valCheckBatchCommand(t *testing.T, req *rpc.BatchRequest) {
	t.Helper()
	cmd := batchCommand(req)
	if err := cmd.Validate(applyLimits); err != nil {
		t.Fatalf("batchCommand of an accepted request fails the apply limits: %v", err)
	}
	enc, err := fsm.EncodeCommand(cmd)
	if err != nil {
		t.Fatalf("EncodeCommand: %v", err)
	}
	dec, err := fsm.DecodeCommand(enc)
	if err != nil {
		t.Fatalf("DecodeCommand(EncodeCommand(c)): %v", err)
	}
	if err := valCommandsEqual(cmd, dec); err != nil {
		t.Fatalf("command does not round-trip: %v", err)
	}
	if again, err := fsm.EncodeCommand(dec); err != nil || !bytes.Equal(again, enc) {
		t.Fatalf("re-encoding the decoded command differs (err %v)", err)
	}
	if err := dec.Validate(applyLimits); err != nil {
		t.Fatalf("decoded command fails the apply limits: %v", err)
	}

	if cmd.Op != fsm.OpBatch || cmd.Batch == nil {
		t.Fatalf("batchCommand made op %d, batch %v", cmd.Op, cmd.Batch)
	}
	b := cmd.Batch
	if len(b.Guards) != len(req.GetGuards()) || len(b.Mutations) != len(req.GetOps()) {
		t.Fatalf("batchCommand made %d guards, %d mutations of %d guards, %d ops",
			len(b.Guards), len(b.Mutations), len(req.GetGuards()), len(req.GetOps()))
	}
	checkKey := func(what string, i int, kvKey, want []byte) {
		t.Helper()
		rk, k, err := keys.DecodeKV(kvKey)
		if err != nil {
			t.Fatalf("%s %d: DecodeKV(%x): %v", what, i, kvKey, err)
		}
		if !bytes.Equal(rk, req.GetRoutingKey()) || !bytes.Equal(k, want) {
			t.Fatalf("%s %d: key decodes to (%q, %q), want (%q, %q)", what, i, rk, k, req.GetRoutingKey(), want)
		}
	}
	guardKinds := map[rpc.Guard_Kind]fsm.GuardKind{
		rpc.Guard_KIND_EXISTS: fsm.GuardExists, rpc.Guard_KIND_ABSENT: fsm.GuardAbsent, rpc.Guard_KIND_EQUALS: fsm.GuardEquals,
	}
	for i, g := range req.GetGuards() {
		checkKey("guard", i, b.Guards[i].Key, g.GetKey())
		if b.Guards[i].Kind != guardKinds[g.GetKind()] || !bytes.Equal(b.Guards[i].Value, g.GetValue()) {
			t.Fatalf("guard %d: %+v made of %v", i, b.Guards[i], g)
		}
	}
	opKinds := map[rpc.Op_Kind]fsm.MutationKind{rpc.Op_KIND_PUT: fsm.MutPut, rpc.Op_KIND_DELETE: fsm.MutDelete}
	for i, op := range req.GetOps() {
		checkKey("op", i, b.Mutations[i].Key, op.GetKey())
		if b.Mutations[i].Kind != opKinds[op.GetKind()] || !bytes.Equal(b.Mutations[i].Value, op.GetValue()) {
			t.Fatalf("op %d: %+v made of %v", i, b.Mutations[i], op)
		}
	}
}

// valCommandsEqual compares two commands; an empty byte string equals nil
// (DecodeCommand turns the empty strings the encoder omits into nil).
func valCommandsEqual(a, b *fsm.Command) error {
	if a.Op != b.Op || (a.Batch == nil) != (b.Batch == nil) {
		return fmt.Errorf("op %d batch %t, op %d batch %t", a.Op, a.Batch != nil, b.Op, b.Batch != nil)
	}
	if a.Batch == nil {
		return nil
	}
	ga, gb, ma, mb := a.Batch.Guards, b.Batch.Guards, a.Batch.Mutations, b.Batch.Mutations
	if len(ga) != len(gb) || len(ma) != len(mb) {
		return fmt.Errorf("%d/%d guards, %d/%d mutations", len(ga), len(gb), len(ma), len(mb))
	}
	for i := range ga {
		if ga[i].Kind != gb[i].Kind || !bytes.Equal(ga[i].Key, gb[i].Key) || !bytes.Equal(ga[i].Value, gb[i].Value) {
			return fmt.Errorf("guard %d: %+v != %+v", i, ga[i], gb[i])
		}
	}
	for i := range ma {
		if ma[i].Kind != mb[i].Kind || !bytes.Equal(ma[i].Key, mb[i].Key) || !bytes.Equal(ma[i].Value, mb[i].Value) {
			return fmt.Errorf("mutation %d: %+v != %+v", i, ma[i], mb[i])
		}
	}
	return nil
}

// valModelBatch is the reference the fuzz targets check ValidateBatch
// against: the rules written down one by one, with no shortcuts.
func valModelBatch(req *rpc.BatchRequest, l fsm.Limits) bool {
	rk := req.GetRoutingKey()
	if len(rk) < 1 || len(rk) > keys.MaxRoutingKeyLen {
		return false
	}
	if len(req.GetOps()) == 0 || len(req.GetGuards())+len(req.GetOps()) > l.MaxBatchOps {
		return false
	}
	keyOK := func(k []byte) bool { return len(k) >= 1 && len(k) <= l.MaxKeySize }
	total := 0
	for _, g := range req.GetGuards() {
		total += len(g.GetKey()) + len(g.GetValue())
		if !keyOK(g.GetKey()) {
			return false
		}
		switch g.GetKind() {
		case rpc.Guard_KIND_EXISTS, rpc.Guard_KIND_ABSENT:
			if len(g.GetValue()) != 0 {
				return false
			}
		case rpc.Guard_KIND_EQUALS:
			if len(g.GetValue()) > l.MaxValueSize {
				return false
			}
		default:
			return false
		}
	}
	for _, op := range req.GetOps() {
		total += len(op.GetKey()) + len(op.GetValue())
		if !keyOK(op.GetKey()) {
			return false
		}
		switch op.GetKind() {
		case rpc.Op_KIND_PUT:
			if len(op.GetValue()) > l.MaxValueSize {
				return false
			}
		case rpc.Op_KIND_DELETE:
			if len(op.GetValue()) != 0 {
				return false
			}
		default:
			return false
		}
	}
	return total <= l.MaxKeySize+l.MaxValueSize
}

// valFuzzReader turns fuzz bytes into a request. Every field is drawn from
// two bytes, [length code, fill]: a code below 0xf0 is the length itself,
// a code c from 0xf0 up is limit+c-0xf8 (the limit -8..+7), so that the
// limits are reachable from a short input. The content is fill, fill+1, ...
// An exhausted reader yields zeros.
type valFuzzReader struct{ b []byte }

func (r *valFuzzReader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *valFuzzReader) count(limit int) int {
	c := r.byte()
	if c < 0xf0 {
		return int(c)
	}
	return max(0, limit+int(c)-0xf8)
}

func (r *valFuzzReader) bytes(limit int) []byte {
	n, fill := r.count(limit), r.byte()
	if n == 0 {
		if fill&1 == 1 {
			return []byte{} // empty but not nil
		}
		return nil
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = fill + byte(i)
	}
	return b
}

// kind maps 0..7 to themselves and larger bytes to arbitrary (also
// negative) enum values.
func (r *valFuzzReader) kind() int32 {
	c := r.byte()
	if c < 8 {
		return int32(c)
	}
	return int32(int8(c)) * 1000
}

// valFuzzLimits picks the limit set of a fuzz input.
func valFuzzLimits(small bool) fsm.Limits {
	if small {
		return valSmall
	}
	return valDefaults
}

// batch reads [routing key][guards count][ops count] then each guard and
// op as [kind][key][value]. A count code from 0xf0 up repeats one guard
// (op) up to MaxBatchOps-8..+7 times.
func (r *valFuzzReader) batch(l fsm.Limits) *rpc.BatchRequest {
	req := &rpc.BatchRequest{RoutingKey: r.bytes(keys.MaxRoutingKeyLen)}
	gc, oc := r.byte(), r.byte()
	items := func(code byte, add func()) {
		if code < 0xf0 {
			for range code % 8 {
				add()
			}
			return
		}
		add()
	}
	items(gc, func() {
		req.Guards = append(req.Guards, &rpc.Guard{Kind: rpc.Guard_Kind(r.kind()), Key: r.bytes(l.MaxKeySize), Value: r.bytes(l.MaxValueSize)})
	})
	items(oc, func() {
		req.Ops = append(req.Ops, &rpc.Op{Kind: rpc.Op_Kind(r.kind()), Key: r.bytes(l.MaxKeySize), Value: r.bytes(l.MaxValueSize)})
	})
	repeat := func(code byte, n int) int { return max(0, l.MaxBatchOps+int(code)-0xf8-n) }
	if gc >= 0xf0 {
		for range repeat(gc, len(req.Guards)) {
			req.Guards = append(req.Guards, req.Guards[0])
		}
	}
	if oc >= 0xf0 {
		for range repeat(oc, len(req.Ops)) {
			req.Ops = append(req.Ops, req.Ops[0])
		}
	}
	return req
}

// Length codes for the seed corpus.
const (
	valAtLimit   = 0xf8
	valOverLimit = 0xf9
)

func FuzzValidateBatch(f *testing.F) {
	for _, seed := range []struct {
		small bool
		data  []byte
	}{
		// rk "abc", no guards, one put k=v.
		{false, []byte{3, 'a', 0, 1, 1, 1, 'k', 1, 'v'}},
		// Every guard kind and both op kinds.
		{false, []byte{5, 'u', 3, 2,
			1, 1, 'a', 0, 0, 2, 1, 'b', 0, 0, 3, 1, 'c', 2, 'x',
			1, 2, 'k', 3, 'v', 2, 1, 'k', 0, 0}},
		// Limits exactly: routing key, key, value.
		{false, []byte{valAtLimit, 'r', 0, 1, 1, valAtLimit, 'k', valAtLimit, 'v'}},
		{true, []byte{valAtLimit, 'r', 1, 1, 3, valAtLimit, 'k', valAtLimit, 'v', 1, valAtLimit, 'k', 0, 0}},
		// Over the limits, one at a time.
		{false, []byte{valOverLimit, 'r', 0, 1, 1, 1, 'k', 0, 0}},
		{true, []byte{3, 'r', 0, 1, 1, valOverLimit, 'k', 0, 0}},
		{true, []byte{3, 'r', 0, 1, 1, 1, 'k', valOverLimit, 'v'}},
		// Total bytes over: two values at the limit.
		{true, []byte{3, 'r', 0, 2, 1, 1, 'k', valAtLimit, 'v', 1, 1, 'l', valAtLimit, 'w'}},
		// Op counts at and over the limit.
		{false, []byte{3, 'r', 0, valAtLimit, 2, 2, 'k', 0, 0}},
		{false, []byte{3, 'r', valAtLimit, 1, 1, 1, 'g', 0, 0, 2, 1, 'k', 0, 0}},
		{true, []byte{3, 'r', 0, valOverLimit, 1, 1, 'k', 0, 0}},
		// Bad kinds, values where none is allowed, empty parts.
		{false, []byte{3, 'r', 1, 1, 0, 1, 'g', 0, 0, 1, 1, 'k', 0, 0}},
		{false, []byte{3, 'r', 1, 1, 0x80, 1, 'g', 0, 0, 1, 1, 'k', 0, 0}},
		{false, []byte{3, 'r', 1, 1, 1, 1, 'g', 1, 'v', 1, 1, 'k', 0, 0}},
		{false, []byte{3, 'r', 0, 1, 2, 1, 'k', 1, 'v'}},
		{false, []byte{3, 'r', 0, 1, 3, 1, 'k', 0, 0}},
		{false, []byte{0, 1, 0, 1, 1, 1, 'k', 0, 1}},
		{false, []byte{3, 'r', 0, 0}},
		{false, []byte{}},
	} {
		f.Add(seed.small, seed.data)
	}
	f.Fuzz(func(t *testing.T, small bool, data []byte) {
		l := valFuzzLimits(small)
		req := (&valFuzzReader{b: data}).batch(l)
		err := ValidateBatch(req, l)
		if model := valModelBatch(req, l); (err == nil) != model {
			t.Fatalf("ValidateBatch = %v, reference model accepts: %t (%d guards, %d ops)", err, model, len(req.GetGuards()), len(req.GetOps()))
		}
		if err != nil {
			if !errors.Is(err, cluster.ErrInvalidArgument) {
				t.Fatalf("error %q does not wrap cluster.ErrInvalidArgument", err)
			}
			return
		}
		valCheckBatchCommand(t, req)
	})
}

// valPad returns b padded to a length drawn from n: len(b)+n modulo a
// small bound, or, when the top bit of n is set, limit+(n&15)-8 (b is cut
// if longer), so that the lengths around each limit are reachable without
// every input being large.
func valPad(b []byte, n uint32, limit int) []byte {
	size := len(b) + int(n%uint32(min(limit+2, 4096)))
	if n&valNear != 0 {
		size = max(0, limit+int(n&15)-8)
	}
	out := make([]byte, size)
	copy(out, b)
	for i := len(b); i < size; i++ {
		out[i] = byte(i)
	}
	return out
}

// Pad codes for the seed corpus: length exactly the limit, one over.
const (
	valNear     = 1 << 31
	valPadAt    = valNear | 8
	valPadOver  = valNear | 9
	valPadBelow = valNear | 7
)

func FuzzValidatePut(f *testing.F) {
	f.Add(false, []byte("alice"), []byte("k"), []byte("v"), uint32(0), uint32(0), uint32(0))
	f.Add(false, []byte{}, []byte("k"), []byte("v"), uint32(0), uint32(0), uint32(0))
	f.Add(false, []byte("a"), []byte{}, []byte{}, uint32(0), uint32(0), uint32(0))
	f.Add(false, []byte("a"), []byte("k"), []byte{}, uint32(valPadAt), uint32(valPadAt), uint32(valPadAt))
	f.Add(false, []byte("a"), []byte("k"), []byte{}, uint32(valPadOver), uint32(valPadBelow), uint32(valPadBelow))
	f.Add(false, []byte("a"), []byte("k"), []byte{}, uint32(valPadBelow), uint32(valPadOver), uint32(valPadBelow))
	f.Add(false, []byte("a"), []byte("k"), []byte{}, uint32(valPadBelow), uint32(valPadBelow), uint32(valPadOver))
	f.Add(true, []byte("a"), []byte("k"), []byte("v"), uint32(0), uint32(valPadAt), uint32(valPadAt))
	f.Add(true, []byte("a"), []byte("k"), []byte("v"), uint32(0), uint32(valPadOver), uint32(valPadOver))
	f.Add(true, []byte{0, 0xff}, []byte{0}, []byte{0xff}, uint32(0), uint32(0), uint32(0))
	f.Fuzz(func(t *testing.T, small bool, rk, key, value []byte, rkPad, keyPad, valuePad uint32) {
		l := valFuzzLimits(small)
		rk = valPad(rk, rkPad, keys.MaxRoutingKeyLen)
		key = valPad(key, keyPad, l.MaxKeySize)
		value = valPad(value, valuePad, l.MaxValueSize)
		err := ValidatePut(&rpc.PutRequest{RoutingKey: rk, Key: key, Value: value}, l)
		model := len(rk) >= 1 && len(rk) <= keys.MaxRoutingKeyLen &&
			len(key) >= 1 && len(key) <= l.MaxKeySize && len(value) <= l.MaxValueSize
		if (err == nil) != model {
			t.Fatalf("ValidatePut(rk %d, key %d, value %d bytes) = %v, reference model accepts: %t", len(rk), len(key), len(value), err, model)
		}
		if err != nil {
			if !errors.Is(err, cluster.ErrInvalidArgument) {
				t.Fatalf("error %q does not wrap cluster.ErrInvalidArgument", err)
			}
			return
		}
		// The same request as a one-op batch: a Put is one.
		req := &rpc.BatchRequest{RoutingKey: rk, Ops: []*rpc.Op{valPut(key, value)}}
		if err := ValidateBatch(req, l); err != nil {
			t.Fatalf("ValidatePut accepts what ValidateBatch rejects as a one-op batch: %v", err)
		}
		valCheckBatchCommand(t, req)
	})
}

func FuzzValidateScan(f *testing.F) {
	f.Add(false, []byte("alice"), []byte{}, []byte{}, int32(0), uint32(0), uint32(0))
	f.Add(false, []byte("alice"), []byte("p"), []byte("pq"), int32(1), uint32(0), uint32(0))
	f.Add(false, []byte{}, []byte("p"), []byte{}, int32(0), uint32(0), uint32(0))
	f.Add(false, []byte("a"), []byte{}, []byte{}, int32(2), uint32(0), uint32(0))
	f.Add(false, []byte("a"), []byte{}, []byte{}, int32(-1), uint32(0), uint32(0))
	f.Add(false, valBytes(keys.MaxRoutingKeyLen), []byte{}, []byte{}, int32(0), uint32(valPadAt), uint32(valPadAt))
	f.Add(false, valBytes(keys.MaxRoutingKeyLen+1), []byte{}, []byte{}, int32(0), uint32(0), uint32(0))
	f.Add(false, []byte("a"), []byte{}, []byte{}, int32(0), uint32(valPadOver), uint32(0))
	f.Add(false, []byte("a"), []byte{}, []byte{}, int32(0), uint32(0), uint32(valPadOver))
	f.Add(true, []byte("a"), []byte{0xff}, []byte{0xff, 0xff}, int32(0), uint32(valPadAt), uint32(valPadOver))
	f.Fuzz(func(t *testing.T, small bool, rk, prefix, startAfter []byte, consistency int32, prefixPad, startPad uint32) {
		l := valFuzzLimits(small)
		prefix = valPad(prefix, prefixPad, l.MaxKeySize)
		startAfter = valPad(startAfter, startPad, l.MaxKeySize)
		req := &rpc.ScanRequest{RoutingKey: rk, Prefix: prefix, StartAfter: startAfter, Consistency: rpc.Consistency(consistency)}
		err := ValidateScan(req, l)
		model := len(rk) >= 1 && len(rk) <= keys.MaxRoutingKeyLen &&
			(consistency == 0 || consistency == 1) &&
			len(prefix) <= l.MaxKeySize && len(startAfter) <= l.MaxKeySize
		if (err == nil) != model {
			t.Fatalf("ValidateScan(rk %d, prefix %d, start_after %d bytes, consistency %d) = %v, reference model accepts: %t",
				len(rk), len(prefix), len(startAfter), consistency, err, model)
		}
		if err != nil {
			if !errors.Is(err, cluster.ErrInvalidArgument) {
				t.Fatalf("error %q does not wrap cluster.ErrInvalidArgument", err)
			}
			return
		}
		// The server builds the scan bounds from an accepted request:
		// they must not panic and must stay inside the routing key.
		p := keys.KVPrefix(rk, prefix)
		gotRK, gotPrefix, err := keys.DecodeKV(p)
		if err != nil || !bytes.Equal(gotRK, rk) || !bytes.Equal(gotPrefix, prefix) {
			t.Fatalf("KVPrefix decodes to (%q, %q, %v)", gotRK, gotPrefix, err)
		}
		if end := keys.PrefixEnd(p); end != nil && bytes.Compare(end, p) <= 0 {
			t.Fatalf("PrefixEnd(%x) = %x, not after the prefix", p, end)
		}
		if len(startAfter) > 0 {
			sa := keys.KV(rk, startAfter)
			if gotRK, gotKey, err := keys.DecodeKV(sa); err != nil || !bytes.Equal(gotRK, rk) || !bytes.Equal(gotKey, startAfter) {
				t.Fatalf("start_after key decodes to (%q, %q, %v)", gotRK, gotKey, err)
			}
			if all := keys.PrefixEnd(keys.KVPrefix(rk, nil)); all != nil && bytes.Compare(sa, all) >= 0 {
				t.Fatalf("start_after key %x is past the routing key's keys", sa)
			}
		}
	})
}
