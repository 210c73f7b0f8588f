package jepsen

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/shard"
)

var _ Resharding = (*Docker)(nil)

// The split-merge nemesis's calls, through the member via's admin HTTP
// API:
//
//	POST /v1/shards/{shard}/split[?slots=<set>]  the move, as placement.Move marshals
//	POST /v1/shards/merge?into=A&from=B          the move
//	GET  /v1/state                               the cluster state (its moves and slot map)
//
// A refused plan answers 409 Conflict, which these calls turn into
// FailedPrecondition (adminHTTP makes it Unavailable, as the membership
// steps retry it); 404 means the node has no such route (ErrUnsupported:
// the nemesis is left out of the schedule).

func (d *Docker) adminSplit(ctx context.Context, via string, id shard.ID, slots *shard.SlotSet) (placement.Move, error) {
	return dockerVia{d.httpAddr(via)}.split(ctx, id, slots)
}

func (d *Docker) adminMerge(ctx context.Context, via string, into, from shard.ID) (placement.Move, error) {
	return dockerVia{d.httpAddr(via)}.merge(ctx, into, from)
}

func (d *Docker) adminState(ctx context.Context, via string) (*cluster.State, error) {
	return dockerVia{d.httpAddr(via)}.state(ctx)
}

// dockerVia is one node's admin HTTP API at addr.
type dockerVia struct{ addr string }

func (v dockerVia) split(ctx context.Context, id shard.ID, slots *shard.SlotSet) (placement.Move, error) {
	u := fmt.Sprintf("http://%s/v1/shards/%d/split", v.addr, id)
	if slots != nil {
		u += "?slots=" + url.QueryEscape(slots.String())
	}
	var m placement.Move
	err := adminHTTP(ctx, http.MethodPost, u, nil, &m)
	return m, moveRefusal(err)
}

func (v dockerVia) merge(ctx context.Context, into, from shard.ID) (placement.Move, error) {
	u := fmt.Sprintf("http://%s/v1/shards/merge?into=%d&from=%d", v.addr, into, from)
	var m placement.Move
	err := adminHTTP(ctx, http.MethodPost, u, nil, &m)
	return m, moveRefusal(err)
}

func (v dockerVia) state(ctx context.Context) (*cluster.State, error) {
	var st cluster.State
	if err := adminHTTP(ctx, http.MethodGet, "http://"+v.addr+"/v1/state", nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// moveRefusal makes a 409 answer FailedPrecondition, and a 404 (a node
// without the shard routes: unknown shards are refusals)
// ErrUnsupported.
func moveRefusal(err error) error {
	var he *adminHTTPError
	switch {
	case errors.As(err, &he) && he.HTTP == http.StatusConflict:
		return status.Error(codes.FailedPrecondition, he.Error())
	case errors.As(err, &he) && he.HTTP == http.StatusNotFound:
		return fmt.Errorf("%w: the node's admin API has no shard split/merge routes: %w", ErrUnsupported, err)
	}
	return err
}
