package records

import (
	"encoding/json"
	"fmt"

	"github.com/swarmkv/swarmkv/keys"
)

// Agent pool records (seed 004): pools, the bots contributed to them, the
// runners that host the bots, and each guild's selected pool. Ids are
// strings of printable ASCII (keys.ValidateStringID); JSON fields (meta,
// profile) hold JSON text, "" meaning none.

// Seed 004 constants.
const (
	// DefaultPoolID is the seed pool every node's leader ensures exists
	// and is public.
	DefaultPoolID = "pool_goot27"
	// DefaultPoolName is the default pool's name.
	DefaultPoolName = "goot27"
	// SystemUserID owns the default pool.
	SystemUserID = "system"
	// MaxAgentsPerGuild is the most agents one guild may deploy
	// (MAX_AGENTS_PER_GUILD).
	MaxAgentsPerGuild = 49
)

// Limits of the pool records.
const (
	// MaxJSONLen is the longest meta or profile JSON text, in bytes.
	MaxJSONLen = 16 << 10
	// MaxTagLen is the longest bot tag ("name#1234"), in bytes.
	MaxTagLen = 256
	// MaxTokenKeyIDLen is the longest key id of an encrypted token.
	MaxTokenKeyIDLen = 64
	// TokenNonceLen is the AES-GCM nonce length of an encrypted token.
	TokenNonceLen = 12
	// MinTokenCiphertextLen is the shortest ciphertext: one byte of
	// plaintext plus the 16-byte GCM tag.
	MinTokenCiphertextLen = 17
	// MaxTokenCiphertextLen is the longest ciphertext, tag included.
	MaxTokenCiphertextLen = 4096
)

// Visibility says who may see and use a pool, stored as one byte.
type Visibility uint8

// Visibilities.
const (
	VisibilityPublic  Visibility = 0 // everyone may see, select and contribute to it
	VisibilityPrivate Visibility = 1 // only its owner
)

var visibilityNames = [...]string{"public", "private"}

// Valid reports whether v is a defined visibility.
func (v Visibility) Valid() bool { return int(v) < len(visibilityNames) }

func (v Visibility) String() string {
	if v.Valid() {
		return visibilityNames[v]
	}
	return fmt.Sprintf("visibility(%d)", uint8(v))
}

