package boltstore

import "syscall"

// mmapFlags prefaults the file's pages when bbolt maps it, as etcd does:
// reads then never take a page fault, so a lookup in a large file costs
// about what it does in a small one.
const mmapFlags = syscall.MAP_POPULATE
