//go:build unix

package main

import "syscall"

// restrictUmask sets the process umask to 077: files the node creates are
// 0600 at most, dirs 0700.
func restrictUmask() { syscall.Umask(0o077) }
