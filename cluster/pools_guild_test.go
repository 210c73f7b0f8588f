package cluster

import (
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/records"
)

// TestPoolsDeleteClearsGuildSelection: deleting a pool clears the guilds'
// selections of it, so plans fall back to the default pool instead of
// pointing at a pool id that someone may create again.
func TestPoolsDeleteClearsGuildSelection(t *testing.T) {
	tc := newPoolsCluster(t, poolsRing(t, "k1"), nil)
	p := tc.client().Pools()
	ctx := ctxT(t, 60*time.Second)
	if _, err := p.CreatePool(ctx, poolsOwner, client.PoolSpec{PoolID: "pool_sel", Name: "sel", Visibility: records.VisibilityPublic}); err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"g-a", "g-b"} {
		if err := p.SetGuildPool(ctx, poolsOther, g, "pool_sel"); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.SetGuildPool(ctx, poolsOther, "g-c", records.DefaultPoolID); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DeletePool(ctx, poolsOwner, "pool_sel", false); err != nil {
		t.Fatal(err)
	}
	for g, want := range map[string]string{"g-a": "", "g-b": "", "g-c": records.DefaultPoolID} {
		if got, err := p.GetGuildPool(ctx, g); err != nil || got != want {
			t.Errorf("GetGuildPool(%s) = %q, %v; want %q", g, got, err, want)
		}
	}
	plan, err := p.PlanDeploy(ctx, poolsOther, "g-a", 1, "", nil)
	if err != nil || plan.PoolID != records.DefaultPoolID {
		t.Fatalf("plan after the selected pool was deleted: %+v, %v; want the default pool", plan, err)
	}
	// Another user re-creating the id privately does not capture g-a.
	if _, err := p.CreatePool(ctx, poolsThird, client.PoolSpec{PoolID: "pool_sel", Name: "again", Visibility: records.VisibilityPrivate}); err != nil {
		t.Fatal(err)
	}
	if plan, err := p.PlanDeploy(ctx, poolsOther, "g-a", 1, "", nil); err != nil || plan.PoolID != records.DefaultPoolID {
		t.Fatalf("plan after the id was re-created: %+v, %v; want the default pool", plan, err)
	}
}
