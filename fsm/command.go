package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"github.com/fxamacker/cbor/v2"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/resp"
)

// Sentinel errors. Every error the package returns wraps one of them (or
// ErrMoveConflict), is one of the typed errors *InsufficientCreditsError,
// *DuplicateEventError, *PoolNotEmptyError and *MovedError, or is a
// Pebble / I/O error while committing, which is fatal for the replica.
var (
	// ErrNotFound is returned by Get when the key is absent, and is the
	// Result.Err of a registry, billing or pool command whose record is
	// missing.
	ErrNotFound = errors.New("fsm: not found")
	// ErrPermissionDenied is the Result.Err of a pool command whose actor
	// may not do what it asks: change or delete another user's pool, use
	// another user's private pool, touch a bot it neither contributed nor
	// owns the pool of, delete the default pool or make it private.
	ErrPermissionDenied = errors.New("fsm: permission denied")
	// ErrAlreadyExists is the Result.Err of an OpCreatePool whose pool id,
	// or an OpRegisterBot whose agent id (in any pool), is taken, and of a
	// billing op whose transaction id is recorded by another operation.
	ErrAlreadyExists = errors.New("fsm: already exists")
	// ErrClosed is returned by every method called after Close, and by
	// WaitApplied when the FSM is closed while waiting.
	ErrClosed = errors.New("fsm: closed")
	// ErrMalformedCommand is wrapped by DecodeCommand (and put in a Result)
	// when a log entry's bytes are not a well-formed command.
	ErrMalformedCommand = errors.New("fsm: malformed command")
	// ErrInvalidCommand is wrapped by Command.Validate (and put in a Result)
	// when a well-formed command breaks a rule or a limit, and by the
	// Result.Err of a command that conflicts with the stored state (an agent
	// id owned by another user, an int64 overflow of a balance).
	ErrInvalidCommand = errors.New("fsm: invalid command")
	// ErrCorruptRecord is wrapped by the Result.Err of a registry, billing
	// or pool command that read a stored record which does not decode or
	// validate (only a raw OpBatch write into those tables can cause it).
	ErrCorruptRecord = errors.New("fsm: corrupt stored record")
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

// Op selects what a Command does. Each op has its file, cmd_<name>.go,
// which registers its spec (name, fields, version, validation, slot
// derivation, apply, history) in the dispatch table (commands.go); a new
// operation is a new Op, its file and its fields on Command.
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
	// OpMulti (Multi) carries several commands, each as EncodeCommand
	// encodes it, proposed together as one log entry (the replica's
	// proposal coalescing). They are applied in order, in the Pebble batch
	// of the entry's run, each exactly as if it were an entry of its own
	// at this entry's index: decoded and validated on its own, with its own
	// Result; a rejected one writes nothing and leaves the others
	// unaffected. The entry's response is a []*Result, one per command
	// (a *Result with Err when the OpMulti itself is malformed or invalid,
	// or on a storage error). A command whose op is not Coalescable
	// (OpMulti, OpRedis, OpRedisMulti: Redis ops stamp key versions with
	// the log index, which the commands of one entry share) is rejected
	// with ErrInvalidCommand. Validate bounds the number of commands
	// (MaxMultiCmds) and their total size (MaxMultiBytes).
	OpMulti Op = 3
)

// Bounds on an OpMulti, the same on every replica.
const (
	// MaxMultiCmds is the most commands one OpMulti may carry.
	MaxMultiCmds = 1024
	// MaxMultiBytes is the most bytes the encoded commands of one OpMulti
	// may add up to.
	MaxMultiBytes = 8 << 20
)

// Coalescable reports whether a command with op o may be carried by an
// OpMulti: every known op but OpMulti, OpRedis, OpRedisMulti and the slot
// move ops (each of which is an entry of its own, its log index the step's).
func (o Op) Coalescable() bool {
	sp := o.spec()
	return sp != nil && !sp.solo
}

