package api

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestIdentityLimit: an identity holds at most max streams; a refusal is
// ResourceExhausted naming the flag; a release (once, however often it
// is called) frees a place; identities do not share their counts.
func TestIdentityLimit(t *testing.T) {
	l := newIdentityLimit("watchers", "max-watchers-per-identity", 2)
	r1, err := l.admit("token:a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.admit("token:a"); err != nil {
		t.Fatal(err)
	}
	_, err = l.admit("token:a")
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-watchers-per-identity") {
		t.Fatalf("third: %v", err)
	}
	if _, err := l.admit("ip 10.0.0.1"); err != nil {
		t.Fatalf("another identity: %v", err)
	}
	r1()
	r1() // a second release changes nothing
	if _, err := l.admit("token:a"); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if _, err := l.admit("token:a"); err == nil {
		t.Fatal("a double release freed two places")
	}
}
