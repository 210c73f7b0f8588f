package cluster

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/status"
)

// TestErrKindsRows checks that every row of the error table is reachable
// (no earlier row or typed error shadows it), also wrapped, and that its
// status carries the kind's code and message. The round trip through the
// client is client/roundtrip_test.go.
func TestErrKindsRows(t *testing.T) {
	for _, r := range errKinds {
		for _, err := range []error{r.err, fmt.Errorf("wrapped: %w", r.err)} {
			if k := ErrorKind(err); k != r.kind {
				t.Errorf("ErrorKind(%v) = %s, want %s", err, k, r.kind)
			}
			st := status.Convert(StatusError(err, 1, nil))
			if st.Code() != r.kind.Code() {
				t.Errorf("StatusError(%v) code %s, want %s", err, st.Code(), r.kind.Code())
			}
			if r.msg != "" && st.Message() != r.msg {
				t.Errorf("StatusError(%v) message %q, want %q", err, st.Message(), r.msg)
			}
		}
	}
}