// Registry operations (seed 000). Each is applied atomically: every check
// runs before any write, and a rejected command writes nothing. The fields
// each op carries are listed after it; Validate requires exactly those.
const (
	// OpPutAgent (Agent) upserts agents[user|agent], moves the
	// agents_by_status entry if the status changed, and sets
	// agent_owners[agent] = user. An agent id that agent_owners assigns to
	// another user is rejected (ErrInvalidCommand).
	OpPutAgent Op = 10
	// OpDeleteAgent (UserID, AgentID) deletes the agent record, its
	// agents_by_status entry and its agent_owners entry; ErrNotFound if
	// absent. The agent's sessions stay, as in the seed.
	OpDeleteAgent Op = 11
	// OpUpdateAgentStatus (UserID, AgentID, Status, Time) sets status and
	// updated_at = Time and moves the index entry; ErrNotFound if absent.
	OpUpdateAgentStatus Op = 12
	// OpPutSession (Session) upserts sessions[session] and
	// sessions_by_agent[agent|session], deleting the index entry of the
	// agent an existing session with this id had before.
	OpPutSession Op = 13
	// OpUpdateSessionStatus (SessionID, Status, Time; optional UserID: the
	// session must belong to that user, else NotFound) sets status, and
	// closed_at = Time when the status is not active and closed_at is
	// unset; ErrNotFound if absent.
	OpUpdateSessionStatus Op = 14
	// OpPutUser (User) upserts users[user].
	OpPutUser Op = 15
	// OpAgentHeartbeat (UserID, AgentID, Time; optional LeaseID) sets the
	// agent's last_heartbeat_at = Time (nothing else) and, with LeaseID,
	// attaches the agent to that lease (replacing any other): when the
	// lease ends, a running or provisioning agent becomes failed.
	// ErrNotFound if the agent is absent, ErrLeaseNotFound if the lease is.
	OpAgentHeartbeat Op = 16
)

// Billing operations (seed 001). Amounts are cents. Each is applied
// atomically, like the registry operations; OpUpdateBalance,
// OpProcessUsage and OpAddCredits set Result.Balance to the new balance.
const (
	// OpPutAccount (Account) upserts accounts[user].
	OpPutAccount Op = 20
	// OpDeleteAccount (AccountID) deletes the account; ErrNotFound if
	// absent. Its transactions stay.
	OpDeleteAccount Op = 21
	// OpUpdateBalance (AccountID, Amount, Time, Tx) adds the signed delta
	// Amount to the balance and records Tx, an adjustment of that amount.
	// Errors: ErrNotFound, *InsufficientCreditsError if the balance would
	// go negative, ErrInvalidCommand on int64 overflow. It is idempotent
	// in Tx.TransactionID like OpAddCredits.
	OpUpdateBalance Op = 22
	// OpPutTransaction (Tx) upserts transactions[id] and its
	// transactions_by_user entry. It may replace a transaction of the same
	// account, never another account's (ErrAlreadyExists).
	OpPutTransaction Op = 23
	// OpPutUsageEvent (Event) upserts usage_events[event_id].
	OpPutUsageEvent Op = 24
	// OpProcessUsage (Event, Tx, Time) charges Tx.AmountCents for a usage
	// event, once: *DuplicateEventError if the event was processed (unless
	// the command is the exact retry of the charge that processed it, with
	// its transaction id: then it succeeds, changing nothing, with the
	// recorded balance), ErrAlreadyExists if Tx.TransactionID is recorded
	// (a new event never replaces a recorded transaction), ErrNotFound
	// without an account, *InsufficientCreditsError if the balance is
	// short, ErrInvalidCommand on overflow; else it debits the account and
	// stores Tx and the event.
	OpProcessUsage Op = 25
	// OpAddCredits (AccountID, Amount, Tx, Time) credits Amount and records
	// Tx. It is idempotent in Tx.TransactionID: if that transaction was
	// recorded by the same operation (same account, type, amount,
	// description and event id; the creation time and balance after may
	// differ), it succeeds without changing anything and returns the
	// stored BalanceAfterCents, so a client may retry it with the same
	// transaction id. A transaction id recorded by anything else (another
	// account, another amount or op) is refused with ErrAlreadyExists: a
	// transaction id names one ledger entry, which is never replaced.
	OpAddCredits Op = 26
	// OpReserveTx (AccountID, TxID) reserves transaction id TxID for the
	// account in the cluster-wide directory (keys.TableTxDirectory, in
	// the slot of the id itself): absent, it records the account; held by
	// the same account, it succeeds and writes nothing (idempotent); held
	// by another account, ErrAlreadyExists. The front proposes it on the
	// id's shard before the op that records the id on the account's shard;
	// when one shard holds both slots, that op carries TxID instead and
	// reserves in the same change (reserveTx). From VersionHardening.
	OpReserveTx Op = 27
)

