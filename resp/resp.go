// Package resp holds Redis replies as values and writes them in the Redis
// serialization protocol, RESP2 or RESP3 (https://redis.io/docs/latest/develop/reference/protocol-spec/).
// A reply is computed once, as a Value, wherever the command runs (the
// state machine of a shard replica, or a RESP front) and written in the
// protocol version the client's connection speaks (HELLO 3 switches to
// RESP3), and reads commands within bounds (Reader, reader.go).
//
//	v := resp.Map(resp.Bulk("id"), resp.Bulk("google_search"))
//	b := v.Append(nil, 2) // "*2\r\n$2\r\nid\r\n$13\r\ngoogle_search\r\n"
//	b = v.Append(nil, 3)  // "%1\r\n$2\r\nid\r\n$13\r\ngoogle_search\r\n"
//
// It also implements Redis's glob-style pattern matching (Match), used by
// KEYS and SCAN MATCH.
package resp

import (
	"strconv"
	"strings"
)

// Kind is the type of a Value.
type Kind uint8

const (
	KindSimple    Kind = 1 // +OK
	KindError     Kind = 2 // -ERR ...
	KindInt       Kind = 3 // :42
	KindBulk      Kind = 4 // $5 hello
	KindNull      Kind = 5 // a missing bulk string: $-1 (RESP2), _ (RESP3)
	KindNullArray Kind = 6 // a missing array: *-1 (RESP2), _ (RESP3)
	KindArray     Kind = 7 // *n
	KindMap       Kind = 8 // %n pairs (RESP3); a flat array of 2n (RESP2)
	KindSet       Kind = 9 // ~n (RESP3); an array (RESP2)
)

// Value is one reply. Str holds simple strings, errors (the whole message,
// "ERR ..." included) and bulk strings; Int integers; Elems the elements of
// arrays and sets and the keys and values, alternating, of maps.
type Value struct {
	Kind  Kind
	Str   []byte
	Int   int64
	Elems []Value
}

// Constructors.
var (
	OK     = Simple("OK")
	Queued = Simple("QUEUED")
	Null   = Value{Kind: KindNull}
	// NullArray is the reply of an aborted EXEC and of LPOP key count on a
	// missing key.
	NullArray = Value{Kind: KindNullArray}
)

func Simple(s string) Value    { return Value{Kind: KindSimple, Str: []byte(s)} }
func Error(msg string) Value   { return Value{Kind: KindError, Str: []byte(msg)} }
func Int(n int64) Value        { return Value{Kind: KindInt, Int: n} }
func Bulk(s string) Value      { return Value{Kind: KindBulk, Str: []byte(s)} }
func BulkBytes(b []byte) Value { return Value{Kind: KindBulk, Str: b} }
func Array(elems ...Value) Value {
	if elems == nil {
		elems = []Value{}
	}
	return Value{Kind: KindArray, Elems: elems}
}
func Set(elems ...Value) Value {
	if elems == nil {
		elems = []Value{}
	}
	return Value{Kind: KindSet, Elems: elems}
}

// Map builds a map from alternating keys and values.
func Map(kv ...Value) Value {
	if kv == nil {
		kv = []Value{}
	}
	return Value{Kind: KindMap, Elems: kv}
}

// BulkArray is an array of bulk strings.
func BulkArray(items [][]byte) Value {
	out := make([]Value, len(items))
	for i, it := range items {
		out[i] = BulkBytes(it)
	}
	return Array(out...)
}

// IsError reports whether v is an error reply.
func (v Value) IsError() bool { return v.Kind == KindError }

// String returns the text of a simple string, error or bulk string.
func (v Value) String() string { return string(v.Str) }

// Append appends v in RESP version proto (2 or 3; anything else is 2) to
// b. Line breaks in simple strings and errors, which RESP cannot carry,
// become spaces, as Redis does.
func (v Value) Append(b []byte, proto int) []byte {
	switch v.Kind {
	case KindSimple:
		return appendLine(append(b, '+'), v.Str)
	case KindError:
		return appendLine(append(b, '-'), v.Str)
	case KindInt:
		b = strconv.AppendInt(append(b, ':'), v.Int, 10)
		return append(b, '\r', '\n')
	case KindBulk:
		b = strconv.AppendInt(append(b, '$'), int64(len(v.Str)), 10)
		b = append(b, '\r', '\n')
		b = append(b, v.Str...)
		return append(b, '\r', '\n')
	case KindNull:
		if proto == 3 {
			return append(b, '_', '\r', '\n')
		}
		return append(b, "$-1\r\n"...)
	case KindNullArray:
		if proto == 3 {
			return append(b, '_', '\r', '\n')
		}
		return append(b, "*-1\r\n"...)
	case KindMap:
		if proto == 3 {
			b = appendHeader(b, '%', len(v.Elems)/2)
		} else {
			b = appendHeader(b, '*', len(v.Elems))
		}
	case KindSet:
		if proto == 3 {
			b = appendHeader(b, '~', len(v.Elems))
		} else {
			b = appendHeader(b, '*', len(v.Elems))
		}
	default: // KindArray, and the zero Value as an empty array
		b = appendHeader(b, '*', len(v.Elems))
	}
	for i := range v.Elems {
		b = v.Elems[i].Append(b, proto)
	}
	return b
}

func appendHeader(b []byte, c byte, n int) []byte {
	b = strconv.AppendInt(append(b, c), int64(n), 10)
	return append(b, '\r', '\n')
}

func appendLine(b, s []byte) []byte {
	for _, c := range s {
		if c == '\r' || c == '\n' {
			c = ' '
		}
		b = append(b, c)
	}
	return append(b, '\r', '\n')
}

// Errors with Redis's exact text.
const (
	ErrWrongType     = "WRONGTYPE Operation against a key holding the wrong kind of value"
	ErrNotInteger    = "ERR value is not an integer or out of range"
	ErrHashNotInt    = "ERR hash value is not an integer"
	ErrOverflow      = "ERR increment or decrement would overflow"
	ErrSyntax        = "ERR syntax error"
	ErrNotPositive   = "ERR value is out of range, must be positive"
	ErrCrossSlot     = "CROSSSLOT Keys in request don't hash to the same slot"
	ErrExecAbort     = "EXECABORT Transaction discarded because of previous errors."
	ErrInvalidCursor = "ERR invalid cursor"
)

// WrongArgs is Redis's arity error for command name (lowercase, as Redis
// writes it).
func WrongArgs(name string) Value {
	return Error("ERR wrong number of arguments for '" + strings.ToLower(name) + "' command")
}

// UnknownCommand is Redis's error for an unknown command: the name (at
// most 128 bytes) and the first arguments, each quoted and followed by a
// space, while the list is shorter than 128 bytes.
func UnknownCommand(argv [][]byte) Value {
	name := argv[0]
	if len(name) > 128 {
		name = name[:128]
	}
	var args strings.Builder
	for _, a := range argv[1:] {
		if args.Len() >= 128 {
			break
		}
		n := 128 - args.Len()
		if len(a) < n {
			n = len(a)
		}
		args.WriteByte('\'')
		args.Write(a[:n])
		args.WriteString("' ")
	}
	return Error("ERR unknown command '" + string(name) + "', with args beginning with: " + args.String())
}
