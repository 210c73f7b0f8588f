package cluster

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/swarmkv/swarmkv/rpc"
)

// keepAliveStreamsHandled sums the KeepAliveStream streams the nodes'
// handlers have returned from (grpc_server_handled_total).
func (tc *testCluster) keepAliveStreamsHandled(t *testing.T) int {
	t.Helper()
	n := 0
	for _, node := range tc.nodes {
		resp, err := http.Get("http://" + node.Addrs().HTTPAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "grpc_server_handled_total{") && strings.Contains(line, `grpc_method="KeepAliveStream"`) {
				v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
				if err != nil {
					t.Fatalf("%s: %v", line, err)
				}
				n += int(v)
			}
		}
		resp.Body.Close()
	}
	return n
}

// TestKeepAliveStreamEndsWhenCancelled: a keep-alive stream whose client
// goes away while it floods keep-alives ends on the node. Before, the
// handler could wait forever for its receiver, which had returned on the
// stream's cancellation while handing over a request; the node then never
// finished shutting down (seen after scripts/watch-attack.sh's streams
// phase: SIGTERM, "shutting down", GracefulStop waiting on the handler).
func TestKeepAliveStreamEndsWhenCancelled(t *testing.T) {
	tc := newTestCluster(t, 1, 1, func(c *Config) {
		leaseTweak(c)
		c.HTTPAddr = freePort(t)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id, err := tc.client().Leases().Grant(ctx, []byte("flood"), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(tc.nodes[0].Addrs().GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	lc := rpc.NewLeaseClient(conn)
	// Many streams flooding at once, all cancelled mid-flood, as the
	// attack's clients went away.
	const rounds, streams = 3, 64
	for range rounds {
		sctx, scancel := context.WithCancel(ctx)
		var senders sync.WaitGroup
		for range streams {
			st, err := lc.KeepAliveStream(sctx)
			if err != nil {
				t.Fatal(err)
			}
			go func() { // take the answers until the stream ends
				for {
					if _, err := st.Recv(); err != nil {
						return
					}
				}
			}()
			senders.Add(1)
			go func() {
				defer senders.Done()
				for i := 0; i < 20000; i++ {
					if st.Send(&rpc.LeaseKeepAliveRequest{Id: uint64(id)}) != nil {
						return
					}
				}
			}()
		}
		time.Sleep(300 * time.Millisecond) // mid-flood
		scancel()
		senders.Wait()
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		started, handled := tc.keepAliveStreamsStarted(t), tc.keepAliveStreamsHandled(t)
		if started >= rounds*streams && handled == started {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keep-alive streams started, %d ended 20 s after their clients cancelled them", started, handled)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
