package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/records"
)

// Controller keeps a live view of the runners and bots of the cluster
// through list-then-watch (client.Pools.ListWatchRunners and
// ListWatchBots) and reports every change of the view as one line.
type Controller struct {
	Pools *client.Pools
	// Pool narrows the bots to one pool; "" follows every pool.
	Pool string
	// Summary is the interval of the summary line; 0: none.
	Summary time.Duration
	// Log receives each line ("runner r1 up ...").
	Log func(line string)

	mu      sync.Mutex
	runners map[string]*records.Runner
	bots    map[string]*client.BotInfo
	beats   int // runner heartbeats (puts of a known runner) since the last summary
}

// Run follows both tables until ctx ends (nil) or a watch ends with an
// error (returned). Both watches run on goroutines that Run joins.
func (c *Controller) Run(ctx context.Context) error {
	c.mu.Lock()
	c.runners, c.bots = map[string]*records.Runner{}, map[string]*client.BotInfo{}
	c.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		errs <- follow(ctx, c.Pools.ListWatchRunners(ctx, client.WithProgress(time.Second)), c.runnersListed, c.runnerChanged)
	}()
	go func() {
		defer wg.Done()
		errs <- follow(ctx, c.Pools.ListWatchBots(ctx, c.Pool, client.WithProgress(time.Second)), c.botsListed, c.botChanged)
	}()
	var tick <-chan time.Time
	if c.Summary > 0 {
		t := time.NewTicker(c.Summary)
		defer t.Stop()
		tick = t.C
	}
	var err error
	for done := 0; done < 2; {
		select {
		case e := <-errs:
			done++
			if e != nil && err == nil {
				err = e
				cancel() // one view lost: stop the other too
			}
		case <-tick:
			c.Log(c.SummaryLine())
		}
	}
	wg.Wait()
	return err
}

