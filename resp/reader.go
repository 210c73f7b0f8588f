package resp

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"slices"
	"strconv"
)

// Reading commands. A client sends a command as a RESP array of bulk
// strings, or as an inline line (telnet style):
//
//	*<argc>\r\n            then argc times:  $<len>\r\n<len bytes>\r\n
//	SET k "a b"\r\n        inline: split like Redis's sdssplitargs
//
// Reader checks every bound as soon as the header that announces a size
// arrives, before it buffers what the header announces, so a client
// cannot make the node hold more than Limits allow (a "$4000000000"
// header costs nothing). Memory for a bulk grows with the bytes actually
// received, not with the announced length. Over a bound, or on bad
// framing, ReadCommand returns a *ProtocolError whose text is Redis's
// ("Protocol error: invalid bulk length", ...): the server answers
// "-ERR " + its text and closes the connection, as Redis does.

// Limits bound one command. Every field must be positive.
type Limits struct {
	MaxArgs    int // arguments, the command name included
	MaxBulk    int // bytes of one argument
	MaxCommand int // bytes of the whole command on the wire, headers included
}

// MaxInline is the longest inline command line (Redis's
// PROTO_INLINE_MAX_SIZE); a header line ($n, *n) may not be longer
// either.
const MaxInline = 64 << 10

// ProtocolError is a framing error or a bound exceeded. The connection
// cannot be read further.
type ProtocolError struct{ Msg string }

func (e *ProtocolError) Error() string { return "Protocol error: " + e.Msg }

// ErrCrossProtocol is returned for a command named POST or Host: and for
// an inline line that ends with an HTTP version ("GET / HTTP/1.1"):
// someone sends HTTP to the RESP port, as in a cross-protocol attack from
// a browser. Redis closes such a connection without a reply.
var ErrCrossProtocol = errors.New("resp: HTTP request on the RESP port")

var (
	errMultibulkLen = &ProtocolError{"invalid multibulk length"}
	errBulkLen      = &ProtocolError{"invalid bulk length"}
	errBigMbulk     = &ProtocolError{"too big mbulk count string"}
	errBigBulk      = &ProtocolError{"too big bulk count string"}
	errBigInline    = &ProtocolError{"too big inline request"}
	errBigCommand   = &ProtocolError{"too big command"}
	errQuotes       = &ProtocolError{"unbalanced quotes in request"}
)

// Reader reads commands from a connection.
type Reader struct {
	br *bufio.Reader
	// Limits apply from the next ReadCommand on (a server may tighten
	// them before a client has authenticated).
	Limits Limits
}

// readBufSize is the read buffer of a connection (Redis's PROTO_IOBUF_LEN).
const readBufSize = 16 << 10

// NewReader returns a Reader of r with a 16 KiB buffer.
func NewReader(r io.Reader, lim Limits) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, readBufSize), Limits: lim}
}

// Buffered returns the number of bytes read from the connection but not
// yet parsed: a server flushes its replies when it is 0 (the client's
// pipeline is drained).
func (r *Reader) Buffered() int { return r.br.Buffered() }

// ReadCommand returns the next command's arguments (never empty; empty
// inline lines and "*0" arrays are skipped, as Redis does). The slices
// are the caller's.
func (r *Reader) ReadCommand() ([][]byte, error) {
	for {
		c, err := r.br.Peek(1)
		if err != nil {
			return nil, err
		}
		var argv [][]byte
		if c[0] == '*' {
			argv, err = r.readMultibulk()
		} else {
			argv, err = r.readInline()
		}
		if err != nil {
			return nil, err
		}
		if len(argv) == 0 {
			continue
		}
		if name := argv[0]; bytes.EqualFold(name, []byte("post")) || bytes.EqualFold(name, []byte("host:")) {
			return nil, ErrCrossProtocol
		}
		return argv, nil
	}
}

