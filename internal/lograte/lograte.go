// Package lograte wraps a slog.Logger so that each message passes at most
// once per period, counting the records it drops: a flood of refused
// connections or failed handshakes costs a line a second, not a line each.
// It owns only that; it imports the standard library alone, so the node
// (cluster), the transport and the fronts can all use it.
//
// Usage:
//
//	log := lograte.New(base, lograte.Every).With("listener", "raft")
//	log.Warn("refused connection", "remote", addr) // at most once a second
package lograte

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Every is the period the node's rate-limited loggers use: one record of
// a message per second.
const Every = time.Second

// rateLimitKeys bounds the messages a rate-limited logger remembers; past
// it, messages not seen for a period are forgotten.
const rateLimitKeys = 1024

// New returns a logger that passes at most one record of each
// message (and level) per period, so a flood of refused connections or
// failed handshakes costs a line a second, not a line each. The next
// record of a message that passes carries "suppressed": the number of
// records of it dropped since the last one. Loggers derived from it
// (With, WithGroup) share its budget.
func New(l *slog.Logger, period time.Duration) *slog.Logger {
	return NewKeyed(l, period, nil)
}

// NewKeyed is New with the messages grouped by key(message) instead (nil:
// the message itself), for messages that quote a peer (HTTPKey).
func NewKeyed(l *slog.Logger, period time.Duration, key func(string) string) *slog.Logger {
	return slog.New(&rateLimitHandler{Handler: l.Handler(), st: &rateState{period: period, key: key, keys: map[rateKey]*rateEntry{}}})
}

// HTTPKey groups net/http's error log lines by kind: "http: TLS
// handshake error from 192.0.2.1:4711: EOF" by "http: TLS handshake
// error".
func HTTPKey(msg string) string {
	if i := strings.Index(msg, " from "); i >= 0 {
		msg = msg[:i]
	}
	if i := strings.Index(msg, ": "); i >= 0 {
		if j := strings.Index(msg[i+2:], ": "); j >= 0 {
			msg = msg[:i+2+j]
		}
	}
	return msg
}

type rateLimitHandler struct {
	slog.Handler
	st *rateState
}

type rateState struct {
	period time.Duration
	key    func(string) string // nil: the message
	mu     sync.Mutex
	keys   map[rateKey]*rateEntry
}

type rateKey struct {
	level slog.Level
	msg   string
}

type rateEntry struct {
	last       time.Time // when the last record passed
	suppressed int64     // records dropped since
}

// admit reports whether a record of k at now passes, and how many were
// dropped before it.
func (s *rateState) admit(k rateKey, now time.Time) (bool, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.keys[k]
	if e != nil && now.Sub(e.last) < s.period {
		e.suppressed++
		return false, 0
	}
	if e == nil {
		if len(s.keys) >= rateLimitKeys {
			for k, e := range s.keys {
				if now.Sub(e.last) >= s.period {
					delete(s.keys, k)
				}
			}
		}
		e = &rateEntry{}
		s.keys[k] = e
	}
	n := e.suppressed
	e.last, e.suppressed = now, 0
	return true, n
}

func (h *rateLimitHandler) Handle(ctx context.Context, r slog.Record) error {
	now := r.Time
	if now.IsZero() {
		now = time.Now()
	}
	msg := r.Message
	if h.st.key != nil {
		msg = h.st.key(msg)
	}
	ok, n := h.st.admit(rateKey{r.Level, msg}, now)
	if !ok {
		return nil
	}
	if n > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int64("suppressed", n))
	}
	return h.Handler.Handle(ctx, r)
}

func (h *rateLimitHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &rateLimitHandler{Handler: h.Handler.WithAttrs(as), st: h.st}
}

func (h *rateLimitHandler) WithGroup(name string) slog.Handler {
	return &rateLimitHandler{Handler: h.Handler.WithGroup(name), st: h.st}
}
