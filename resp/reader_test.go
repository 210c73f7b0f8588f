package resp

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

var testLimits = Limits{MaxArgs: 8, MaxBulk: 32, MaxCommand: 128}

// readAll reads every command of in, and the error that ended it.
func readAll(in string, lim Limits) ([][][]byte, error) {
	r := NewReader(strings.NewReader(in), lim)
	var out [][][]byte
	for {
		argv, err := r.ReadCommand()
		if err != nil {
			return out, err
		}
		out = append(out, argv)
	}
}

func TestReaderCommands(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []string // commands, arguments joined by "|"
		err  string   // the error that ends the stream ("" for io.EOF)
	}{
		{in: "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", want: []string{"GET|k"}},
		{in: "*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$0\r\n\r\n", want: []string{"PING", "ECHO|"}},
		{in: "*0\r\n*-1\r\n\r\n  \r\nPING\r\n", want: []string{"PING"}},
		{in: "set k \"a b\\x41\\n\" 'it\\'s'\n", want: []string{"set|k|a bA\n|it's"}},
		{in: "*1\r\n$4\r\nPI", err: io.ErrUnexpectedEOF.Error()},
		{in: "PIN", err: io.ErrUnexpectedEOF.Error()},
		{in: "*1\r\n$4000000000\r\n", err: "Protocol error: invalid bulk length"},
		{in: "*1\r\n$33\r\n", err: "Protocol error: invalid bulk length"},
		{in: "*1\r\n$-1\r\n", err: "Protocol error: invalid bulk length"},
		{in: "*1\r\n$01\r\nx\r\n", err: "Protocol error: invalid bulk length"},
		{in: "*1\r\n$1\r\nxy\r\n", err: "Protocol error: invalid bulk length"},
		{in: "*1\r\n$1\nx\r\n", err: "Protocol error: invalid bulk length"},
		{in: "*9\r\n", err: "Protocol error: invalid multibulk length"},
		{in: "*x\r\n", err: "Protocol error: invalid multibulk length"},
		{in: "*99999999999999999999999\r\n", err: "Protocol error: invalid multibulk length"},
		{in: "*2\r\n:1\r\n", err: "Protocol error: expected '$', got ':'"},
		{in: "*5\r\n$30\r\n" + strings.Repeat("a", 30) + "\r\n$30\r\n" + strings.Repeat("a", 30) + "\r\n$30\r\n" + strings.Repeat("a", 30) + "\r\n$30\r\n",
			err: "Protocol error: too big command"},
		{in: "*1\r\n$" + strings.Repeat("1", MaxInline+10), err: "Protocol error: too big bulk count string"},
		{in: "*" + strings.Repeat("1", MaxInline+10), err: "Protocol error: too big mbulk count string"},
		{in: strings.Repeat("a", MaxInline+10), err: "Protocol error: too big inline request"},
		{in: "set \"k\n", err: "Protocol error: unbalanced quotes in request"},
		{in: "set \"k\"x\n", err: "Protocol error: unbalanced quotes in request"},
		{in: "a b c d e f g h i\r\n", err: "Protocol error: invalid multibulk length"},
		{in: "get " + strings.Repeat("k", 33) + "\r\n", err: "Protocol error: invalid bulk length"},
		// HTTP on the RESP port.
		{in: "POST / HTTP/1.1\r\nHost: x\r\n", err: ErrCrossProtocol.Error()},
		{in: "GET / HTTP/1.1\r\nHost: x\r\n", err: ErrCrossProtocol.Error()},
		{in: "PING\r\nHost: x\r\n", want: []string{"PING"}, err: ErrCrossProtocol.Error()},
		{in: "*1\r\n$5\r\nhost:\r\n", err: ErrCrossProtocol.Error()},
	} {
		got, err := readAll(tt.in, testLimits)
		var cmds []string
		for _, argv := range got {
			cmds = append(cmds, string(bytes.Join(argv, []byte("|"))))
		}
		if strings.Join(cmds, ",") != strings.Join(tt.want, ",") {
			t.Errorf("%.40q: commands %q, want %q", tt.in, cmds, tt.want)
		}
		wantErr := tt.err
		if wantErr == "" {
			wantErr = io.EOF.Error()
		}
		if err == nil || err.Error() != wantErr {
			t.Errorf("%.40q: error %v, want %s", tt.in, err, wantErr)
		}
		var pe *ProtocolError
		if strings.HasPrefix(wantErr, "Protocol error") && !errors.As(err, &pe) {
			t.Errorf("%.40q: %T is not a *ProtocolError", tt.in, err)
		}
	}
}

