package admin

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/backup"
	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/fsm"
)

// The backup routes (package backup takes a backup through them;
// docs/operations.md, "Backup and restore"):
//
//	GET /v1/backup/state          the committed cluster state with the tokens'
//	                              secret hashes (JSON); 409 while a split or
//	                              merge is in progress
//	GET /v1/backup/shards/{shard} the shard's state as one backup section
//	                              (application/octet-stream), streamed from
//	                              its leader at a committed index
//
// A shard's stream has no overall deadline: each write gets the server's
// write timeout anew. An error before its first byte answers JSON with
// its status; after it the connection is cut, so the client sees a
// truncated section, never a short one that looks whole.

func backupRoutes(n Node, handle handleFunc, mux *http.ServeMux) {
	handle("GET "+backup.StatePath, func(ctx context.Context, r *http.Request) (any, error) {
		return n.BackupState(ctx)
	})
	writeTimeout := n.Config().HTTPWriteTimeout
	mux.HandleFunc("GET "+backup.ShardsPath+"{shard}", func(w http.ResponseWriter, r *http.Request) {
		id, err := parseShardID(r.PathValue("shard"))
		if err != nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(cluster.HTTPStatus(err))
			writeJSONError(w, status.Convert(err).Message())
			return
		}
		rc := http.NewResponseController(w)
		bw := bufio.NewWriterSize(w, 64<<10)
		var sw *backup.SectionWriter
		err = n.BackupShard(r.Context(), id, func(index uint64) error {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.WriteHeader(http.StatusOK)
			sw = backup.NewSectionWriter(bw, id, index)
			return nil
		}, func(pairs []fsm.Pair) error {
			_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
			for _, p := range pairs {
				if err := sw.Record(p.Key, p.Value); err != nil {
					return err
				}
			}
			if err := bw.Flush(); err != nil {
				return err
			}
			return rc.Flush()
		})
		if err == nil {
			_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
			if _, err = sw.Finish(); err == nil {
				err = bw.Flush()
			}
		}
		if err == nil {
			return
		}
		if sw == nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(cluster.HTTPStatus(err))
			json.NewEncoder(w).Encode(map[string]string{"error": status.Convert(err).Message()})
			return
		}
		if !errors.Is(err, context.Canceled) && status.Code(err) != codes.Canceled {
			n.Logger().Warn("backup: shard stream cut", "shard", uint32(id), "err", err)
		}
		panic(http.ErrAbortHandler) // cut the connection: the section stays incomplete
	})
}
