package replica

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/swarmkv/swarmkv/internal/fsutil"
	"github.com/swarmkv/swarmkv/shard"
)

// Seed makes dir (which must not exist) the folder of a replica of group
// id, of incarnation incarnation, that holds only a Raft snapshot at log
// index index, in term 1, whose configuration is the one voter self. The
// caller writes the state machine's snapshot stream (fsm.SnapshotWriter,
// of group id at index) to the sink and closes it (Cancel on failure). A
// replica opened on the folder (Open: Bootstrap finds this state and does
// nothing) restores the snapshot into its state machine and, as the
// group's only voter, elects itself; a replica added later receives the
// snapshot. Package cluster seeds the shards of a restored backup so.
func Seed(dir string, id shard.ID, incarnation uint64, self raft.Server, index uint64) (raft.SnapshotSink, error) {
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("shard %d: seed %s: the folder exists", id, dir)
	}
	if index == 0 {
		return nil, fmt.Errorf("shard %d: seed at index 0", id)
	}
	if err := fsutil.PrivateDir(dir); err != nil {
		return nil, err
	}
	if err := fsutil.WriteFileDurable(dir, incarnationFile, []byte(strconv.FormatUint(incarnation, 10)+"\n")); err != nil {
		return nil, fmt.Errorf("shard %d: record the incarnation: %w", id, err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hclog.NewNullLogger())
	if err != nil {
		return nil, fmt.Errorf("shard %d: snapshot store: %w", id, err)
	}
	_, trans := raft.NewInmemTransport(self.Address) // encodes the configuration's peers only
	defer trans.Close()
	self.Suffrage = raft.Voter
	sink, err := snaps.Create(raft.SnapshotVersionMax, index, 1, raft.Configuration{Servers: []raft.Server{self}}, index, trans)
	if err != nil {
		return nil, fmt.Errorf("shard %d: seed snapshot: %w", id, err)
	}
	return sink, nil
}
