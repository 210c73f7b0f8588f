package linelog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestWriterLevels: the bracketed level picks the slog level and is cut
// from the message; a line without one is logged at Info as it is.
func TestWriterLevels(t *testing.T) {
	for _, tc := range []struct{ in, level, msg string }{
		{"[WARN]  raft: heartbeat timeout reached\n", "WARN", "raft: heartbeat timeout reached"},
		{"[ERR] memberlist: failed\n", "ERROR", "memberlist: failed"},
		{"[ERROR] raft: failed", "ERROR", "raft: failed"},
		{"[DEBUG] raft: detail", "DEBUG", "raft: detail"},
		{"[INFO]  raft: started", "INFO", "raft: started"},
		{"no level here", "INFO", "no level here"},
	} {
		var buf bytes.Buffer
		w := Writer{Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
		if n, err := w.Write([]byte(tc.in)); n != len(tc.in) || err != nil {
			t.Errorf("Write(%q) = %d, %v", tc.in, n, err)
		}
		out := buf.String()
		if !strings.Contains(out, "level="+tc.level) || !strings.Contains(out, "msg=\""+tc.msg+"\"") {
			t.Errorf("Write(%q) logged %q, want level %s, msg %q", tc.in, out, tc.level, tc.msg)
		}
	}
}
