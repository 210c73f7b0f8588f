package keys

import (
	"encoding/binary"
	"fmt"
)

// Lease tables (swarmkv's own; no seed has them). A lease id is
//
//	+-----------+-----------------------------------+
//	| slot (u8) | per-slot sequence (56 bits, > 0)  |
//	+-----------+-----------------------------------+
//	63        56                                  0
//
// so a lease lives in the slot of the routing key it was granted for, and
// its record, its attachments and the slot's sequence move with the slot
// in a split or merge. Keys of the lease tables carry their slot (Route
// RouteSlot: the slot is in the key, LeaseSlotOf returns it), except
// key_lease, which routes by the attached key it names.
const (
	// TableLeases holds lease records (the state machine's encoding).
	//
	//	+------+---------------+
	//	| 0x50 | lease_id (8)  |
	//	+------+---------------+
	//	0      1               9
	TableLeases byte = 0x50

	// TableLeaseKeys lists the keys attached to a lease. The value is
	// empty. The attached key is a stored key of a table that may be
	// attached (Attachable), in the lease's slot.
	//
	//	+------+---------------+-----------------------------+
	//	| 0x51 | lease_id (8)  | attached key (a stored key) |
	//	+------+---------------+-----------------------------+
	//	0      1               9
	TableLeaseKeys byte = 0x51

	// TableKeyLease maps an attached key to its lease (the reverse of
	// lease_keys). The value is the lease id (8 bytes, big-endian). It
	// routes by the attached key.
	//
	//	+------+-----------------------------+
	//	| 0x52 | attached key (a stored key) |
	//	+------+-----------------------------+
	//	0      1
	TableKeyLease byte = 0x52

	// TableLeaseSeq holds each slot's last lease sequence number (8 bytes,
	// big-endian): the next lease of the slot takes the one after it.
	//
	//	+------+-----------+
	//	| 0x53 | slot (u8) |
	//	+------+-----------+
	//	0      1           2
	TableLeaseSeq byte = 0x53
)

const (
	leaseKeyLen    = 1 + 8
	leaseSeqKeyLen = 1 + 1
	// MaxLeaseSeq is the highest per-slot sequence number a lease id can
	// carry.
	MaxLeaseSeq = 1<<56 - 1
)

// LeaseIDOf builds the lease id of sequence seq in slot.
func LeaseIDOf(slot byte, seq uint64) uint64 { return uint64(slot)<<56 | seq&MaxLeaseSeq }

// LeaseSlot is the slot a lease id belongs to.
func LeaseSlot(id uint64) byte { return byte(id >> 56) }

// ValidLeaseID reports whether id is one a grant can return: its sequence
// is not 0.
func ValidLeaseID(id uint64) bool { return id&MaxLeaseSeq != 0 }

// Attachable reports whether keys of table t may be attached to a lease:
// kv keys (deleted when the lease ends), runners (deleted) and agents
// (a running or provisioning agent becomes failed).
func Attachable(t byte) bool { return t == TableKV || t == TableRunners || t == TableAgents }

// Lease returns the leases key 0x50 | lease_id.
func Lease(id uint64) []byte {
	return binary.BigEndian.AppendUint64(append(make([]byte, 0, leaseKeyLen), TableLeases), id)
}

// LeaseKey returns the lease_keys key 0x51 | lease_id | attached.
func LeaseKey(id uint64, attached []byte) []byte {
	k := make([]byte, 0, leaseKeyLen+len(attached))
	k = append(k, TableLeaseKeys)
	k = binary.BigEndian.AppendUint64(k, id)
	return append(k, attached...)
}

// LeaseKeysPrefix returns 0x51 | lease_id, the prefix of every key
// attached to lease id.
func LeaseKeysPrefix(id uint64) []byte {
	return binary.BigEndian.AppendUint64(append(make([]byte, 0, leaseKeyLen), TableLeaseKeys), id)
}

// KeyLease returns the key_lease key 0x52 | attached.
func KeyLease(attached []byte) []byte {
	k := make([]byte, 0, 1+len(attached))
	k = append(k, TableKeyLease)
	return append(k, attached...)
}

// LeaseSeq returns the lease_seq key 0x53 | slot.
func LeaseSeq(slot byte) []byte { return []byte{TableLeaseSeq, slot} }

// DecodeLease returns the lease id of a leases key.
func DecodeLease(k []byte) (uint64, error) {
	if err := checkFixed(k, TableLeases, leaseKeyLen); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(k[1:]), nil
}

// DecodeLeaseKey returns the lease id and the attached key of a
// lease_keys key (the attached key aliases k).
func DecodeLeaseKey(k []byte) (uint64, []byte, error) {
	if err := checkTable(k, TableLeaseKeys); err != nil {
		return 0, nil, err
	}
	if len(k) < leaseKeyLen+1 {
		return 0, nil, malformed(TableLeaseKeys, "key has %d bytes, want at least %d", len(k), leaseKeyLen+1)
	}
	attached := k[leaseKeyLen:len(k):len(k)]
	if err := checkAttached(TableLeaseKeys, attached); err != nil {
		return 0, nil, err
	}
	return binary.BigEndian.Uint64(k[1:leaseKeyLen]), attached, nil
}

// DecodeKeyLease returns the attached key of a key_lease key (aliasing k).
func DecodeKeyLease(k []byte) ([]byte, error) {
	if err := checkTable(k, TableKeyLease); err != nil {
		return nil, err
	}
	attached := k[1:len(k):len(k)]
	if err := checkAttached(TableKeyLease, attached); err != nil {
		return nil, err
	}
	return attached, nil
}

// DecodeLeaseSeq returns the slot of a lease_seq key.
func DecodeLeaseSeq(k []byte) (byte, error) {
	if err := checkFixed(k, TableLeaseSeq, leaseSeqKeyLen); err != nil {
		return 0, err
	}
	return k[1], nil
}

// checkAttached checks that a key named inside a lease table's key is a
// well-formed key of an attachable table.
func checkAttached(t byte, attached []byte) error {
	if len(attached) == 0 || !Attachable(attached[0]) {
		return malformed(t, "attached key is not of an attachable table")
	}
	if _, _, err := RoutingKeyOf(attached); err != nil {
		return fmt.Errorf("%w (attached key of %s)", err, TableName(t))
	}
	return nil
}

// LeaseSlotOf returns the slot of a key of a table routed by the slot in
// its key (Route RouteSlot: leases, lease_keys, lease_seq).
func LeaseSlotOf(k []byte) (byte, error) {
	if len(k) == 0 {
		return 0, fmt.Errorf("%w: empty key", ErrMalformed)
	}
	switch k[0] {
	case TableLeases:
		id, err := DecodeLease(k)
		return LeaseSlot(id), err
	case TableLeaseKeys:
		id, _, err := DecodeLeaseKey(k)
		return LeaseSlot(id), err
	case TableLeaseSeq:
		return DecodeLeaseSeq(k)
	}
	return 0, malformed(k[0], "not a table routed by slot")
}
