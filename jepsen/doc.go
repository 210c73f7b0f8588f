// Package jepsen is swarmkv's Jepsen-style test harness: workers run
// workloads (register: porcupine-checked linearizable reads and writes;
// ledger: money conserved and no usage event charged twice; registry;
// watch: watchers that reconnect through the faults see every
// acknowledged write exactly once, in commit order; lease: no attached key
// deleted while an acknowledged keep-alive covers it, every abandoned
// lease's keys gone within TTL plus the bound) against a cluster while nemeses inject faults (kill, pause, partition,
// membership changes, leader transfers, shard splits and merges; "a+b"
// injects two together), every operation is recorded in a
// history, and checkers judge the history at the end (Run); the report
// also gives each shard's longest unavailability during a fault
// (Unavailability: the longest wait of a register operation for its
// shard). A Driver runs
// the cluster: InProc (nodes in this process over a fault-injecting
// network, internal/faultnet) or Docker (the compose cluster, faults by
// killing, pausing and disconnecting containers). MemDB and Broken are
// deliberately faulty databases that show each checker catches the fault
// it targets. Command jepsen (cmd/jepsen) is the command-line front.
//
// It imports the Go client, and the core (cluster) with its services (api)
// to run in-process nodes; nothing in the product imports it.
package jepsen
