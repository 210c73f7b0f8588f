package fsm

// OpRedis runs one Redis write command; Result.Reply is its reply. Its keys'
// routing keys are checked (checkRedisSlots); the history records its writes
// of watched tables (none: the Redis keyspace is not watched).
func init() {
	commands.register(OpRedis, &commandSpec{
		name:     "redis",
		fields:   fRedis,
		solo:     true, // it stamps key versions with the log index
		validate: func(c *Command, l Limits) error { return c.Redis.validate(OpRedis, true, l.WithDefaults()) },
		apply:    applyRedisCmd,
	})
}

func applyRedisCmd(a *applier, c *Command, index uint64, res *Result) error {
	if !a.checkRedisSlots(c.Redis, res) {
		return nil
	}
	x := &rexec{r: a.b, w: a.b, index: index}
	v, err := x.exec(c.Redis.Cmds[0])
	if err != nil {
		return err
	}
	res.Reply, res.Succeeded = &v, true
	return nil
}