// slowReader returns one byte per Read.
type slowReader struct{ s string }

func (r *slowReader) Read(p []byte) (int, error) {
	if r.s == "" {
		return 0, io.EOF
	}
	p[0] = r.s[0]
	r.s = r.s[1:]
	return 1, nil
}

// TestReaderBulkGrowsWithData: a large announced bulk costs memory as
// its bytes arrive, and a bulk sent one byte at a time reads whole.
func TestReaderBulkGrowsWithData(t *testing.T) {
	lim := Limits{MaxArgs: 4, MaxBulk: 1 << 30, MaxCommand: 1 << 30}
	allocs := testing.AllocsPerRun(5, func() {
		_, err := NewReader(strings.NewReader("*1\r\n$1000000000\r\nabc"), lim).ReadCommand()
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("error %v", err)
		}
	})
	if allocs > 10 {
		t.Fatalf("%v allocations", allocs)
	}
	big := strings.Repeat("x", 200<<10)
	argv, err := NewReader(&slowReader{"*2\r\n$3\r\nSET\r\n$204800\r\n" + big + "\r\n"}, lim).ReadCommand()
	if err != nil || len(argv) != 2 || string(argv[1]) != big {
		t.Fatalf("slow big bulk: %d args, %v", len(argv), err)
	}
}

// FuzzReader reads arbitrary bytes as commands: it never panics, every
// command it returns is within the limits, and each written back as a
// RESP array reads again as the same command.
func FuzzReader(f *testing.F) {
	f.Add([]byte("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"))
	f.Add([]byte("PING\r\nset k \"v\\x00\" 'a'\n"))
	f.Add([]byte("*1\r\n$-1\r\n"))
	f.Add([]byte("*3\r\n$4\r\nHSET\r\n$0\r\n\r\n"))
	f.Add([]byte("*1\r\n$4000000000\r\n"))
	f.Add([]byte("POST / HTTP/1.1\r\nHost: x\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		r := NewReader(bytes.NewReader(raw), testLimits)
		for {
			argv, err := r.ReadCommand()
			if err != nil {
				return
			}
			if len(argv) == 0 || len(argv) > testLimits.MaxArgs {
				t.Fatalf("%d args", len(argv))
			}
			for _, a := range argv {
				if len(a) > testLimits.MaxBulk {
					t.Fatalf("arg of %d bytes", len(a))
				}
			}
			wire := BulkArray(argv).Append(nil, 3)
			again, err := NewReader(bytes.NewReader(wire), Limits{MaxArgs: 1 << 20, MaxBulk: 1 << 20, MaxCommand: 1 << 30}).ReadCommand()
			if err != nil {
				t.Fatalf("re-read of %q: %v", wire, err)
			}
			if len(again) != len(argv) {
				t.Fatalf("args %q became %q", argv, again)
			}
			for i := range argv {
				if !bytes.Equal(again[i], argv[i]) {
					t.Fatalf("arg %d %q became %q", i, argv[i], again[i])
				}
			}
			_ = UnknownCommand(argv).Append(nil, 2)
		}
	})
}

func TestCommandSize(t *testing.T) {
	for _, argv := range [][][]byte{{[]byte("PING")}, {[]byte("SET"), []byte("k"), bytes.Repeat([]byte("v"), 1234)}, {{}, {}}} {
		if got, want := CommandSize(argv), len(BulkArray(argv).Append(nil, 2)); got != want {
			t.Errorf("CommandSize(%.20q) = %d, want %d", argv, got, want)
		}
	}
}

// BenchmarkReader reads a pipeline of SET commands with 100-byte values.
func BenchmarkReader(b *testing.B) {
	cmd := BulkArray([][]byte{[]byte("SET"), []byte("asset:12345"), bytes.Repeat([]byte("v"), 100)}).Append(nil, 2)
	in := bytes.Repeat(cmd, 1000)
	lim := Limits{MaxArgs: 1024, MaxBulk: 1 << 20, MaxCommand: 4 << 20}
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		r := NewReader(bytes.NewReader(in), lim)
		for range 1000 {
			if _, err := r.ReadCommand(); err != nil {
				b.Fatal(err)
			}
		}
	}
}