// Agent pool operations (seed 004). Each is applied atomically, like the
// registry operations; Actor is the id of the user on whose behalf the
// command runs, and the ownership and visibility rules are checked against
// it (see docs/architecture.md, "Agent pools"). A pool is usable by a user
// if it is public or the user owns it. Rejections: ErrNotFound,
// ErrPermissionDenied, ErrAlreadyExists, *PoolNotEmptyError,
// ErrCorruptRecord.
const (
	// OpEnsureDefaultPool (Time) creates records.DefaultPoolID (owner
	// records.SystemUserID, name records.DefaultPoolName, public,
	// created_at = updated_at = Time) if absent, and makes it public
	// (updated_at = Time) if it is private. It writes nothing when the pool
	// is already public, so it is idempotent.
	OpEnsureDefaultPool Op = 30
	// OpCreatePool (Pool) stores the pool as given; Pool.OwnerUserID is
	// the creator (the proposer sets it to the actor). ErrAlreadyExists if
	// the pool id is taken; ErrPermissionDenied for the default pool's id
	// while it is absent (only OpEnsureDefaultPool creates it).
	OpCreatePool Op = 31
	// OpUpdatePool (Pool, Actor, Time) replaces the name, visibility and
	// meta of the pool Pool.PoolID and sets updated_at = Time, keeping
	// owner_user_id and created_at (the command's are ignored).
	// ErrNotFound if absent; ErrPermissionDenied unless Actor owns it, and
	// for making the default pool private.
	OpUpdatePool Op = 32
	// OpDeletePool (PoolID, Actor; optional Cascade) deletes the pool.
	// ErrNotFound if absent; ErrPermissionDenied unless Actor owns it, and
	// always for the default pool; *PoolNotEmptyError if bots are in it and
	// Cascade is not set. With Cascade it deletes the pool's bots and their
	// index entries too, and Result.Removed counts them.
	OpDeletePool Op = 33
	// OpRegisterBot (Bot, Actor) stores the bot and its bots_by_pool
	// entry. Validate requires Bot.OwnerUserID == Actor and a non-zero
	// Bot.Token. ErrNotFound if the pool is absent; ErrPermissionDenied if
	// it is private and Actor does not own it; ErrAlreadyExists if the
	// agent id is registered (in any pool).
	OpRegisterBot Op = 34
	// OpUpdateBot (Bot, Actor, Time) replaces the client_id, tag, status,
	// pool_id and profile of the bot Bot.AgentID, and its token unless
	// Bot.Token is zero (then the stored token stays), and sets updated_at
	// = Time, keeping owner_user_id and created_at. ErrNotFound if the bot
	// is absent, or if it moves to a pool that is absent;
	// ErrPermissionDenied unless Actor contributed the bot or owns its
	// pool, and if it moves to a pool Actor may not use. A move moves the
	// index entry.
	OpUpdateBot Op = 35
	// OpRemoveBot (BotID, Actor) deletes the bot and its index entry.
	// ErrNotFound if absent; ErrPermissionDenied unless Actor contributed
	// it or owns its pool.
	OpRemoveBot Op = 36
	// OpRunnerHeartbeat (Runner; optional LeaseID) upserts the runner as
	// given; LastSeen is the proposer's clock. With LeaseID it attaches
	// the runner to that lease (the runner is deleted when the lease
	// ends; ErrLeaseNotFound if the lease is absent); without, it detaches
	// the runner from any lease.
	OpRunnerHeartbeat Op = 37
	// OpSetGuildPool (GuildID, PoolID, Actor, Time) stores the guild's
	// settings {GuildID, PoolID, Time}. ErrNotFound if the pool is absent;
	// ErrPermissionDenied if Actor may not use it.
	OpSetGuildPool Op = 38
)

