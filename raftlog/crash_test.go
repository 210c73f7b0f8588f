package raftlog

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"
)

const crashChildEnv = "RAFTLOG_CRASH_CHILD_DIR"

// TestCrashChild is the writer of TestKill9: with crashChildEnv set it
// appends to 4 groups concurrently and prints "group index" after every
// acknowledged StoreLogs until it is killed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		t.Skip("run by TestKill9")
	}
	s, err := Open(Options{Dir: dir})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for id := range uint32(4) {
		g, err := s.Group(id)
		if err != nil {
			fmt.Println("group:", err)
			os.Exit(2)
		}
		wg.Go(func() {
			for i := uint64(1); ; i += 4 {
				if err := g.StoreLogs(entries(i, i+3)); err != nil {
					fmt.Println("store:", err)
					os.Exit(2)
				}
				mu.Lock()
				fmt.Fprintf(os.Stdout, "%d %d\n", id, i+3)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// TestKill9: every index a writer process saw acknowledged is present after
// the process is killed with SIGKILL mid-write.
func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a writer process")
	}
	dir := t.TempDir()
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		acked := map[uint32]uint64{}
		sc := bufio.NewScanner(out)
		lines := 0
		killed := false
		for sc.Scan() {
			var id uint32
			var idx uint64
			if _, err := fmt.Sscanf(sc.Text(), "%d %d", &id, &idx); err != nil {
				t.Fatalf("child: %q", sc.Text())
			}
			acked[id] = max(acked[id], idx)
			lines++
			if lines == 500*(round+1) && !killed {
				cmd.Process.Signal(syscall.SIGKILL)
				killed = true // keep reading what it printed before dying
			}
		}
		cmd.Wait()
		if !killed {
			t.Fatalf("child exited on its own after %d lines", lines)
		}

		s, err := Open(Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		for id, want := range acked {
			g, err := s.Group(id)
			if err != nil {
				t.Fatal(err)
			}
			last, _ := g.LastIndex()
			if last < want {
				t.Fatalf("round %d group %d: last index %d, %d acknowledged", round, id, last, want)
			}
			for i := uint64(1); i <= want; i++ {
				var l raft.Log
				if err := g.GetLog(i, &l); err != nil {
					t.Fatalf("round %d group %d: acknowledged index %d: %v", round, id, i, err)
				}
				assertLogEqual(t, entry(i), &l)
			}
			// The next round's writer starts again at 1: clear the group.
			if err := s.DropGroup(id); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("round %d: killed after %d acknowledged appends, all present", round, lines)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
