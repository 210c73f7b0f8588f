// Command machinecost measures what the costs of a swarmkv write rest on,
// so that benchmark figures taken on different machines (or on the same
// VM on different days) can be compared: the CPU cost of a system call, of
// a page fault, and the wall and CPU cost of a small write + fdatasync
// that grows a file (a new WAL) versus one that overwrites written blocks
// (a recycled WAL). docs/performance-log.md quotes its output next to each
// round's figures.
//
//	go run ./scripts/machinecost [-dir DIR] [-n N]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	dir := flag.String("dir", ".", "directory for the fsync test file (the data dir's file system)")
	n := flag.Int("n", 2000, "write+fdatasync rounds per mode")
	flag.Parse()
	if err := run(*dir, *n); err != nil {
		fmt.Fprintln(os.Stderr, "machinecost:", err)
		os.Exit(1)
	}
}

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func run(dir string, n int) error {
	if n < 1 {
		return fmt.Errorf("-n %d: want at least 1", n)
	}
	const calls = 200000
	start := time.Now()
	for i := 0; i < calls; i++ {
		syscall.Getppid()
	}
	fmt.Printf("system call (getppid):        %6.2f us\n", float64(time.Since(start).Nanoseconds())/1e3/calls)

	const mapped = 256 << 20
	page := os.Getpagesize()
	start = time.Now()
	mem, err := syscall.Mmap(-1, 0, mapped, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return err
	}
	for i := 0; i < mapped; i += page {
		mem[i] = 1
	}
	fmt.Printf("page fault (first touch):     %6.2f us\n", float64(time.Since(start).Nanoseconds())/1e3/float64(mapped/page))
	if err := syscall.Munmap(mem); err != nil {
		return err
	}

	buf := make([]byte, 2048)
	for _, overwrite := range []bool{false, true} {
		wall, cpu, err := fsyncCost(filepath.Join(dir, ".machinecost"), buf, n, overwrite)
		if err != nil {
			return err
		}
		mode := "growing a new file   "
		if overwrite {
			mode = "over written blocks  "
		}
		fmt.Printf("2 KiB write+fdatasync, %s %6.1f us wall, %6.1f us CPU\n", mode, wall, cpu)
	}
	return nil
}

// fsyncCost times n rounds of a len(buf) write and an fdatasync into a new
// file at path, either appended (the file grows, as a new WAL does) or over
// blocks written and synced beforehand (as a recycled WAL is).
func fsyncCost(path string, buf []byte, n int, overwrite bool) (wallUs, cpuUs float64, err error) {
	_ = os.Remove(path)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, 0, err
	}
	defer os.Remove(path)
	defer f.Close()
	if overwrite {
		fill := make([]byte, 1<<20)
		for written := 0; written < n*len(buf); written += len(fill) {
			if _, err := f.Write(fill); err != nil {
				return 0, 0, err
			}
		}
		if err := f.Sync(); err != nil {
			return 0, 0, err
		}
		if _, err := f.Seek(0, 0); err != nil {
			return 0, 0, err
		}
	}
	c0, t0 := cpuTime(), time.Now()
	for i := 0; i < n; i++ {
		if _, err := f.Write(buf); err != nil {
			return 0, 0, err
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return 0, 0, err
		}
	}
	wall, cpu := time.Since(t0), cpuTime()-c0
	return float64(wall.Nanoseconds()) / 1e3 / float64(n), float64(cpu.Nanoseconds()) / 1e3 / float64(n), nil
}