// Redis operations (seed 002's asset catalogue over RESP; see redis.go).
const (
	// OpRedis (Redis) runs one Redis write command; Result.Reply is its
	// reply.
	OpRedis Op = 40
	// OpRedisMulti (Redis) runs a MULTI/EXEC block atomically after its
	// WATCH guards; Result.Reply is the array of replies, or the null array
	// (Succeeded false) when a watched key changed.
	OpRedisMulti Op = 41
)

// etcd operations (the etcd v3 API front; see etcd.go).
const (
	// OpEtcdTxn (Etcd) runs an etcd txn (a put, a delete or a general
	// txn) on one namespace at its next revision (cmd_etcd_txn.go).
	OpEtcdTxn Op = 80
	// OpEtcdCompact (EtcdCompact) drops a namespace's history at and
	// below a revision (cmd_etcd_compact.go).
	OpEtcdCompact Op = 81
)

// VersionEtcd is the cluster protocol version that brings the etcd
// namespaces: OpEtcdTxn and OpEtcdCompact (the etcd front refuses writes
// before the cluster runs it).
const VersionEtcd = 5

// VersionEtcdNested is the cluster protocol version that brings a txn
// nested in an etcd txn's branch (EtcdOp.Txn, EtcdTxnK): a binary of
// version 5 refuses such an entry as malformed (an unknown field) while
// its peers would apply it, so the front proposes one only once the
// cluster runs this version (Command.Since).
const VersionEtcdNested = 6

// VersionLeases is the cluster protocol version that brings leases (with
// the Raft incarnation headers: cluster/version.go): the
// lease ops (lease.go), OpAgentHeartbeat, an OpRunnerHeartbeat with a
// LeaseID and an OpBatch whose mutations attach a lease.
const VersionLeases = 2

// VersionPrecopy is the cluster protocol version that brings the
// pre-copy of a slot move (OpSyncSlots: the sync pass that follows it,
// cluster/shardmove).
const VersionPrecopy = 3

// VersionHardening is the cluster protocol version of the second
// hardening round (issue 37): lease owners and cluster-wide transaction
// ids. What it brings is listed in the ops' specs (since, sinceOf).
const VersionHardening = 4

// Since returns the protocol version the cluster must run before c may
// be proposed (package cluster, version.go): its op's (the spec's since),
// or the version of a field it carries (the spec's sinceOf)
// (a lease on a runner heartbeat or a batch's mutation: VersionLeases; an
// owner, nonce or key bound on a grant, a deny on a revoke:
// VersionHardening);
// an OpMulti needs the highest of the commands it carries (those that do
// not decode count as 1); 1 for everything older than versions.
func (c *Command) Since() int {
	sp := c.Op.spec()
	if sp == nil {
		return 1
	}
	v := max(sp.since, 1)
	if sp.sinceOf != nil {
		v = max(v, sp.sinceOf(c))
	}
	return v
}

