package enginetest

import "path/filepath"

// ProcessesUnder returns the processes that belong to dir (see Release), with their
// descendants: after a suite's teardown, what it failed to stop.
func ProcessesUnder(dir string) []int { return processesUnder(filepath.Clean(dir)) }

// MountsUnder lists the mount points at or under dir, deepest first.
func MountsUnder(dir string) []string { return mountsUnder(filepath.Clean(dir)) }
