//go:build race

package cluster

// raceEnabled: the race detector slows the nodes several times over.
const raceEnabled = true