// readLine returns the next line without its "\n" (and "\r" when crlf
// is false: inline lines may end with a bare "\n"; with crlf true the
// "\r" must be there). The slice is valid until the next read. big is
// the error for a line longer than MaxInline.
func (r *Reader) readLine(big *ProtocolError) ([]byte, error) {
	line, err := r.br.ReadSlice('\n')
	if err == nil {
		return line[:len(line)-1], nil
	}
	if !errors.Is(err, bufio.ErrBufferFull) {
		return nil, err
	}
	// Longer than the buffer: copy, up to MaxInline.
	long := bytes.Clone(line)
	for {
		if len(long) >= MaxInline { // and no newline yet
			return nil, big
		}
		line, err = r.br.ReadSlice('\n')
		long = append(long, line...)
		switch {
		case err == nil && len(long) <= MaxInline+1:
			return long[:len(long)-1], nil
		case err == nil || errors.Is(err, bufio.ErrBufferFull):
			continue // over MaxInline is checked above
		case len(long) >= MaxInline:
			return nil, big
		default:
			return nil, err
		}
	}
}

func (r *Reader) readMultibulk() ([][]byte, error) {
	lim := r.Limits
	line, err := r.readLine(errBigMbulk)
	if err != nil {
		return nil, eof(err)
	}
	total := len(line) + 1
	n, ok := parseLen(line, 1)
	if !ok || n > int64(lim.MaxArgs) {
		return nil, errMultibulkLen
	}
	if n <= 0 {
		return nil, nil // Redis ignores *0 and *-1
	}
	argv := make([][]byte, 0, min(n, 64))
	var arena []byte // small arguments share allocations
	for range n {
		line, err := r.readLine(errBigBulk)
		if err != nil {
			return nil, eof(err)
		}
		if len(line) == 0 || line[0] != '$' {
			got := "\\n"
			if len(line) > 0 {
				got = string(line[0])
			}
			return nil, &ProtocolError{"expected '$', got '" + got + "'"}
		}
		size, ok := parseLen(line, 1)
		if !ok || size < 0 || size > int64(lim.MaxBulk) {
			return nil, errBulkLen
		}
		total += len(line) + 1 + int(size) + 2
		if total > lim.MaxCommand {
			return nil, errBigCommand
		}
		var arg []byte
		if size <= 512 {
			if cap(arena)-len(arena) < int(size) {
				arena = make([]byte, 0, min(max(2*cap(arena), 128, int(size)), 4096))
			}
			arg = arena[len(arena) : len(arena)+int(size) : len(arena)+int(size)]
			arena = arena[:len(arena)+int(size)]
			_, err = io.ReadFull(r.br, arg)
		} else {
			arg, err = readBulk(r.br, int(size))
		}
		if err != nil {
			return nil, eof(err)
		}
		if crlf, err := r.br.Peek(2); err != nil {
			return nil, eof(err)
		} else if crlf[0] != '\r' || crlf[1] != '\n' {
			return nil, errBulkLen
		}
		_, _ = r.br.Discard(2)
		argv = append(argv, arg)
	}
	return argv, nil
}

// readBulk reads size bytes, growing its buffer as they arrive (a client
// that announces much and sends little costs little).
func readBulk(br *bufio.Reader, size int) ([]byte, error) {
	b := make([]byte, 0, min(size, 64<<10))
	for len(b) < size {
		if len(b) == cap(b) {
			b = slices.Grow(b, min(len(b), size-len(b)))
		}
		n, err := br.Read(b[len(b):min(cap(b), size)])
		b = b[:len(b)+n]
		if err != nil && len(b) < size {
			return nil, err
		}
	}
	return b, nil
}

