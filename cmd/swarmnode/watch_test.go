package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/records"
)

// swarmnode watch prints a pools table's values as their records' JSON;
// a bot's sealed token is left out; an undecodable value is an error,
// not a line of garbage.
func TestWatchRecordJSON(t *testing.T) {
	runner, err := records.Encode(&records.Runner{RunnerID: "r1", LastSeen: 5, Meta: `{"h":1}`})
	if err != nil {
		t.Fatal(err)
	}
	got, err := recordJSON(client.TableRunners, runner)
	if err != nil || string(got) != `{"runner_id":"r1","last_seen":5,"meta":"{\"h\":1}"}` {
		t.Fatalf("runner: %s %v", got, err)
	}
	sealed := []byte("SEALED-CIPHERTEXT")
	bot, err := records.Encode(&records.Bot{AgentID: "b1", PoolID: "p1", Token: records.EncryptedToken{KeyID: "k1", Nonce: make([]byte, 12), Ciphertext: sealed}})
	if err != nil {
		t.Fatal(err)
	}
	got, err = recordJSON(client.TableBots, bot)
	if err != nil || !strings.Contains(string(got), `"agent_id":"b1"`) || strings.Contains(string(got), "k1") ||
		bytes.Contains(got, []byte("U0VBTEVE")) { // base64 of "SEALED"
		t.Fatalf("bot: %s %v", got, err)
	}
	if got, err := recordJSON(client.TablePools, []byte{0xff}); err == nil {
		t.Fatalf("garbage pool: %s, want an error", got)
	}
	if got, err := recordJSON(client.TableKV, []byte("v")); got != nil || err != nil {
		t.Fatalf("kv: %s %v, want nothing (printed as is)", got, err)
	}
}
