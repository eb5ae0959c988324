//go:build !linux

package boltstore

const mmapFlags = 0
