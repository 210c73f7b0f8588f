package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestTLSAdmissionNeedsCertificate: with TLS, a node whose certificate is
// of another CA is not admitted (FailedPrecondition naming the CA), an
// address that presents another node's certificate does not prove an id,
// and a node with a proper certificate is admitted.
func TestTLSAdmissionNeedsCertificate(t *testing.T) {
	ca := newTestCA(t)
	key := make([]byte, 32)
	tc := newTLSCluster(t, 1, ca, func(c *Config) { c.GossipKeys = [][]byte{key} })
	defer tc.closeAll()
	tc.waitReady()
	n1 := tc.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	other := newTestCA(t)
	bad := tc.add("n8", func(c *Config) { c.TLS, c.HTTPAddr = other.node("n8"), "" })
	waitFor(t, 10*time.Second, "n8 in gossip", func() error {
		if _, ok := n1.members.Get("n8"); !ok {
			return errNotBootstrapped
		}
		return nil
	})
	_, err := n1.JoinNode(ctx, "n8")
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "node certificate of this cluster's CA") {
		t.Fatalf("join of a node with another CA's certificate: %v, want FailedPrecondition", err)
	}
	if st, _ := n1.adminMeta(ctx); st.Member("n8") != nil {
		t.Fatal("n8 recorded as a member")
	}
	tc.stop(bad)

	// An address served by another node does not prove the candidate's id.
	g, _ := n1.members.Get("n1")
	err = n1.verifyCandidate(ctx, "n9", g.Meta)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `certificate of node "n1", not "n9"`) {
		t.Fatalf("n1's addresses as n9's: %v", err)
	}

	good := tc.add("n2", func(c *Config) { c.TLS, c.HTTPAddr = ca.node("n2"), "" })
	waitFor(t, 10*time.Second, "join n2", func() error {
		_, err := n1.JoinNode(ctx, "n2")
		return err
	})
	waitFor(t, 30*time.Second, "n2 ready", func() error { return tc.nodes[good].Ready() })
}
