package backup

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/shard"
)

// The admin API's backup routes (package admin serves them; they need
// the admin role):
//
//	GET /v1/backup/state          the committed cluster state, tokens' hashes
//	                              included (JSON); 409 while a move is in progress
//	GET /v1/backup/shards/{shard} one section (application/octet-stream): the
//	                              shard's state, streamed from its leader
const (
	StatePath  = "/v1/backup/state"
	ShardsPath = "/v1/backup/shards/"
)

// HTTPSource is a cluster's admin HTTP API as a Source.
type HTTPSource struct {
	// Client makes the requests (its Timeout must be 0 or cover a whole
	// shard: the context bounds them instead).
	Client *http.Client
	// BaseURL is a member's admin address, "http://host:port" or
	// "https://host:port".
	BaseURL string
	// Authorize, if set, adds the credential to each request (a bearer
	// token, a signature with the cluster secret).
	Authorize func(*http.Request) error
}

// StateError is an error the admin API answered.
type StateError struct {
	Code int
	Msg  string
}

func (e *StateError) Error() string { return fmt.Sprintf("admin API: %d: %s", e.Code, e.Msg) }

func (s *HTTPSource) get(ctx context.Context, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(s.BaseURL, "/")+path, nil)
	if err != nil {
		return nil, err
	}
	if s.Authorize != nil {
		if err := s.Authorize(req); err != nil {
			return nil, err
		}
	}
	resp, err := s.Client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(b))
		}
		if resp.StatusCode == http.StatusConflict && strings.Contains(e.Error, ErrMoveInProgress.Error()) {
			return nil, fmt.Errorf("%w%s", ErrMoveInProgress, strings.TrimPrefix(e.Error, ErrMoveInProgress.Error()))
		}
		return nil, &StateError{Code: resp.StatusCode, Msg: e.Error}
	}
	return resp, nil
}

// State GETs /v1/backup/state.
func (s *HTTPSource) State(ctx context.Context) (*placement.State, error) {
	resp, err := s.get(ctx, StatePath)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var st placement.State
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxManifest)).Decode(&st); err != nil {
		return nil, fmt.Errorf("admin API: cluster state: %w", err)
	}
	return &st, nil
}

// Shard GETs /v1/backup/shards/{id}.
func (s *HTTPSource) Shard(ctx context.Context, id shard.ID) (io.ReadCloser, error) {
	resp, err := s.get(ctx, fmt.Sprintf("%s%d", ShardsPath, id))
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}
