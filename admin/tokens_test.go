package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/swarmkv/swarmkv/auth/authn"
	"github.com/swarmkv/swarmkv/cluster"
)

// TestTokenErrorStatus pins the HTTP status of each error a token route
// can answer: the node's one table (cluster.HTTPStatus), not a switch of
// the routes' own. The body is {"error": the error's text}.
func TestTokenErrorStatus(t *testing.T) {
	_, _, badName := authn.CheckTokenRequest("", []string{"kv:read"}, "")
	_, _, badRole := authn.CheckTokenRequest("ci", []string{"kv:fly"}, "")
	for _, tt := range []struct {
		name string
		err  error
		want int
	}{
		{"bad body", fmt.Errorf("%w: body: want {...}", cluster.ErrInvalidArgument), http.StatusBadRequest},
		{"bad token name", badName, http.StatusBadRequest},
		{"bad role", badRole, http.StatusBadRequest},
		{"bad token id", authn.CheckTokenID("zz"), http.StatusBadRequest},
		{"unknown token", cluster.ErrTokenNotFound, http.StatusNotFound},
		{"not the meta leader", cluster.ErrMetaNotLeader, http.StatusConflict},
		{"not the shard leader", cluster.ErrNotLeader, http.StatusConflict},
		{"leader not ready", cluster.ErrLeaderNotReady, http.StatusServiceUnavailable},
		{"node closing", cluster.ErrClosed, http.StatusServiceUnavailable},
		{"deadline", context.DeadlineExceeded, http.StatusServiceUnavailable},
		{"anything else", errors.New("boom"), http.StatusInternalServerError},
	} {
		if tt.err == nil {
			t.Fatalf("%s: no error to answer", tt.name)
		}
		// A forwarded request is not forwarded again, and a canceled one
		// does not wait between the retries of ErrLeaderNotReady: both
		// answer at once, with no node needed.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/tokens", nil)
		r.Header.Set(forwardedHeader, "n0")
		w := httptest.NewRecorder()
		tokenHandler(nil, func(context.Context, *http.Request) (any, error) { return nil, tt.err })(w, r)
		if w.Code != tt.want || w.Code != cluster.HTTPStatus(tt.err) {
			t.Errorf("%s (%v): %d, want %d (cluster.HTTPStatus: %d)", tt.name, tt.err, w.Code, tt.want, cluster.HTTPStatus(tt.err))
		}
		var body struct{ Error string }
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Error != tt.err.Error() {
			t.Errorf("%s: body %q (%v), want the error's text", tt.name, w.Body, err)
		}
	}
}
