package fsm

import (
	"errors"

	"github.com/swarmkv/swarmkv/resp"
)

// OpRedisMulti runs a MULTI/EXEC block atomically after its WATCH guards;
// Result.Reply is the array of replies, or the null array (Succeeded false)
// when a watched key changed.
func init() {
	commands.register(OpRedisMulti, &commandSpec{
		name:     "redis_multi",
		fields:   fRedis,
		solo:     true, // it stamps key versions with the log index
		validate: func(c *Command, l Limits) error { return c.Redis.validate(OpRedisMulti, false, l.WithDefaults()) },
		apply:    applyRedisMulti,
	})
}

func applyRedisMulti(a *applier, c *Command, index uint64, res *Result) error {
	if !a.checkRedisSlots(c.Redis, res) {
		return nil
	}
	x := &rexec{r: a.b, w: a.b, index: index}
	for _, w := range c.Redis.Watch {
		m, found, err := x.meta(w.Key)
		if err != nil {
			var re *replyErr
			if errors.As(err, &re) { // a corrupt record aborts the block
				res.Reply = &re.v
				return nil
			}
			return err
		}
		var have uint64
		if found {
			have = m.Version
		}
		if have != w.Version {
			v := resp.NullArray
			res.Reply = &v
			return nil
		}
	}
	out := make([]resp.Value, len(c.Redis.Cmds))
	for i, argv := range c.Redis.Cmds {
		v, err := x.exec(argv)
		if err != nil {
			return err
		}
		out[i] = v
	}
	v := resp.Array(out...)
	res.Reply, res.Succeeded = &v, true
	return nil
}
