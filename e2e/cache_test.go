package e2e

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCompiledStartWarmsTheCache: a proxy that compiles the module before
// it serves (the in-process stacks here) leaves it marked in the shared
// cache, so a later `chime up` starts with compiled VMs instead of
// switching from interpreted ones while it serves. Being first in the
// package, it also spares the `chime up` tests after it that switch.
func TestCompiledStartWarmsTheCache(t *testing.T) {
	cacheDir := filepath.Join(os.TempDir(), "chime-e2e-cache")
	startStack(t, backends()[0], stackConfig{upstreamPort: freePort(t), hostPort: freePort(t)})
	markers, err := os.ReadDir(filepath.Join(cacheDir, "chime-compiled"))
	if err != nil || len(markers) == 0 {
		t.Fatalf("no compile marker in %s after a compiled start: %v", cacheDir, err)
	}
}
