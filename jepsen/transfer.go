package jepsen

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"
)

func init() {
	RegisterNemesis("leader-transfer", func() Nemesis { return &transferNemesis{} })
}

// transferNemesis is a leadership transfer storm: while active it asks a
// random node's admin API to move a random group's leadership (a shard, now
// and then the meta group) to any up-to-date voter, every 100-400ms.
type transferNemesis struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	ok     int
	failed int
	last   string // last error
}

func (t *transferNemesis) Name() string { return "leader-transfer" }

func (t *transferNemesis) Start(ctx context.Context, env *Env) (string, error) {
	addrs := env.Driver.AdminAddrs()
	if len(addrs) == 0 {
		return "", fmt.Errorf("%w: no admin addresses", ErrUnsupported)
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	shards := numShards(ctx, hc, addrs)
	t.mu.Lock()
	t.ok, t.failed, t.last = 0, 0, ""
	t.mu.Unlock()
	// The storm runs until Stop, not until Start's ctx ends.
	sctx, cancel := context.WithCancel(context.Background())
	t.cancel, t.done = cancel, make(chan struct{})
	seed := env.Rng.Uint64()
	go func() {
		defer close(t.done)
		rng := newRand(seed)
		for {
			group := strconv.Itoa(rng.IntN(shards))
			if rng.IntN(shards+1) == 0 {
				group = "meta"
			}
			addr := addrs[rng.IntN(len(addrs))]
			err := transferLeader(sctx, hc, addr, group)
			t.mu.Lock()
			if err == nil {
				t.ok++
			} else if sctx.Err() == nil {
				t.failed++
				t.last = err.Error()
			}
			t.mu.Unlock()
			select {
			case <-sctx.Done():
				return
			case <-time.After(time.Duration(100+rng.IntN(300)) * time.Millisecond):
			}
		}
	}()
	return fmt.Sprintf("leadership transfers over %d shards and meta", shards), nil
}

func (t *transferNemesis) Stop(context.Context, *Env) error {
	if t.cancel != nil {
		t.cancel()
		<-t.done
		t.cancel = nil
	}
	return nil
}

// Result reports how many transfers the storm made.
func (t *transferNemesis) Result() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := fmt.Sprintf("%d transfers, %d refused", t.ok, t.failed)
	if t.last != "" {
		s += " (last: " + t.last + ")"
	}
	return s
}

func transferLeader(ctx context.Context, hc *http.Client, addr, group string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/shards/"+group+"/transfer-leader", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("transfer %s: %s: %s", group, resp.Status, body)
	}
	return nil
}

// numShards asks the admin API for the shard count (8 if no node answers).
func numShards(ctx context.Context, hc *http.Client, addrs []string) int {
	for _, a := range addrs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a+"/v1/status", nil)
		if err != nil {
			continue
		}
		resp, err := hc.Do(req)
		if err != nil {
			continue
		}
		var st struct {
			NumShards int `json:"num_shards"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err == nil && st.NumShards > 0 {
			return st.NumShards
		}
	}
	return 8
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x7a4f)) }
