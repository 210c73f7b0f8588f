package keys_test

import (
	"fmt"

	"github.com/swarmkv/swarmkv/keys"
)

func Example() {
	var user keys.UserID
	user[31] = 0xff
	agent := keys.AgentID{0xab}

	k := keys.Agent(user, agent)
	fmt.Printf("%s key: %d bytes, table 0x%02x\n", keys.TableName(k[0]), len(k), k[0])

	// Bounds of a scan over every agent of user.
	lower := keys.AgentPrefix(user)
	upper := keys.PrefixEnd(lower)
	fmt.Printf("scan [%x.., %x)\n", lower[:2], upper)

	u, a, err := keys.DecodeAgent(k)
	fmt.Println(u == user, a == agent, err)

	kv := keys.KV([]byte("user-1"), []byte("profile"))
	rk, key, err := keys.DecodeKV(kv)
	fmt.Printf("%x -> %q %q %v\n", kv[:3], rk, key, err)
	// Output:
	// agents key: 65 bytes, table 0x01
	// scan [0100.., 0100000000000000000000000000000000000000000000000000000000000001)
	// true true <nil>
	// 200006 -> "user-1" "profile" <nil>
}
