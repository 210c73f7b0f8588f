package replica

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// FuzzReadIncarnation: any bytes in a replica folder's incarnation record
// are read back as an incarnation or refused with an error, never a panic;
// what Open writes (decimal, newline) reads back as itself.
func FuzzReadIncarnation(f *testing.F) {
	for _, s := range []string{"0\n", "7\n", "18446744073709551615\n", "", "\n", "x", "-1\n", "18446744073709551616\n", "1 2\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, incarnationFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
		inc, found, err := ReadIncarnation(dir)
		if err != nil {
			if found || inc != 0 {
				t.Fatalf("refused record %q read as %d, found %v", b, inc, found)
			}
			return
		}
		if !found {
			t.Fatalf("record %q not found", b)
		}
		if err := os.WriteFile(filepath.Join(dir, incarnationFile), []byte(strconv.FormatUint(inc, 10)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if again, found, err := ReadIncarnation(dir); err != nil || !found || again != inc {
			t.Fatalf("%d written back reads %d %v %v", inc, again, found, err)
		}
	})
}
