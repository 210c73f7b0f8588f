package rpc

import (
	"fmt"

	"github.com/swarmkv/swarmkv/records"
)

// Conversions of the Pools service's messages (seed 004). Unlike the
// registry's FromProto functions, these do not validate: the server sets
// the fields it owns (owner, timestamps, the sealed token) first and then
// calls the record's Validate. They check only that enumerations fit their
// one-byte types.

// PoolToProto converts a pool record.
func PoolToProto(p *records.Pool) *Pool {
	return &Pool{PoolId: p.PoolID, OwnerUserId: p.OwnerUserID, Name: p.Name, Visibility: uint32(p.Visibility),
		Meta: p.Meta, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt}
}

// PoolFromProto converts a pool message (owner and timestamps as sent;
// not validated).
func PoolFromProto(p *Pool) (*records.Pool, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: pool is missing", records.ErrInvalid)
	}
	v := records.Visibility(p.GetVisibility())
	if p.GetVisibility() > 255 || !v.Valid() {
		return nil, fmt.Errorf("%w: visibility %d: want 0 (public) or 1 (private)", records.ErrInvalid, p.GetVisibility())
	}
	return &records.Pool{PoolID: p.GetPoolId(), OwnerUserID: p.GetOwnerUserId(), Name: p.GetName(), Visibility: v,
		Meta: p.GetMeta(), CreatedAt: p.GetCreatedAt(), UpdatedAt: p.GetUpdatedAt()}, nil
}

// BotToProto converts a bot record without its token: HasToken says
// whether one is stored. No response but GetBotTokenResponse carries a
// token.
func BotToProto(b *records.Bot) *Bot {
	return &Bot{AgentId: b.AgentID, ClientId: b.ClientID, Tag: b.Tag, Status: uint32(b.Status), PoolId: b.PoolID,
		OwnerUserId: b.OwnerUserID, Profile: b.Profile, CreatedAt: b.CreatedAt, UpdatedAt: b.UpdatedAt,
		HasToken: !b.Token.IsZero()}
}

// BotFromProto converts a bot message except its token: the plaintext in
// p.Token is for the caller to seal into the record's Token (see package
// secrets). Not validated.
func BotFromProto(p *Bot) (*records.Bot, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: bot is missing", records.ErrInvalid)
	}
	st := records.BotStatus(p.GetStatus())
	if p.GetStatus() > 255 || !st.Valid() {
		return nil, fmt.Errorf("%w: bot status %d: want 0 (active), 1 (inactive) or 2 (disabled)", records.ErrInvalid, p.GetStatus())
	}
	return &records.Bot{AgentID: p.GetAgentId(), ClientID: p.GetClientId(), Tag: p.GetTag(), Status: st,
		PoolID: p.GetPoolId(), OwnerUserID: p.GetOwnerUserId(), Profile: p.GetProfile(),
		CreatedAt: p.GetCreatedAt(), UpdatedAt: p.GetUpdatedAt()}, nil
}

// RunnerToProto converts a runner record.
func RunnerToProto(r *records.Runner) *Runner {
	return &Runner{RunnerId: r.RunnerID, LastSeen: r.LastSeen, Meta: r.Meta}
}

// RunnerFromProto converts a runner message (not validated).
func RunnerFromProto(p *Runner) (*records.Runner, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: runner is missing", records.ErrInvalid)
	}
	return &records.Runner{RunnerID: p.GetRunnerId(), LastSeen: p.GetLastSeen(), Meta: p.GetMeta()}, nil
}
