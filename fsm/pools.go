package fsm

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// Agent pool operations (seed 004). Every entity they touch lives in the
// one shard of the namespace key "pools", so each rule that crosses
// entities (agent ids unique across pools, no pool deleted under its bots,
// the bots_by_pool index) is checked and kept by one atomic command.
//
// Invariants, checked by the tests after long random sequences: every bot
// has exactly one bots_by_pool entry, under its pool; every bots_by_pool
// entry has its bot; every bot's pool exists.

// PoolNotEmptyError is the Result.Err of an OpDeletePool without Cascade
// of a pool that still holds bots. Nothing was written.
type PoolNotEmptyError struct {
	PoolID string
	Bots   int // the number of bots in the pool
}

func (e *PoolNotEmptyError) Error() string {
	return fmt.Sprintf("fsm: pool %q is not empty: %d bots", e.PoolID, e.Bots)
}

// isPoolOp reports whether op is an agent pool operation.
func isPoolOp(op Op) bool { return op >= OpEnsureDefaultPool && op <= OpSetGuildPool }

// poolOp applies a validated pool command. removed is the number of bots a
// cascading OpDeletePool deleted.
func (ch *change) poolOp(c *Command) (removed int, err error) {
	switch c.Op {
	case OpEnsureDefaultPool:
		err = ch.ensureDefaultPool(c.Time)
	case OpCreatePool:
		err = ch.createPool(c.Pool)
	case OpUpdatePool:
		err = ch.updatePool(c.Pool, c.Actor, c.Time)
	case OpDeletePool:
		removed, err = ch.deletePool(c.PoolID, c.Actor, c.Cascade)
	case OpRegisterBot:
		err = ch.registerBot(c.Bot, c.Actor)
	case OpUpdateBot:
		err = ch.updateBot(c.Bot, c.Actor, c.Time)
	case OpRemoveBot:
		err = ch.removeBot(c.BotID, c.Actor)
	case OpRunnerHeartbeat:
		key := keys.Runner(c.Runner.RunnerID)
		if err = putRecord(ch, key, c.Runner); err == nil {
			err = ch.setLease(key, c.LeaseID)
		}
	case OpSetGuildPool:
		err = ch.setGuildPool(c.GuildID, c.PoolID, c.Actor, c.Time)
	default: // unreachable: applyRecordOp calls this for pool ops only
		err = reject(fmt.Errorf("%w: unknown op %d", ErrInvalidCommand, c.Op))
	}
	return removed, err
}

// getPool reads a pool; absent is a rejection with ErrNotFound.
func (ch *change) getPool(id string) (*records.Pool, error) {
	var p records.Pool
	if err := getFound(ch, keys.Pool(id), &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// getBot reads a bot; absent is a rejection with ErrNotFound.
func (ch *change) getBot(agentID string) (*records.Bot, error) {
	var b records.Bot
	if err := getFound(ch, keys.Bot(agentID), &b); err != nil {
		return nil, err
	}
	return &b, nil
}

// mayManage reports whether actor may change or remove bot b: it
// contributed b, or it owns b's pool.
func (ch *change) mayManage(b *records.Bot, actor string) (bool, error) {
	if b.OwnerUserID == actor {
		return true, nil
	}
	var p records.Pool
	found, err := getRecord(ch, keys.Pool(b.PoolID), &p)
	if err != nil {
		return false, err
	}
	return found && p.OwnerUserID == actor, nil
}

// botsOfPool returns the agent ids of pool's bots_by_pool entries, in key
// order, as the run's batch sees them.
func (ch *change) botsOfPool(pool string) ([]string, error) {
	prefix := keys.BotsByPoolPrefix(pool)
	it, err := ch.b.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keys.PrefixEnd(prefix)})
	if err != nil {
		return nil, err
	}
	var ids []string
	for ok := it.First(); ok; ok = it.Next() {
		ids = append(ids, string(it.Key()[len(prefix):]))
	}
	return ids, it.Close()
}

func (ch *change) ensureDefaultPool(now int64) error {
	var p records.Pool
	found, err := getRecord(ch, keys.Pool(records.DefaultPoolID), &p)
	switch {
	case err != nil:
		return err
	case !found:
		p = records.Pool{PoolID: records.DefaultPoolID, OwnerUserID: records.SystemUserID,
			Name: records.DefaultPoolName, Visibility: records.VisibilityPublic, CreatedAt: now, UpdatedAt: now}
	case p.Visibility == records.VisibilityPublic:
		return nil // already as it should be: write nothing
	default:
		p.Visibility, p.UpdatedAt = records.VisibilityPublic, now
	}
	return putRecord(ch, keys.Pool(records.DefaultPoolID), &p)
}

func (ch *change) createPool(p *records.Pool) error {
	found, err := ch.has(keys.Pool(p.PoolID))
	switch {
	case err != nil:
		return err
	case found:
		return reject(ErrAlreadyExists)
	case p.PoolID == records.DefaultPoolID: // reserved for OpEnsureDefaultPool
		return reject(ErrPermissionDenied)
	}
	return putRecord(ch, keys.Pool(p.PoolID), p)
}

