// Package pebblelog adapts a log/slog logger to pebble.Logger, for the two
// packages that open Pebble (fsm and raftlog). It imports only slog and
// Pebble's Logger interface.
//
// Usage:
//
//	opts := &pebble.Options{Logger: pebblelog.New(log.With("component", "pebble"))}
package pebblelog

import (
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
)

// Logger writes Pebble's messages to an slog.Logger: Infof at Debug (Pebble
// reports every flush and compaction), Errorf at Error.
type Logger struct{ log *slog.Logger }

var _ pebble.Logger = Logger{}

// New returns a Logger writing to log.
func New(log *slog.Logger) Logger { return Logger{log} }

// Infof logs at Debug.
func (l Logger) Infof(format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...))
}

// Errorf logs at Error.
func (l Logger) Errorf(format string, args ...any) {
	l.log.Error(fmt.Sprintf(format, args...))
}

// Fatalf is called by Pebble on an unrecoverable storage error (a failed
// WAL write or sync); Pebble does not expect it to return. It logs and
// panics instead of exiting the process, so that the caller's recovery and
// shutdown still run.
func (l Logger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.log.Error("pebble fatal: " + msg)
	panic("pebble fatal: " + msg)
}
