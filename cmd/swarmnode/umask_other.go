//go:build !unix

package main

// restrictUmask: no umask outside Unix; the data dir is still created 0700.
func restrictUmask() {}
