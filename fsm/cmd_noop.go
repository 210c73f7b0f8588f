package fsm

// OpNoop: a new leader's entry of its own term; it changes nothing but the
// applied index.
func init() {
	commands.register(OpNoop, &commandSpec{
		name:  "noop",
		apply: applyNoop,
	})
}

func applyNoop(_ *applier, _ *Command, _ uint64, res *Result) error {
	res.Succeeded = true
	return nil
}