// String returns the op's snake_case name ("put_agent"), or "op(N)".
func (o Op) String() string {
	if sp := o.spec(); sp != nil {
		return sp.name
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

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
	// Lease, on a put of a kv key, attaches the key to that lease (in the
	// key's slot; ErrLeaseNotFound if absent). A put without one, and a
	// delete, detach the key from any lease.
	Lease uint64 `cbor:"lease,omitempty"`
}

// Batch is a compare-then-write transaction on one shard, like an etcd Txn
// without an else branch.
type Batch struct {
	Guards    []Guard    `cbor:"g,omitempty"`
	Mutations []Mutation `cbor:"m,omitempty"`
}

// Command is the payload of one Raft log entry of type raft.LogCommand. Op
// says which of the optional fields it carries (see the Op constants);
// Validate requires exactly those.
type Command struct {
	Op    Op     `cbor:"op"`
	Batch *Batch `cbor:"batch,omitempty"`

	Agent   *records.AgentRecord       `cbor:"agent,omitempty"`
	Session *records.SessionRecord     `cbor:"session,omitempty"`
	User    *records.UserRecord        `cbor:"user,omitempty"`
	Account *records.Account           `cbor:"account,omitempty"`
	Tx      *records.CreditTransaction `cbor:"tx,omitempty"`
	Event   *records.UsageEvent        `cbor:"event,omitempty"`
	Pool    *records.Pool              `cbor:"pool,omitempty"`
	Bot     *records.Bot               `cbor:"bot,omitempty"`
	Runner  *records.Runner            `cbor:"runner,omitempty"`

	UserID    *keys.UserID    `cbor:"user_id,omitempty"`
	AgentID   *keys.AgentID   `cbor:"agent_id,omitempty"`
	SessionID *keys.SessionID `cbor:"session_id,omitempty"`
	AccountID *keys.AccountID `cbor:"account_id,omitempty"`
	Status    *uint8          `cbor:"status,omitempty"` // AgentState or SessionStatus
	Amount    *int64          `cbor:"amount,omitempty"` // cents
	// Time is the proposer's clock, Unix ms, fixed before the command
	// enters the log (the state machine never reads a clock). 0 = absent;
	// ops that take it require Time > 0.
	Time int64 `cbor:"time,omitempty"`

	// Actor is the user on whose behalf a pool command runs.
	Actor   string `cbor:"actor,omitempty"`
	PoolID  string `cbor:"pool_id,omitempty"`
	BotID   string `cbor:"bot_id,omitempty"` // an agent id
	GuildID string `cbor:"guild_id,omitempty"`
	// Cascade lets OpDeletePool delete the pool's bots with it.
	Cascade bool `cbor:"cascade,omitempty"`

	Redis *RedisTx `cbor:"redis,omitempty"`

	// Multi holds the encoded commands of an OpMulti.
	Multi [][]byte `cbor:"multi,omitempty"`

	// Move is the argument of the slot move ops (OpFreezeSlots ...
	// OpDropSlots).
	Move *SlotMove `cbor:"move,omitempty"`

	// History is the retention of an OpCompactHistory.
	History *HistoryRetention `cbor:"history,omitempty"`
	// Lease is the argument of the lease ops (OpLeaseGrant ...
	// OpLeaseCheckpoint).
	Lease *LeaseArgs `cbor:"lease,omitempty"`
	// LeaseID is the lease a runner or agent heartbeat attaches its record
	// to.
	LeaseID uint64 `cbor:"lease_id,omitempty"`
	// TxID is the transaction id an OpReserveTx reserves; on an op that
	// records a transaction (equal to Tx.TransactionID) it reserves the id
	// in the same change (VersionHardening).
	TxID *keys.TransactionID `cbor:"tx_id,omitempty"`

	// Etcd is the txn of an OpEtcdTxn, EtcdCompact the argument of an
	// OpEtcdCompact (VersionEtcd).
	Etcd        *EtcdTxn     `cbor:"etcd,omitempty"`
	EtcdCompact *EtcdCompact `cbor:"etcd_compact,omitempty"`
}

// Result is what one applied log entry returns through raft's
// ApplyFuture.Response(), as a *Result.
type Result struct {
	Index       uint64 // the log index
	Succeeded   bool   // all guards held and mutations were written (for registry, billing and pool ops: Err == nil)
	FailedGuard int    // index of the first failing guard when !Succeeded, else -1
	Deleted     int    // number of MutDelete whose key existed when it ran
	// Balance is the account balance in cents after a successful
	// OpUpdateBalance, OpProcessUsage or OpAddCredits (for an idempotent
	// retry: the stored transaction's BalanceAfterCents).
	Balance int64
	// Removed is the number of bots a successful OpDeletePool deleted
	// with the pool (Cascade), and of leases an OpLeaseRevoke or
	// OpLeaseExpire ended (Deleted: the keys they deleted).
	Removed int
	// Reply is the Redis reply of OpRedis and OpRedisMulti.
	Reply *resp.Value
	// MoveIndex is the log index at which an OpFreezeSlots froze its
	// slots (the recorded index when the freeze is re-applied).
	MoveIndex uint64
	// LeaseID is the id of the lease a successful OpLeaseGrant created.
	LeaseID uint64
	// Etcd is the answer of a successful OpEtcdTxn or OpEtcdCompact.
	Etcd *EtcdResult
	// Remaining is the number of the move's keys an OpDropSlots left,
	// counted up to its Max; 0 when the drop is done. (Deleted is the
	// number it deleted.)
	Remaining int
	// Record is the record a successful OpUpdateAgentStatus,
	// OpAgentHeartbeat, OpUpdateSessionStatus, OpUpdatePool, OpRegisterBot or OpUpdateBot
	// stored, as written (records.Encode form; a copy): the caller
	// answers with it instead of reading the record back, which a freeze
	// and drop of its slot between the apply and the read could have
	// removed. nil for every other op.
	Record []byte
	// Err is a deterministic rejection (malformed or invalid command,
	// ErrNotFound, ErrPermissionDenied, ErrAlreadyExists,
	// *InsufficientCreditsError, *DuplicateEventError, *PoolNotEmptyError,
	// ErrCorruptRecord, *MovedError, ErrMoveConflict), or a fatal storage
	// error. Either way the command
	// wrote nothing.
	Err error
}

// commandVersion is the first byte of an encoded command.
const commandVersion = 0x01

// maxDecodeArray bounds CBOR arrays during decoding, before Validate applies
// the configured Limits.MaxBatchOps (whose cap, maxBatchOpsCap, is lower).
const maxDecodeArray = 1 << 16

// maxDecodeNesting bounds CBOR nesting during decoding: 8 for every
// command, and 3 more per level of etcd txn nesting (an op's txn map, its
// branch array, the branch's op map), MaxEtcdTxnDepth levels.
const maxDecodeNesting = 8 + 3*MaxEtcdTxnDepth

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
		MaxNestedLevels:   maxDecodeNesting,
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
	n := 0
	for _, present := range [...]bool{c.Agent != nil, c.Session != nil, c.User != nil,
		c.Account != nil, c.Tx != nil, c.Event != nil, c.Pool != nil, c.Bot != nil, c.Runner != nil} {
		if present {
			n += 256
		}
	}
	if c.Pool != nil {
		n += len(c.Pool.Meta)
	}
	if c.Bot != nil {
		n += len(c.Bot.Profile) + len(c.Bot.Token.Ciphertext)
	}
	if c.Runner != nil {
		n += len(c.Runner.Meta)
	}
	for _, sub := range c.Multi {
		n += 4 + len(sub)
	}
	if c.Lease != nil {
		n += 64 + len(c.Lease.RoutingKey) + 10*len(c.Lease.IDs) + 16*len(c.Lease.Checkpoints)
	}
	if c.Move != nil {
		n += 64
		for i := range c.Move.Pairs {
			n += 8 + len(c.Move.Pairs[i].Key) + len(c.Move.Pairs[i].Value)
		}
	}
	if c.Etcd != nil {
		n += c.Etcd.approxSize()
	}
	if c.Batch == nil {
		return n
	}
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
// tags, indefinite lengths, out-of-range integers, invalid UTF-8 and
// oversized arrays are errors wrapping ErrMalformedCommand, and so is any
// encoding other than the one EncodeCommand writes for the decoded command
// (Core Deterministic CBOR). That last check also rejects ids of the wrong
// width, which CBOR would otherwise zero-fill or truncate into the
// fixed-size id arrays, and explicit zero or null values of omitted fields.
// Empty byte strings decode as nil, so that DecodeCommand(EncodeCommand(c))
// is stable. It does not validate the command: see Command.Validate.
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
	// Compare before normalize: an empty key encodes as an empty byte
	// string and a nil one as null, and both are EncodeCommand's output.
	buf := canonBufs.Get().(*bytes.Buffer)
	buf.Reset()
	err := encMode.MarshalToBuffer(c, buf)
	canonical := err == nil && bytes.Equal(buf.Bytes(), b[1:])
	if buf.Cap() <= maxPooledBuf {
		canonBufs.Put(buf)
	}
	if !canonical {
		return nil, fmt.Errorf("%w: not in canonical form (wrong id width or not EncodeCommand's deterministic encoding)", ErrMalformedCommand)
	}
	c.normalize()
	return c, nil
}

