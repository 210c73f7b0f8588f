package client

// ClassifyForTest is classify for the external tests (roundtrip_test.go),
// with the retry class by name.
func ClassifyForTest(err error) (error, string) {
	cerr, class, _ := classify(err)
	return cerr, [...]string{classFatal: "fatal", classNotLeader: "not leader", classRetry: "retry", classAmbiguous: "ambiguous", classMoved: "moved"}[class]
}

// KeepAliveWaitersForTest is the number of keep-alives that took the
// request in flight for lease id on its shard's stream (0: none).
func KeepAliveWaitersForTest(c *Client, id LeaseID) int {
	c.kas.mu.Lock()
	s := c.kas.mu.streams[c.slotOwner(id.slot())]
	c.kas.mu.Unlock()
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if call := s.mu.pending[uint64(id)]; call != nil {
		return call.waiters
	}
	return 0
}
