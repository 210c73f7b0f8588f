package secrets_test

import (
	"fmt"

	"github.com/swarmkv/swarmkv/secrets"
)

func ExampleParseRing() {
	// Rotation: the new key first, the old one kept for tokens it sealed.
	ring, err := secrets.ParseRing(`
# swarmkv bot-token keys, active first
k2:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=
k1:Hx4dHBsaGRgXFhUUExIREA8ODQwLCgkIBwYFBAMCAQA=
`)
	if err != nil {
		fmt.Println(err)
		return
	}
	sealed, err := ring.Encrypt("1098765432109876", "bot-token")
	if err != nil {
		fmt.Println(err)
		return
	}
	token, err := ring.Decrypt("1098765432109876", sealed)
	fmt.Println(sealed.KeyID, token, err)
	_, err = ring.Decrypt("another-bot", sealed)
	fmt.Println(err)
	fmt.Println(ring)
	// Output:
	// k2 bot-token <nil>
	// secrets: token does not decrypt: wrong key, another agent id, or corrupted
	// secrets.Ring(keys k2,k1, active k2)
}