// canonBufs holds DecodeCommand's re-encoding buffers; buffers grown past
// maxPooledBuf (by a large batch) are left to the garbage collector.
var canonBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledBuf = 64 << 10

// normalize turns empty slices into nil (the encoder omits both alike),
// so that a command equals the one decoded from its encoding (Own.Add). It
// writes only the fields it changes: a proposer that gave up its command
// may still read it.
func (c *Command) normalize() {
	nilEmpty(&c.Multi)
	if l := c.Lease; l != nil {
		nilEmpty(&l.RoutingKey)
		nilEmpty(&l.IDs)
		nilEmpty(&l.Checkpoints)
	}
	if c.Move != nil {
		nilEmpty(&c.Move.Pairs)
		for i := range c.Move.Pairs {
			p := &c.Move.Pairs[i]
			nilEmpty(&p.Key)
			nilEmpty(&p.Value)
		}
	}
	if t := c.Etcd; t != nil {
		t.normalize()
	}
	if c.Batch == nil {
		return
	}
	nilEmpty(&c.Batch.Guards)
	nilEmpty(&c.Batch.Mutations)
	for i := range c.Batch.Guards {
		g := &c.Batch.Guards[i]
		nilEmpty(&g.Key)
		nilEmpty(&g.Value)
	}
	for i := range c.Batch.Mutations {
		m := &c.Batch.Mutations[i]
		nilEmpty(&m.Key)
		nilEmpty(&m.Value)
	}
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// nilEmpty sets *s to nil if it is empty but not nil.
func nilEmpty[S ~[]E, E any](s *S) {
	if *s != nil && len(*s) == 0 {
		*s = nil
	}
}

// Validate checks c against the rules and the limits l (zero fields of l
// take their defaults): the op is known, c carries exactly the fields the op
// takes, every record passes its own Validate, and the op's own rules hold.
// The error wraps ErrInvalidCommand (and, for a bad record,
// records.ErrInvalid) and says which field broke which rule.
func (c *Command) Validate(l Limits) error {
	sp := c.Op.spec()
	if sp == nil {
		return fmt.Errorf("%w: unknown op %d", ErrInvalidCommand, c.Op)
	}
	have := c.fields()
	if missing := sp.fields &^ have; missing != 0 {
		return fmt.Errorf("%w: op %s: missing %s", ErrInvalidCommand, c.Op, missing.first())
	}
	if extra := have &^ (sp.fields | sp.optional); extra != 0 {
		return fmt.Errorf("%w: op %s: carries %s", ErrInvalidCommand, c.Op, extra.first())
	}
	if c.Time < 0 {
		return fmt.Errorf("%w: op %s: time %d is negative", ErrInvalidCommand, c.Op, c.Time)
	}
	if sp.validate == nil {
		return nil
	}
	return sp.validate(c, l)
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
