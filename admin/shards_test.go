package admin

import (
	"errors"
	"testing"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/shard"
)

func TestSplitSlots(t *testing.T) {
	for _, tc := range []struct {
		query string
		has   bool
		body  string
		want  string // "" for nil (the upper half)
	}{
		{want: ""},
		{body: "  \n", want: ""},
		{body: "{}", want: ""},
		{query: "0-15,32", has: true, want: "0-15,32"},
		{body: "0-15,32\n", want: "0-15,32"},
		{body: `{"slots":"200-255"}`, want: "200-255"},
	} {
		got, err := splitSlots(tc.query, tc.has, []byte(tc.body))
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		if (got == nil) != (tc.want == "") || got != nil && got.String() != tc.want {
			t.Fatalf("%+v: got %v, want %q", tc, got, tc.want)
		}
	}
	for _, tc := range []struct {
		query string
		has   bool
		body  string
	}{
		{has: true},                        // ?slots= with nothing
		{query: "1", has: true, body: "2"}, // both
		{body: "300"},
		{body: "a-b"},
		{body: `{"slots":""}`},
		{body: `{"slots":"1","x":2}`},
		{body: `{"slots":1}`},
		{body: `{"slots":"1"} {}`},
		{query: "5-1", has: true},
	} {
		if got, err := splitSlots(tc.query, tc.has, []byte(tc.body)); !errors.Is(err, cluster.ErrInvalidArgument) {
			t.Errorf("%+v: %v, %v; want ErrInvalidArgument", tc, got, err)
		}
	}
}

func TestParseShardID(t *testing.T) {
	for s, want := range map[string]shard.ID{"0": 0, "7": 7, "255": 255} {
		if got, err := parseShardID(s); err != nil || got != want {
			t.Errorf("parseShardID(%q) = %d, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "-1", "256", "meta", "1.0", "0x1", " 1"} {
		if _, err := parseShardID(s); !errors.Is(err, cluster.ErrInvalidArgument) {
			t.Errorf("parseShardID(%q) = %v, want ErrInvalidArgument", s, err)
		}
	}
}

// FuzzSplitSlots: a split request's slots parse to a non-empty set or
// are refused with ErrInvalidArgument; never a panic; the text form of
// what parses reads back the same.
func FuzzSplitSlots(f *testing.F) {
	for _, s := range []string{"", "0-15,32", `{"slots":"1-3"}`, "{}", `{"slots":null}`, "255", "1,1,1", "0-255"} {
		f.Add(s, false, s)
		f.Add(s, true, "")
	}
	f.Fuzz(func(t *testing.T, query string, has bool, body string) {
		got, err := splitSlots(query, has, []byte(body))
		if err != nil {
			if !errors.Is(err, cluster.ErrInvalidArgument) {
				t.Fatalf("error %v is not ErrInvalidArgument", err)
			}
			return
		}
		if got == nil {
			return
		}
		if got.IsEmpty() {
			t.Fatal("an empty set parsed")
		}
		again, err := shard.ParseSlotSet(got.String())
		if err != nil || again != *got {
			t.Fatalf("%q reads back as %v, %v", got.String(), again, err)
		}
	})
}
