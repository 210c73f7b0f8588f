package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// TestRoutedCallsCheckTheOwner: a call routed by user u must not see or
// change the records of another user v that live in the same shard.
func TestRoutedCallsCheckTheOwner(t *testing.T) {
	tc := newTestCluster(t, 1, 2, nil)
	c := tc.client()
	ctx := ctxT(t, 30*time.Second)
	m := c.Map()
	var u, v keys.UserID
	u[0] = 1
	for i := 2; ; i++ {
		v[0], v[1] = byte(i), byte(i>>8)
		if m.ShardOf(v[:]) == m.ShardOf(u[:]) {
			break
		}
	}
	var sid keys.SessionID
	sid[0] = 7
	var aid keys.AgentID
	aid[0] = 9
	reg := c.Registry()
	if err := reg.PutSession(ctx, &records.SessionRecord{SessionID: sid, AgentID: aid, UserID: v, CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.UpdateSessionStatusOf(ctx, u, sid, records.SessionClosed); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("update of v's session routed by u: %v, want ErrNotFound", err)
	}
	s, err := reg.GetSessionOf(ctx, v, sid)
	if err != nil || s.Status != records.SessionActive || s.ClosedAt != nil {
		t.Fatalf("v's session changed by u's call: %+v %v", s, err)
	}
	if _, err := reg.UpdateSessionStatusOf(ctx, v, sid, records.SessionClosed); err != nil {
		t.Fatalf("owner's update: %v", err)
	}
}
