package filter

import (
	"testing"
	"unsafe"
)

// TestContextSize: every request allocates an httpContext. Up to 512
// bytes it is allocated as most of a request's objects are; above that
// it takes the allocator's path for objects with a malloc header, code
// (18 KB of machine code under wazero) that nothing else a quiet request
// does runs, and that a request under load finds cold
// (docs/performance.md).
func TestContextSize(t *testing.T) {
	if n := unsafe.Sizeof(httpContext{}); n > 512 {
		t.Fatalf("httpContext is %d bytes, more than 512: move what most requests do not use behind a pointer", n)
	}
}
