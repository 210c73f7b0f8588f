package resp

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

func TestAppend(t *testing.T) {
	for _, tc := range []struct {
		v      Value
		r2, r3 string
	}{
		{OK, "+OK\r\n", "+OK\r\n"},
		{Error("ERR a\r\nb"), "-ERR a  b\r\n", "-ERR a  b\r\n"},
		{Int(-7), ":-7\r\n", ":-7\r\n"},
		{Bulk(""), "$0\r\n\r\n", "$0\r\n\r\n"},
		{Bulk("hé"), "$3\r\nhé\r\n", "$3\r\nhé\r\n"},
		{Null, "$-1\r\n", "_\r\n"},
		{NullArray, "*-1\r\n", "_\r\n"},
		{Array(), "*0\r\n", "*0\r\n"},
		{Array(Int(1), Null), "*2\r\n:1\r\n$-1\r\n", "*2\r\n:1\r\n_\r\n"},
		{Map(Bulk("f"), Bulk("v")), "*2\r\n$1\r\nf\r\n$1\r\nv\r\n", "%1\r\n$1\r\nf\r\n$1\r\nv\r\n"},
		{Set(Bulk("m")), "*1\r\n$1\r\nm\r\n", "~1\r\n$1\r\nm\r\n"},
		{Value{}, "*0\r\n", "*0\r\n"},
	} {
		if got := string(tc.v.Append(nil, 2)); got != tc.r2 {
			t.Errorf("RESP2 %+v = %q, want %q", tc.v, got, tc.r2)
		}
		if got := string(tc.v.Append(nil, 3)); got != tc.r3 {
			t.Errorf("RESP3 %+v = %q, want %q", tc.v, got, tc.r3)
		}
	}
}

func TestErrors(t *testing.T) {
	if got, want := UnknownCommand([][]byte{[]byte("FOO"), []byte("a"), []byte("b")}).String(),
		"ERR unknown command 'FOO', with args beginning with: 'a' 'b' "; got != want {
		t.Errorf("UnknownCommand = %q, want %q", got, want)
	}
	if got, want := UnknownCommand([][]byte{[]byte("x")}).String(),
		"ERR unknown command 'x', with args beginning with: "; got != want {
		t.Errorf("UnknownCommand = %q, want %q", got, want)
	}
	long := UnknownCommand([][]byte{[]byte("x"), bytes.Repeat([]byte("a"), 200), []byte("b")}).String()
	if !strings.HasSuffix(long, "'"+strings.Repeat("a", 128)+"' ") {
		t.Errorf("long args not cut at 128 bytes: %q", long)
	}
	if got, want := WrongArgs("GET").String(), "ERR wrong number of arguments for 'get' command"; got != want {
		t.Errorf("WrongArgs = %q, want %q", got, want)
	}
}

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		p, s string
		want bool
	}{
		{"*", "", true}, {"*", "abc", true}, {"a*", "abc", true}, {"a*", "bac", false},
		{"*c", "abc", true}, {"a?c", "abc", true}, {"a?c", "ac", false},
		{"h[ae]llo", "hello", true}, {"h[ae]llo", "hillo", false}, {"h[^e]llo", "hallo", true},
		{"h[^e]llo", "hello", false}, {"h[a-b]llo", "hbllo", true}, {"h[b-a]llo", "hallo", true},
		{"h[a-b]llo", "hcllo", false}, {`h\*llo`, "h*llo", true}, {`h\*llo`, "hello", false},
		{"asset:*", "asset:index", true}, {"asset:category:*", "asset:index", false},
		{"**a", "ba", true}, {"a*", "a", true}, {"a**", "a", true}, {"[abc", "a", true},
		{"", "", true}, {"", "a", false}, {"a", "", false},
	} {
		if got := Match([]byte(tc.p), []byte(tc.s)); got != tc.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tc.p, tc.s, got, tc.want)
		}
	}
	if got := string(LiteralPrefix([]byte("asset:cat*"))); got != "asset:cat" {
		t.Errorf("LiteralPrefix = %q", got)
	}
}

// globRegexp translates the patterns of FuzzMatch's reference (stars,
// question marks and literal letters only) to a regexp.
func globRegexp(p string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString(`(?s)\A`)
	for _, c := range p {
		switch c {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString(`\z`)
	return regexp.MustCompile(b.String())
}

// FuzzMatch checks Match against a regexp reference on patterns of '*',
// '?' and two letters, and that any pattern terminates without panicking.
func FuzzMatch(f *testing.F) {
	f.Add("a*b?", "aXXbY")
	f.Add("*a*a*a*a*a*b", strings.Repeat("a", 40))
	f.Add("[^a-", "b")
	f.Fuzz(func(t *testing.T, p, s string) {
		got := Match([]byte(p), []byte(s))
		if strings.Trim(p, "*?ab") != "" || strings.Trim(s, "ab") != "" {
			return
		}
		if len(s) == 0 && p == "*" {
			return // KEYS * special case
		}
		// Redis's matcher never matches an empty string against a
		// non-empty pattern (its loop needs a byte); the reference agrees
		// except for all-star patterns, which Redis also rejects.
		want := globRegexp(p).MatchString(s)
		if len(s) == 0 && len(p) > 0 {
			want = false
		}
		if got != want {
			t.Fatalf("Match(%q, %q) = %v, reference %v", p, s, got, want)
		}
	})
}