// follow applies one typed list-then-watch: a listing (after a Resync
// too) is gathered and handed to listed whole at its last page; each
// change after it to changed. It returns the watch's error, or nil when
// ctx ended.
func follow[R any](ctx context.Context, ch <-chan client.TypedWatchResponse[string, R],
	listed func(rev uint64, recs map[string]R), changed func(rev uint64, e client.TypedEvent[string, R])) error {
	var listing map[string]R
	for r := range ch {
		if r.Err != nil {
			return r.Err
		}
		if r.Listing {
			if r.Resync || listing == nil {
				listing = map[string]R{}
			}
			for _, e := range r.Events {
				listing[e.ID] = e.Record
			}
			if r.ListDone {
				listed(r.Revision, listing)
				listing = nil
			}
			continue
		}
		for _, e := range r.Events {
			changed(r.Revision, e)
		}
	}
	if err := ctx.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// runnersListed replaces the runner view with a listing: the first one
// is reported whole; a later one (a resync) by what changed.
func (c *Controller) runnersListed(rev uint64, rs map[string]*records.Runner) {
	c.mu.Lock()
	old := c.runners
	c.runners = rs
	c.mu.Unlock()
	if len(old) == 0 {
		c.Log(fmt.Sprintf("listed %d runners at revision %d: %s", len(rs), rev, idList(rs)))
		return
	}
	c.Log(fmt.Sprintf("runners resynced at revision %d", rev))
	for _, id := range sortedKeys(rs) {
		if old[id] == nil {
			c.Log(runnerUp(id, rs[id]))
		}
	}
	for _, id := range sortedKeys(old) {
		if rs[id] == nil {
			c.Log(fmt.Sprintf("runner %s gone", id))
		}
	}
}

func runnerUp(id string, r *records.Runner) string {
	line := "runner " + id + " up"
	if r.Meta != "" {
		line += " meta " + r.Meta
	}
	return line
}

func (c *Controller) runnerChanged(rev uint64, e client.RunnerEvent) {
	c.mu.Lock()
	old := c.runners[e.ID]
	if e.Type == client.EventDelete {
		delete(c.runners, e.ID)
	} else {
		c.runners[e.ID] = e.Record
		if old != nil {
			c.beats++
		}
	}
	c.mu.Unlock()
	switch {
	case e.Type == client.EventDelete && old != nil:
		c.Log(fmt.Sprintf("runner %s gone (last heartbeat %s ago, revision %d)", e.ID, since(old.LastSeen), rev))
	case e.Type == client.EventDelete:
		c.Log(fmt.Sprintf("runner %s gone (revision %d)", e.ID, rev))
	case old == nil:
		c.Log(fmt.Sprintf("%s (revision %d)", runnerUp(e.ID, e.Record), rev))
	}
}

// botsListed replaces the bot view with a listing, as runnersListed.
func (c *Controller) botsListed(rev uint64, bs map[string]*client.BotInfo) {
	c.mu.Lock()
	old := c.bots
	c.bots = bs
	c.mu.Unlock()
	if len(old) == 0 {
		c.Log(fmt.Sprintf("listed %d bots at revision %d: %s", len(bs), rev, idList(bs)))
		return
	}
	c.Log(fmt.Sprintf("bots resynced at revision %d", rev))
	for _, id := range sortedKeys(bs) {
		if line := botLine(id, old[id], bs[id]); line != "" {
			c.Log(line)
		}
	}
	for _, id := range sortedKeys(old) {
		if bs[id] == nil {
			c.Log(botLine(id, old[id], nil))
		}
	}
}

func (c *Controller) botChanged(rev uint64, e client.BotEvent) {
	c.mu.Lock()
	old := c.bots[e.ID]
	if e.Type == client.EventDelete {
		delete(c.bots, e.ID)
	} else {
		c.bots[e.ID] = e.Record
	}
	c.mu.Unlock()
	if line := botLine(e.ID, old, e.Record); line != "" {
		c.Log(fmt.Sprintf("%s (revision %d)", line, rev))
	}
}

// botLine says how bot id went from old to now (nil: absent); "" if
// nothing a controller cares about changed.
func botLine(id string, old, now *client.BotInfo) string {
	switch {
	case old == nil && now == nil:
		return ""
	case old == nil:
		return fmt.Sprintf("bot %s registered in pool %s (tag %q, %s)", id, now.PoolID, now.Tag, now.Status)
	case now == nil:
		return fmt.Sprintf("bot %s removed from pool %s", id, old.PoolID)
	case old.PoolID != now.PoolID:
		return fmt.Sprintf("bot %s moved from pool %s to %s", id, old.PoolID, now.PoolID)
	case old.Status != now.Status:
		return fmt.Sprintf("bot %s %s -> %s", id, old.Status, now.Status)
	case *old != *now:
		return fmt.Sprintf("bot %s updated", id)
	}
	return ""
}

// SummaryLine describes the view: the runners up, and the bots by pool
// and status.
func (c *Controller) SummaryLine() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	byPool := map[string]map[records.BotStatus]int{}
	for _, b := range c.bots {
		if byPool[b.PoolID] == nil {
			byPool[b.PoolID] = map[records.BotStatus]int{}
		}
		byPool[b.PoolID][b.Status]++
	}
	var pools []string
	for _, p := range sortedKeys(byPool) {
		var st []string
		for _, s := range slices.Sorted(maps.Keys(byPool[p])) {
			st = append(st, fmt.Sprintf("%d %s", byPool[p][s], s))
		}
		pools = append(pools, fmt.Sprintf("%s: %s", p, strings.Join(st, ", ")))
	}
	line := fmt.Sprintf("summary: %d runners up %s, %d heartbeats since last summary; %d bots", len(c.runners), idList(c.runners), c.beats, len(c.bots))
	c.beats = 0
	if len(pools) > 0 {
		line += " (" + strings.Join(pools, "; ") + ")"
	}
	return line
}

// Runners returns the ids of the runners in the view, sorted.
func (c *Controller) Runners() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return sortedKeys(c.runners)
}

// Bots returns the view's bots by id.
func (c *Controller) Bots() map[string]client.BotInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]client.BotInfo{}
	for id, b := range c.bots {
		out[id] = *b
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func idList[V any](m map[string]V) string { return "[" + strings.Join(sortedKeys(m), " ") + "]" }

// since is how long ago Unix ms was, to the tenth of a second.
func since(ms int64) time.Duration {
	return time.Since(time.UnixMilli(ms)).Round(100 * time.Millisecond)
}