// eof turns a clean EOF in the middle of a command into ErrUnexpectedEOF.
func eof(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// parseLen parses line[from:] as Redis's string2ll does: an optional
// '-', decimal digits, no leading zeros, no sign on zero.
func parseLen(line []byte, from int) (int64, bool) {
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	} else {
		return 0, false // the header must end with \r\n
	}
	s := line[from:]
	if len(s) == 0 || len(s) > 20 {
		return 0, false
	}
	neg := s[0] == '-'
	d := s
	if neg {
		d = s[1:]
	}
	if len(d) == 0 || (d[0] == '0' && (len(d) > 1 || neg)) {
		return 0, false
	}
	for _, c := range d {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(string(s), 10, 64)
	return v, err == nil
}

func (r *Reader) readInline() ([][]byte, error) {
	line, err := r.readLine(errBigInline)
	if err != nil {
		return nil, eof(err) // a partial line runs nothing
	}
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	argv, ok := SplitArgs(line)
	if !ok {
		return nil, errQuotes
	}
	if len(argv) > r.Limits.MaxArgs {
		return nil, errMultibulkLen
	}
	for _, a := range argv {
		if len(a) > r.Limits.MaxBulk {
			return nil, errBulkLen
		}
	}
	if len(argv) == 3 && bytes.HasPrefix(argv[2], []byte("HTTP/")) {
		return nil, ErrCrossProtocol // "GET / HTTP/1.1"
	}
	return argv, nil
}

// SplitArgs splits an inline command line as Redis's sdssplitargs does:
// arguments separated by spaces, tabs or newlines; "double quotes" with
// the escapes \n \r \t \b \a \\ \" and \xHH; 'single quotes' with \'. A
// closing quote must be followed by a space or the end. ok is false for
// unbalanced quotes.
func SplitArgs(line []byte) (argv [][]byte, ok bool) {
	isSpace := func(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\v' || c == '\f' }
	i := 0
	for {
		for i < len(line) && isSpace(line[i]) {
			i++
		}
		if i == len(line) {
			return argv, true
		}
		var cur []byte
		inq, insq, done := false, false, false
		for !done {
			switch {
			case inq:
				switch {
				case i >= len(line):
					return nil, false
				case line[i] == '\\' && i+3 < len(line) && line[i+1] == 'x' && isHex(line[i+2]) && isHex(line[i+3]):
					cur = append(cur, unhex(line[i+2])<<4|unhex(line[i+3]))
					i += 3
				case line[i] == '\\' && i+1 < len(line):
					i++
					c := line[i]
					switch c {
					case 'n':
						c = '\n'
					case 'r':
						c = '\r'
					case 't':
						c = '\t'
					case 'b':
						c = '\b'
					case 'a':
						c = '\a'
					}
					cur = append(cur, c)
				case line[i] == '"':
					if i+1 < len(line) && !isSpace(line[i+1]) {
						return nil, false
					}
					done = true
				default:
					cur = append(cur, line[i])
				}
			case insq:
				switch {
				case i >= len(line):
					return nil, false
				case line[i] == '\\' && i+1 < len(line) && line[i+1] == '\'':
					i++
					cur = append(cur, '\'')
				case line[i] == '\'':
					if i+1 < len(line) && !isSpace(line[i+1]) {
						return nil, false
					}
					done = true
				default:
					cur = append(cur, line[i])
				}
			default:
				switch {
				case i >= len(line) || isSpace(line[i]):
					done = true
				case line[i] == '"':
					inq = true
				case line[i] == '\'':
					insq = true
				default:
					cur = append(cur, line[i])
				}
			}
			if i < len(line) {
				i++
			}
		}
		if cur == nil {
			cur = []byte{}
		}
		argv = append(argv, cur)
	}
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

// CommandSize returns the bytes of argv sent as a RESP array of bulk
// strings (what Limits.MaxCommand counts).
func CommandSize(argv [][]byte) int {
	n := 1 + decLen(len(argv)) + 2
	for _, a := range argv {
		n += 1 + decLen(len(a)) + 2 + len(a) + 2
	}
	return n
}

func decLen(n int) int {
	d := 1
	for n >= 10 {
		n /= 10
		d++
	}
	return d
}
