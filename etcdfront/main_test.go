package etcdfront_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/swarmkv/swarmkv/internal/leakcheck"
)

// TestMain checks that the front, its node and the etcd clients leave no
// goroutine behind (Front.Close joins its server).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, leakcheck.Options()...) }
