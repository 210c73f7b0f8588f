package fsm

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// OpDeletePool deletes a pool (with its bots: Cascade) (see its doc in
// command.go).
func init() {
	commands.register(OpDeletePool, &commandSpec{
		name:       "delete_pool",
		fields:     fPoolID | fActor,
		optional:   fCascade,
		routingKey: poolsRoutingKey,
		run:        runDeletePool,
	})
}

func runDeletePool(ch *change, c *Command) (int64, int, error) {
	removed, err := ch.deletePool(c.PoolID, c.Actor, c.Cascade)
	return 0, removed, err
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
