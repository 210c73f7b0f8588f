// Package linelog adapts the line-oriented loggers of hashicorp/raft
// (hclog with its time stamp disabled) and memberlist (log.Logger) to a
// log/slog logger, for the two packages that start them (cluster/replica
// and cluster). It imports only the standard library.
//
// Usage:
//
//	hlog := hclog.New(&hclog.LoggerOptions{Output: linelog.Writer{Logger: log}, DisableTime: true})
package linelog

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
)

// Writer writes each line it is given to Logger. Each Write is one line
// such as "[WARN]  raft: heartbeat timeout reached"; the bracketed level
// picks the slog level and the rest becomes the message.
type Writer struct {
	Logger *slog.Logger
}

func (w Writer) Write(p []byte) (int, error) {
	line := string(bytes.TrimSpace(p))
	level := slog.LevelInfo
	if i := strings.IndexByte(line, '['); i >= 0 {
		if j := strings.IndexByte(line[i:], ']'); j > 0 {
			switch line[i+1 : i+j] {
			case "TRACE", "DEBUG":
				level = slog.LevelDebug
			case "INFO":
				level = slog.LevelInfo
			case "WARN":
				level = slog.LevelWarn
			case "ERR", "ERROR":
				level = slog.LevelError
			}
			line = strings.TrimSpace(line[:i] + line[i+j+1:])
		}
	}
	w.Logger.Log(context.Background(), level, line)
	return len(p), nil
}