// ParseVisibility parses "public" or "private".
func ParseVisibility(name string) (Visibility, error) {
	for i, n := range visibilityNames {
		if n == name {
			return Visibility(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown visibility %q", ErrInvalid, name)
}

// BotStatus is a registered bot's status, stored as one byte. Deploy plans
// invite only active bots.
type BotStatus uint8

// Bot statuses.
const (
	BotActive   BotStatus = 0 // deployable
	BotInactive BotStatus = 1 // registered, not deployable for now
	BotDisabled BotStatus = 2 // switched off by its contributor or the pool owner
)

var botStatusNames = [...]string{"active", "inactive", "disabled"}

// Valid reports whether s is a defined status.
func (s BotStatus) Valid() bool { return int(s) < len(botStatusNames) }

func (s BotStatus) String() string {
	if s.Valid() {
		return botStatusNames[s]
	}
	return fmt.Sprintf("bot_status(%d)", uint8(s))
}

// ParseBotStatus parses a status name ("active").
func ParseBotStatus(name string) (BotStatus, error) {
	for i, n := range botStatusNames {
		if n == name {
			return BotStatus(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown bot status %q", ErrInvalid, name)
}

// EncryptedToken is a bot token sealed with AES-256-GCM by the node that
// received it, before the command entered the Raft log. The zero value
// (every field empty) means "no token".
type EncryptedToken struct {
	KeyID      string `cbor:"key_id" json:"key_id"`         // the key ring entry that sealed it
	Nonce      []byte `cbor:"nonce" json:"nonce"`           // TokenNonceLen bytes
	Ciphertext []byte `cbor:"ciphertext" json:"ciphertext"` // sealed token plus GCM tag
}

// IsZero reports whether t is the empty token ("no token").
func (t *EncryptedToken) IsZero() bool {
	return t.KeyID == "" && len(t.Nonce) == 0 && len(t.Ciphertext) == 0
}

// Pool is stored in `pools` under pool_id (seed table agent_pools).
type Pool struct {
	PoolID      string     `cbor:"pool_id" json:"pool_id"`
	OwnerUserID string     `cbor:"owner_user_id" json:"owner_user_id"`
	Name        string     `cbor:"name" json:"name"`
	Visibility  Visibility `cbor:"visibility" json:"visibility"`
	Meta        string     `cbor:"meta" json:"meta"` // JSON text, "" = none
	CreatedAt   int64      `cbor:"created_at" json:"created_at"`
	UpdatedAt   int64      `cbor:"updated_at" json:"updated_at"`
}

// UsableBy reports whether user may see, select and contribute to p: it
// is public, or user owns it.
func (p *Pool) UsableBy(user string) bool {
	return p.Visibility == VisibilityPublic || p.OwnerUserID == user
}

// Bot is stored in `bots` under agent_id (seed table agent_bots), and
// indexed in `bots_by_pool` under its pool.
type Bot struct {
	AgentID     string         `cbor:"agent_id" json:"agent_id"`
	Token       EncryptedToken `cbor:"token" json:"token"`
	ClientID    string         `cbor:"client_id" json:"client_id"` // "" = unknown (no invite URL)
	Tag         string         `cbor:"tag" json:"tag"`
	Status      BotStatus      `cbor:"status" json:"status"`
	PoolID      string         `cbor:"pool_id" json:"pool_id"`
	OwnerUserID string         `cbor:"owner_user_id" json:"owner_user_id"` // who contributed it
	Profile     string         `cbor:"profile" json:"profile"`             // JSON text, "" = none
	CreatedAt   int64          `cbor:"created_at" json:"created_at"`
	UpdatedAt   int64          `cbor:"updated_at" json:"updated_at"`
}

// Runner is stored in `runners` under runner_id (seed table agent_runners).
type Runner struct {
	RunnerID string `cbor:"runner_id" json:"runner_id"`
	LastSeen int64  `cbor:"last_seen" json:"last_seen"` // Unix ms, the proposer's clock
	Meta     string `cbor:"meta" json:"meta"`           // JSON text, "" = none
}

// GuildSettings is stored in `guild_settings` under guild_id: the guild's
// selected pool (the seed's guild_settings.data.selectedPoolId).
type GuildSettings struct {
	GuildID        string `cbor:"guild_id" json:"guild_id"`
	SelectedPoolID string `cbor:"selected_pool_id" json:"selected_pool_id"` // "" = none selected
	UpdatedAt      int64  `cbor:"updated_at" json:"updated_at"`
}

// checkID checks a required string id.
func checkID(field, id string, max int) error {
	if err := keys.ValidateStringID(field, id, max); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// checkJSON checks an optional JSON text field.
func checkJSON(field, s string) error {
	if err := checkString(field, s, MaxJSONLen, false); err != nil {
		return err
	}
	if s != "" && !json.Valid([]byte(s)) {
		return fmt.Errorf("%w: %s is not valid JSON", ErrInvalid, field)
	}
	return nil
}

// Validate checks the token: zero, or a key id, a nonce and a ciphertext
// of the lengths AES-256-GCM produces. It never puts token bytes in the
// error.
func (t *EncryptedToken) Validate() error {
	if t.IsZero() {
		return nil
	}
	if err := checkID("token.key_id", t.KeyID, MaxTokenKeyIDLen); err != nil {
		return err
	}
	if len(t.Nonce) != TokenNonceLen {
		return fmt.Errorf("%w: token.nonce is %d bytes, want %d", ErrInvalid, len(t.Nonce), TokenNonceLen)
	}
	if n := len(t.Ciphertext); n < MinTokenCiphertextLen || n > MaxTokenCiphertextLen {
		return fmt.Errorf("%w: token.ciphertext is %d bytes, want %d..%d", ErrInvalid, n, MinTokenCiphertextLen, MaxTokenCiphertextLen)
	}
	return nil
}

// Validate checks a pool's fields.
func (p *Pool) Validate() error {
	if err := checkID("pool_id", p.PoolID, keys.MaxPoolIDLen); err != nil {
		return err
	}
	if err := checkID("owner_user_id", p.OwnerUserID, keys.MaxStringIDLen); err != nil {
		return err
	}
	if err := checkString("name", p.Name, MaxNameLen, true); err != nil {
		return err
	}
	if !p.Visibility.Valid() {
		return fmt.Errorf("%w: %s", ErrInvalid, p.Visibility)
	}
	if err := checkJSON("meta", p.Meta); err != nil {
		return err
	}
	if err := checkTime("created_at", p.CreatedAt); err != nil {
		return err
	}
	return checkTime("updated_at", p.UpdatedAt)
}

// Validate checks a bot's fields. The token may be zero (no token).
func (b *Bot) Validate() error {
	if err := checkID("agent_id", b.AgentID, keys.MaxStringIDLen); err != nil {
		return err
	}
	if err := b.Token.Validate(); err != nil {
		return err
	}
	if b.ClientID != "" {
		if err := checkID("client_id", b.ClientID, keys.MaxStringIDLen); err != nil {
			return err
		}
	}
	if err := checkString("tag", b.Tag, MaxTagLen, false); err != nil {
		return err
	}
	if !b.Status.Valid() {
		return fmt.Errorf("%w: %s", ErrInvalid, b.Status)
	}
	if err := checkID("pool_id", b.PoolID, keys.MaxPoolIDLen); err != nil {
		return err
	}
	if err := checkID("owner_user_id", b.OwnerUserID, keys.MaxStringIDLen); err != nil {
		return err
	}
	if err := checkJSON("profile", b.Profile); err != nil {
		return err
	}
	if err := checkTime("created_at", b.CreatedAt); err != nil {
		return err
	}
	return checkTime("updated_at", b.UpdatedAt)
}

// Validate checks a runner's fields.
func (r *Runner) Validate() error {
	if err := checkID("runner_id", r.RunnerID, keys.MaxStringIDLen); err != nil {
		return err
	}
	if err := checkTime("last_seen", r.LastSeen); err != nil {
		return err
	}
	return checkJSON("meta", r.Meta)
}

// Validate checks a guild's settings. SelectedPoolID may be empty (no
// selection).
func (g *GuildSettings) Validate() error {
	if err := checkID("guild_id", g.GuildID, keys.MaxStringIDLen); err != nil {
		return err
	}
	if g.SelectedPoolID != "" {
		if err := checkID("selected_pool_id", g.SelectedPoolID, keys.MaxPoolIDLen); err != nil {
			return err
		}
	}
	return checkTime("updated_at", g.UpdatedAt)
}