func (ch *change) updatePool(upd *records.Pool, actor string, now int64) error {
	p, err := ch.getPool(upd.PoolID)
	if err != nil {
		return err
	}
	if p.OwnerUserID != actor || (p.PoolID == records.DefaultPoolID && upd.Visibility != records.VisibilityPublic) {
		return reject(ErrPermissionDenied)
	}
	p.Name, p.Visibility, p.Meta, p.UpdatedAt = upd.Name, upd.Visibility, upd.Meta, now
	return putRecord(ch, keys.Pool(p.PoolID), p)
}

func (ch *change) deletePool(id, actor string, cascade bool) (int, error) {
	p, err := ch.getPool(id)
	if err != nil {
		return 0, err
	}
	if p.OwnerUserID != actor || id == records.DefaultPoolID {
		return 0, reject(ErrPermissionDenied)
	}
	bots, err := ch.botsOfPool(id)
	if err != nil {
		return 0, err
	}
	if len(bots) > 0 && !cascade {
		return 0, reject(&PoolNotEmptyError{PoolID: id, Bots: len(bots)})
	}
	removed := 0
	for _, a := range bots {
		var b records.Bot
		found, err := getRecord(ch, keys.Bot(a), &b)
		if err != nil {
			return 0, err
		}
		// An entry whose bot is absent or in another pool (only a raw
		// OpBatch write can make one) loses the entry, not the bot.
		if found && b.PoolID == id {
			ch.del(keys.Bot(a))
			removed++
		}
		ch.del(keys.BotByPool(id, a))
	}
	ch.del(keys.Pool(id))
	// Guilds that selected the pool fall back to no selection (and so
	// to the default pool when planning), rather than pointing at a pool
	// id someone may create again.
	if err := ch.clearGuildSelections(id); err != nil {
		return 0, err
	}
	return removed, nil
}

// clearGuildSelections empties every guild selection of pool id.
func (ch *change) clearGuildSelections(id string) error {
	prefix := keys.TablePrefix(keys.TableGuildSettings)
	it, err := ch.b.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keys.PrefixEnd(prefix)})
	if err != nil {
		return err
	}
	var cleared []records.GuildSettings
	for ok := it.First(); ok; ok = it.Next() {
		var g records.GuildSettings
		if err := records.Decode(it.Value(), &g); err != nil {
			it.Close()
			return reject(fmt.Errorf("%w: guild settings %q: %v", ErrCorruptRecord, it.Key(), err))
		}
		if g.SelectedPoolID == id {
			g.SelectedPoolID = ""
			cleared = append(cleared, g)
		}
	}
	if err := it.Close(); err != nil {
		return err
	}
	for i := range cleared {
		if err := putRecord(ch, keys.GuildSettings(cleared[i].GuildID), &cleared[i]); err != nil {
			return err
		}
	}
	return nil
}

func (ch *change) registerBot(b *records.Bot, actor string) error {
	p, err := ch.getPool(b.PoolID)
	if err != nil {
		return err
	}
	if !p.UsableBy(actor) {
		return reject(ErrPermissionDenied)
	}
	taken, err := ch.has(keys.Bot(b.AgentID))
	if err != nil {
		return err
	}
	if taken {
		return reject(ErrAlreadyExists)
	}
	if err := putRecord(ch, keys.Bot(b.AgentID), b); err != nil {
		return err
	}
	ch.set(keys.BotByPool(b.PoolID, b.AgentID), nil)
	return nil
}

func (ch *change) updateBot(upd *records.Bot, actor string, now int64) error {
	old, err := ch.getBot(upd.AgentID)
	if err != nil {
		return err
	}
	if ok, err := ch.mayManage(old, actor); err != nil || !ok {
		return orDenied(err)
	}
	if upd.PoolID != old.PoolID {
		p, err := ch.getPool(upd.PoolID)
		if err != nil {
			return err
		}
		if !p.UsableBy(actor) {
			return reject(ErrPermissionDenied)
		}
		ch.del(keys.BotByPool(old.PoolID, old.AgentID))
		ch.set(keys.BotByPool(upd.PoolID, old.AgentID), nil)
	}
	b := *upd
	b.OwnerUserID, b.CreatedAt, b.UpdatedAt = old.OwnerUserID, old.CreatedAt, now
	if b.Token.IsZero() {
		b.Token = old.Token
	}
	return putRecord(ch, keys.Bot(b.AgentID), &b)
}

func (ch *change) removeBot(agentID, actor string) error {
	b, err := ch.getBot(agentID)
	if err != nil {
		return err
	}
	if ok, err := ch.mayManage(b, actor); err != nil || !ok {
		return orDenied(err)
	}
	ch.del(keys.Bot(agentID))
	ch.del(keys.BotByPool(b.PoolID, agentID))
	return nil
}

func (ch *change) setGuildPool(guild, pool, actor string, now int64) error {
	p, err := ch.getPool(pool)
	if err != nil {
		return err
	}
	if !p.UsableBy(actor) {
		return reject(ErrPermissionDenied)
	}
	return putRecord(ch, keys.GuildSettings(guild), &records.GuildSettings{GuildID: guild, SelectedPoolID: pool, UpdatedAt: now})
}

// orDenied returns err, or a rejection with ErrPermissionDenied if err is
// nil.
func orDenied(err error) error {
	if err != nil {
		return err
	}
	return reject(ErrPermissionDenied)
}
