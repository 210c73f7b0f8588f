package fsm

import (
	"fmt"
	"testing"
)

// TestPendingReadsLinear: reading keys as a large change leaves them costs
// about one look-up each, not a scan of every queued write. Ending a lease
// of 10,000 keys queues about 30,000 writes and reads each attached key
// through them; with a scan that was 3.1 s of one apply (quadratic).
func TestPendingReadsLinear(t *testing.T) {
	const n = 20000
	ch := &change{}
	key := func(i int) []byte { return []byte(fmt.Sprintf("k%06d", i)) }
	for i := 0; i < n; i++ {
		ch.set(key(i), []byte{byte(i)})
		if i%2 == 0 {
			ch.del(key(i / 2)) // a key written twice: the last write counts
		}
	}
	for i := 0; i < n; i++ {
		v, found, err := ch.getPending(key(i), len(ch.writes))
		if err != nil {
			t.Fatal(err)
		}
		wantFound := !(i < n/2) // keys below n/2 were deleted after their set
		if found != wantFound || (found && v[0] != byte(i)) {
			t.Fatalf("key %d: found %t value %v, want found %t", i, found, v, wantFound)
		}
	}
	// As flush reads: key i's position as the first j writes leave it.
	for j := 0; j < len(ch.writes); j += 97 {
		w := ch.writes[j]
		v, found, err := ch.getPending(w.key, j+1)
		if err != nil || found == w.del || (found && v[0] != w.value[0]) {
			t.Fatalf("write %d: got %v %t %v, want the write itself", j, v, found, err)
		}
	}
	if got := ch.written(key(n - 1)); len(got) != 1 || got[0] != byte((n-1)%256) {
		t.Fatalf("written = %v", got)
	}
	if max := 4 * len(ch.writes); ch.compared > max {
		t.Fatalf("%d key comparisons for %d reads through %d writes, want at most %d (one look-up each)", ch.compared, n, len(ch.writes), max)
	}
}
