package faultnet_test

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/swarmkv/swarmkv/internal/faultnet"
)

func ExampleNetwork() {
	fn := faultnet.New(1)
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	ln := fn.Listen("n1", raw) // n1 serves on ln
	defer ln.Close()
	dial := fn.Dialer("n2") // n2 dials through dial
	ctx := context.Background()

	fn.Partition([]string{"n1"}, []string{"n2"})
	_, err = dial(ctx, "tcp", ln.Addr().String())
	fmt.Println("partitioned:", errors.Is(err, faultnet.ErrUnreachable))

	fn.Heal()
	conn, err := dial(ctx, "tcp", ln.Addr().String())
	fmt.Println("healed:", err)
	conn.Close()

	fmt.Printf("%+v\n", fn.Stats())
	// Output:
	// partitioned: true
	// healed: <nil>
	// {Dials:2 RefusedDials:1 FaultClosed:0 Drops:0 DelayedWrites:0}
}
